"""Environments: specs are parsed strictly, venvs are cached, and a broken one is rebuilt."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from env_specs import BASELINE_SPEC
from torchcanary.envs import cache as cache_module
from torchcanary.envs.cache import MARKER, ensure_environment, verify
from torchcanary.envs.spec import parse_env_spec
from torchcanary.errors import EnvSpecError


def test_requirement_order_does_not_change_the_cache_key():
    one = parse_env_spec("torch==2.13.0 numpy")
    other = parse_env_spec("numpy  torch==2.13.0")
    assert one.cache_key("3.11") == other.cache_key("3.11")
    assert one.cache_key("3.11") != one.cache_key("3.12")


@pytest.mark.parametrize("text", ["", "torch==2.13.0 $(rm -rf /)", "numpy", "python:/nope"])
def test_bad_specs_are_refused(text):
    with pytest.raises(EnvSpecError):
        parse_env_spec(text)


def test_current_and_interpreter_specs_point_at_an_interpreter(baseline_env):
    spec = parse_env_spec(f"python:{baseline_env.python}")
    assert spec.kind == "python" and spec.python == baseline_env.python
    assert parse_env_spec("current").kind == "current"


@pytest.mark.torch_envs
def test_verify_checks_the_pinned_version_by_importing_torch(baseline_env):
    assert verify(baseline_env.python, parse_env_spec("torch==2.13.0")).startswith("2.13.0")
    assert verify(baseline_env.python, parse_env_spec("torch==2.14.1")) is None


@pytest.mark.torch_envs
def test_cached_env_is_reused_and_a_broken_one_is_detected_and_rebuilt(
    baseline_env, tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCHCANARY_CACHE", str(tmp_path))
    spec = parse_env_spec("torch==2.13.0 numpy")
    copy = tmp_path / "envs" / Path(baseline_env.path).name
    copy.parent.mkdir(parents=True)
    # A hard-linked copy of the real env stands in for a cache entry built earlier.
    subprocess.run(["cp", "-al", baseline_env.path, str(copy)], check=True)
    (copy / "bin" / "python").unlink()
    (copy / "bin" / "python").symlink_to(Path(baseline_env.python).resolve())
    reused = ensure_environment("baseline", spec)
    assert reused.reused and reused.path == str(copy)

    # Verified once, the same files are not imported again on the next run...
    imports: list[str] = []
    real_verify = cache_module.verify
    monkeypatch.setattr(
        cache_module, "verify", lambda python, s: imports.append(python) or real_verify(python, s)
    )
    again = ensure_environment("baseline", spec)
    assert imports == [] and again.torch_version == reused.torch_version
    # ...but a package added or removed since (the folder changed) is verified again.
    site = next(copy.glob("lib/python*/site-packages"))
    (site / "added_since.py").write_text("")
    assert ensure_environment("baseline", spec).torch_version == reused.torch_version
    assert len(imports) == 1

    torch_init = next(copy.glob("lib/python*/site-packages/torch/__init__.py"))
    torch_init.unlink()  # the kind of damage an interrupted pip leaves
    (tmp_path / "envs" / f"{copy.name}.building").mkdir()  # and a leftover half-build
    # Rebuilt by pip this time: the same environment uv (the default) built for the fixture.
    rebuilt = ensure_environment("baseline", spec, installer="pip")
    assert not rebuilt.reused and rebuilt.torch_version.startswith("2.13.0")
    assert (copy / MARKER).is_file()
    assert not (tmp_path / "envs" / f"{copy.name}.building").exists()
    assert json.loads((Path(baseline_env.path) / MARKER).read_text())["installer"] == "uv"
    assert _packages(rebuilt.python) == _packages(baseline_env.python)
    for env in (rebuilt, baseline_env):  # import_torch must not time the byte-compiler
        assert next(Path(env.path).glob("lib/python*/site-packages/torch/__pycache__/*.pyc"))
    shutil.rmtree(copy)


@pytest.mark.torch_envs
def test_an_environment_reached_through_linked_caches_keeps_its_path_and_is_not_imported_again(
    baseline_env, tmp_path, monkeypatch
):
    """Two caches whose envs/ link to one shared folder (as each test's cache does here): the
    environment keeps its one real path, so its scripts are not rewritten for each link's path
    and torch is not imported again to verify it (it was, 71 times in one suite run)."""
    imports: list[str] = []
    monkeypatch.setattr(cache_module, "verify", lambda python, spec: imports.append(python))
    shared = Path(baseline_env.path).parent
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "envs").symlink_to(shared, target_is_directory=True)
        monkeypatch.setenv("TORCHCANARY_CACHE", str(tmp_path / name))
        env = ensure_environment("baseline", parse_env_spec(BASELINE_SPEC))
        assert env.reused and env.path == str(Path(baseline_env.path).resolve())
    assert imports == []


def _packages(python: str) -> list[str]:
    """What ``pip freeze`` lists, pip itself included (the overlays install with it)."""
    listing = subprocess.run(
        [python, "-m", "pip", "list", "--format", "freeze"],
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(listing.stdout.split())
