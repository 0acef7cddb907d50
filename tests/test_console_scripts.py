"""Console scripts: a cached environment is used like one the user built themselves.

pip writes the interpreter's path into every console script (``torchrun``, ``pip``). Those
scripts must start the environment's own interpreter wherever the cache put it; an
environment whose scripts point elsewhere (as older builds in ``<key>.building`` left them)
is repaired where it lies, not rebuilt; the stack's overlay gets copies that start its own
interpreter, so ``torchrun``'s workers see the user's project; and a script that cannot start
is reported as such, not as a missing program.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from torchcanary.envs.cache import ensure_environment
from torchcanary.envs.scripts import header, read_script, stale_scripts
from torchcanary.envs.spec import parse_env_spec
from torchcanary.user_command.overlay import create_overlay
from torchcanary.user_command.session import run_command


def _fake_torch_wheel(folder: Path) -> Path:
    """A real wheel of a stand-in ``torch`` 0.0.1 whose console script prints its sys.prefix.

    pip installs it offline in seconds and writes the console script itself, so the test
    builds an environment exactly as a real one is built, without gigabytes of torch.
    """
    files = {
        "torch/__init__.py": (
            '__version__ = "0.0.1"\n\n\ndef main():\n'
            '    import sys\n\n    print("fake torchrun in", sys.prefix)\n'
        ),
        "torch-0.0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: 0.0.1\n",
        "torch-0.0.1.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: torchcanary-tests\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        ),
        "torch-0.0.1.dist-info/entry_points.txt": "[console_scripts]\nfaketorchrun = torch:main\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append("torch-0.0.1.dist-info/RECORD,,")
    files["torch-0.0.1.dist-info/RECORD"] = "\n".join(record) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "torch-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


@pytest.fixture
def fake_torch_spec(tmp_path):
    wheels = _fake_torch_wheel(tmp_path / "wheels").parent
    return parse_env_spec(f"torch==0.0.1 --no-index --find-links={wheels}")


def _runs(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Execute ``script`` itself, as a shell or Popen would: through its first line.

    A script whose interpreter is missing cannot even start; that comes back as exit 127,
    the shell's "required file not found".
    """
    try:
        return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=300)
    except FileNotFoundError as exc:
        return subprocess.CompletedProcess([str(script), *args], 127, "", str(exc))


