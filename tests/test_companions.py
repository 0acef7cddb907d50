"""The torch family moves with torch: torchvision paired per side from its own metadata, a
pin that cannot match refused in one line, a build mismatch named for what it is.

The releases come from the configured indexes: torchvision 0.28.0 requires torch==2.13.0,
0.29.1 torch>=2.14.0, and every one of them is the index's default (cu130) build, so the
baseline's ``2.13.0+cpu`` torch beside it is a build mismatch on this machine.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_helpers import FIXTURES, run_canary, run_canary_here
from torchcanary.config import load_settings
from torchcanary.envs.build_mismatch import Installed, recognise
from torchcanary.envs.prepare import requirement_set_companions
from torchcanary.envs.spec import parse_env_spec
from torchcanary.errors import ConfigError, EnvSpecError

PROJECT_ARGS = ("--stack", "pytest tests", "--with", "-e exact", "--with", "-e range")


def test_a_requirement_set_gets_the_torchvision_made_for_its_torch() -> None:
    spec = parse_env_spec("torch==2.14.1 torchvision")
    unchanged, found = requirement_set_companions("candidate", spec, "as-given")
    assert unchanged == spec
    assert [(c.name, c.version, c.needs, c.paired) for c in found] == [
        ("torchvision", "0.29.1", ">=2.14.0", False)
    ]
    pinned = parse_env_spec("torch==2.14.1 torchvision==0.28.0")
    paired, _ = requirement_set_companions("candidate", pinned, "auto")
    assert paired.requirements == ("torch==2.14.1", "torchvision==0.29.1")


def test_a_requirement_set_pinned_for_another_torch_is_refused_before_it_is_built() -> None:
    spec = parse_env_spec("torch==2.14.1 torchvision==0.28.0")
    with pytest.raises(EnvSpecError) as refused:
        requirement_set_companions("candidate", spec, "as-given")
    assert str(refused.value) == (
        "torchvision==0.28.0 (--candidate 'torch==2.14.1 torchvision==0.28.0') needs torch "
        "2.13.0; for the candidate's torch 2.14.1 use torchvision==0.29.1, or let "
        "torchcanary pair it with `--companions auto`"
    )


@pytest.mark.torch_envs
def test_a_project_pin_made_for_the_baseline_is_refused_in_one_line_before_the_run(
    tmp_path: Path,
) -> None:
    project = tmp_path / "vision_projects"
    shutil.copytree(FIXTURES / "vision_projects", project)
    result = run_canary_here("run", "--only", "stack", *PROJECT_ARGS, "--quiet", cwd=project)
    assert result.returncode == 2
    assert result.stderr == (
        f"torchcanary: error: torchvision==0.28.0 (project {project / 'exact'}) needs torch "
        "2.13.0; for the candidate's torch 2.14.1+cu130 use torchvision==0.29.1, or let "
        "torchcanary pair it with `--companions auto`\n"
    )
    assert not (project / "canary-results" / "latest").exists()  # no run was started


@pytest.mark.torch_envs
def test_torchvision_projects_run_paired_per_side_and_the_cpu_build_mismatch_is_named(
    tmp_path: Path,
) -> None:
    """One run for both dependency styles (an exact pin and a range), the environment table
    and the named build mismatch: installing torchvision twice per check costs minutes."""
    project = tmp_path / "vision_projects"
    shutil.copytree(FIXTURES / "vision_projects", project)
    result = run_canary(
        "run", "--only", "stack", "--skip", "calls", *PROJECT_ARGS,
        "--companions", "auto", "--reruns", "0", "--quiet",
        cwd=project,
    )  # fmt: skip
    out = project / "canary-results" / "latest"
    assert (out / "summary.md").is_file(), result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    family = {
        role: [
            (row["name"], row["build"], row.get("given"), row.get("paired"))
            for row in results["environments"][role]["manifest"]["torch_family"]
        ]
        for role in ("baseline", "candidate")
    }
    assert family == {
        "baseline": [
            ("torch", "2.13.0+cpu", None, None),
            ("torchvision", "0.28.0+cu130", "torchvision==0.28.0", False),
            ("torchvision", "0.28.0+cu130", "torchvision>=0.28,<0.30", False),
        ],
        "candidate": [
            ("torch", "2.14.1+cu130", None, None),
            ("torchvision", "0.29.1+cu130", "torchvision==0.28.0", True),
            ("torchvision", "0.29.1+cu130", "torchvision>=0.28,<0.30", False),
        ],
    }
    summary = (out / "summary.md").read_text()
    assert (
        "- baseline (torch 2.13.0+cpu): pytest-error - build mismatch: torchvision "
        "0.28.0+cu130 is not built for this side's torch 2.13.0+cpu (operator "
        "torchvision::nms does not exist); the releases match but the builds differ "
        "(torchvision cu130, torch cpu): install torchvision 0.28.0 in the cpu build, from "
        "the index torch 2.13.0+cpu came from; exited with status 2"
    ) in summary
    assert "- candidate (torch 2.14.1+cu130): passed - exited with status 0: 2 passed" in summary
    assert "Your calls, replayed" not in summary  # --skip calls wins over --stack
    assert (
        f"| torchvision (project {project / 'exact'}) | 0.28.0+cu130, for torch 2.13.0; build "
        "mismatch: cu130 build beside torch's cpu | 0.29.1+cu130, for torch >=2.14.0 (paired; "
        "torchvision==0.28.0 was given) |"
    ) in summary
    page = (out / "report.html").read_text()
    assert (
        f"<tr><td>torchvision (project {project / 'exact'})</td><td>0.28.0+cu130, for torch "
        "2.13.0; build mismatch: cu130 build beside torch&#x27;s cpu</td><td>0.29.1+cu130, "
        "for torch &gt;=2.14.0 (paired; torchvision==0.28.0 was given)</td></tr>"
    ) in page


TORCH_CPU = Installed("2.13.0+cpu")


def test_an_undefined_symbol_in_a_companion_is_named_with_the_release_it_needs() -> None:
    # constructed: the loader's words when torchaudio 2.14's extension meets torch 2.13
    output = (
        "OSError: /venv/lib/python3.11/site-packages/torchaudio/lib/libtorchaudio.so: "
        "undefined symbol: _ZN3c1017RegisterOperatorsD1Ev"
    )
    family = {"torch": TORCH_CPU, "torchaudio": Installed("2.14.1+cu130", "torch==2.14.1")}
    assert recognise(output, family) == (
        "build mismatch: torchaudio 2.14.1+cu130 is not built for this side's torch "
        "2.13.0+cpu (/torchaudio/lib/libtorchaudio.so: undefined symbol: "
        "_ZN3c1017RegisterOperatorsD1Ev); it needs torch==2.14.1: install the torchaudio "
        "release made for torch 2.13.0, or let torchcanary pair it with `--companions auto`"
    )


def test_a_failure_without_a_companion_signature_is_left_as_it_is() -> None:
    family = {"torch": TORCH_CPU, "torchvision": Installed("0.28.0+cu130", "torch==2.13.0")}
    assert recognise("AssertionError: assert 2 == 3", family) is None
    # the operator's namespace names a package this side does not have
    assert recognise("operator torchaudio::lfilter does not exist", family) is None


def test_companions_in_a_config_file_take_one_of_the_two_modes(tmp_path: Path) -> None:
    (tmp_path / "canary.toml").write_text('companions = "auto"\n')
    assert load_settings(None, {}, tmp_path).plan.companions == "auto"
    (tmp_path / "canary.toml").write_text('companions = "latest"\n')
    with pytest.raises(ConfigError) as refused:
        load_settings(None, {}, tmp_path)
    assert str(refused.value) == (
        "companions must be one of as-given, auto, not 'latest': auto pairs torchvision and "
        "the rest of the torch family with each side's torch"
    )