def test_a_freshly_built_env_has_console_scripts_that_run(fake_torch_spec, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHCANARY_CACHE", str(tmp_path / "cache"))
    env = ensure_environment("baseline", fake_torch_spec)
    assert not env.reused and env.torch_version == "0.0.1"
    tool = _runs(Path(env.path) / "bin" / "faketorchrun")
    assert tool.returncode == 0 and tool.stdout.strip() == f"fake torchrun in {env.path}"
    assert _runs(Path(env.path) / "bin" / "pip", "--version").returncode == 0
    assert stale_scripts(Path(env.path)) == []
    assert list((tmp_path / "cache" / "envs").glob("*.building")) == []


def test_a_moved_cached_env_has_its_scripts_repaired_in_place_not_rebuilt(
    fake_torch_spec, tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCHCANARY_CACHE", str(tmp_path / "old"))
    built = Path(ensure_environment("baseline", fake_torch_spec).path)
    # Like an env an older torchcanary built in `<key>.building` and renamed: every script
    # names an interpreter that is no longer there.
    (tmp_path / "old").rename(tmp_path / "new")
    monkeypatch.setenv("TORCHCANARY_CACHE", str(tmp_path / "new"))
    moved = tmp_path / "new" / "envs" / built.name
    tool = moved / "bin" / "faketorchrun"
    assert _runs(tool).returncode == 127
    package = next(moved.glob("lib/python*/site-packages/torch/__init__.py"))
    inode = package.stat().st_ino

    env = ensure_environment("baseline", fake_torch_spec)
    assert env.reused and env.path == str(moved)
    assert package.stat().st_ino == inode  # repaired, not reinstalled
    assert _runs(tool).stdout.strip() == f"fake torchrun in {moved}"
    assert _runs(moved / "bin" / "pip", "--version").returncode == 0
    assert stale_scripts(moved) == []
    activated = subprocess.run(
        ["bash", "-c", f'source "{moved}/bin/activate" && echo "$VIRTUAL_ENV" && type -P python'],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert activated == [str(moved), str(moved / "bin" / "python")]
    for name in ("activate.csh", "activate.fish"):
        assert str(built) not in (moved / "bin" / name).read_text()


def test_a_script_path_too_long_for_a_shebang_gets_the_shell_trampoline(tmp_path):
    deep = tmp_path.joinpath(*["a-long-directory-name"] * 8)
    (deep / "bin").mkdir(parents=True)
    (deep / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    script = deep / "bin" / "hello"
    python = str(deep / "bin" / "python")
    script.write_bytes(header(python) + b"print('hello from', __import__('sys').prefix)\n")
    script.chmod(0o755)
    assert header(python).startswith(b"#!/bin/sh\n")
    parsed = read_script(script)
    assert parsed is not None and parsed.interpreter == python
    assert _runs(script).stdout.startswith("hello from")


@pytest.mark.torch_envs
@pytest.mark.parametrize("role_env", ["baseline_env", "candidate_env"])
def test_a_cached_torch_env_built_elsewhere_runs_torchrun_pip_and_torchfrtrace(
    role_env, request, tmp_path, monkeypatch
):
    real = request.getfixturevalue(role_env)
    # The shared cache's own environment works once it has been used...
    assert _runs(Path(real.path) / "bin" / "torchrun", "--help").returncode == 0
    # ...and so does a copy whose scripts name `<key>.building`, as the old builds left them.
    monkeypatch.setenv("TORCHCANARY_CACHE", str(tmp_path))
    copy = tmp_path / "envs" / Path(real.path).name
    copy.parent.mkdir(parents=True)
    subprocess.run(["cp", "-al", real.path, str(copy)], check=True)  # hard links: cheap
    for script in (read_script(path) for path in sorted((copy / "bin").iterdir())):
        if script is not None:
            script.path.unlink()  # never write through a hard link into the shared cache
            script.path.write_bytes(header(f"{copy}.building/bin/python") + script.body)
            script.path.chmod(0o755)
    assert _runs(copy / "bin" / "torchrun", "--help").returncode == 127

    env = ensure_environment(real.role, real.spec)
    assert env.reused and env.path == str(copy)
    for tool, args in (("torchrun", "--help"), ("torchfrtrace", "--help"), ("pip", "--version")):
        ran = _runs(copy / "bin" / tool, args)
        assert ran.returncode == 0, f"{tool}: {ran.stderr[-500:]}"
    assert not (copy / "bin" / "torchrun").samefile(Path(real.path) / "bin" / "torchrun")
    shutil.rmtree(copy)


def test_the_overlay_gets_the_base_tools_started_by_its_own_interpreter(
    fake_torch_spec, tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCHCANARY_CACHE", str(tmp_path / "cache"))
    base = ensure_environment("baseline", fake_torch_spec)
    overlay = create_overlay("baseline", base.python, base.path, tmp_path / "overlay")
    tool = overlay.path / "bin" / "faketorchrun"
    # Its own interpreter, so what torchrun spawns sees what was installed into the overlay.
    assert _runs(tool).stdout.strip() == f"fake torchrun in {overlay.path}"
    assert _runs(overlay.path / "bin" / "pip", "--version").returncode == 0


def test_a_script_whose_interpreter_is_gone_is_reported_as_such(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "sometool"
    script.write_bytes(header(str(tmp_path / "gone.building" / "bin" / "python")) + b"pass\n")
    script.chmod(0o755)
    outcome = run_command(
        ["sometool"],
        cwd=tmp_path,
        env={"PATH": str(bin_dir)},
        timeout_s=60,
        log_path=tmp_path / "output.log",
    )
    assert outcome.status == "not-found"
    assert f"is at {script}" in outcome.error and "gone.building" in outcome.error
