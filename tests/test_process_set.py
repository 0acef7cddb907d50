"""A drill's processes: tagged so cleanup finds them all, their temporary files kept apart."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from torchcanary.process_set import SCOPE_VARIABLE, TOKEN_VARIABLE, ProcessSet

MAKES_A_TEMP_FOLDER = (
    "import tempfile, time\nprint(tempfile.mkdtemp(prefix='torchelastic_'), flush=True)\n"
    "time.sleep(120)\n"
)


def test_drill_process_carries_token_and_scope_and_its_temp_files_go_when_it_is_killed(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(SCOPE_VARIABLE, "ci-job-7")
    procs = ProcessSet(tmp_path / "drill" / "logs")
    proc = procs.start("job", [sys.executable, "-c", MAKES_A_TEMP_FOLDER], {})
    deadline = time.monotonic() + 60
    while not procs.log_tail("job").strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
    assert f"{TOKEN_VARIABLE}={procs.token}".encode() in environ
    assert f"{SCOPE_VARIABLE}=ci-job-7".encode() in environ  # whoever ran us finds it
    made = Path(procs.log_tail("job").strip())
    assert made.parent == procs.tmp_dir.absolute() == tmp_path / "drill" / "tmp"
    assert procs.kill_all() == [proc.pid]  # torchrun killed like this never cleans up
    assert procs.alive() == [] and not procs.tmp_dir.exists()


def test_a_job_that_names_its_own_tmpdir_keeps_it(tmp_path):
    procs = ProcessSet(tmp_path / "logs")
    own = tmp_path / "own-tmp"
    own.mkdir()
    proc = procs.start(
        "job",
        [sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
        {"TMPDIR": str(own)},
    )
    proc.wait(timeout=60)
    assert procs.log_tail("job").strip() == str(own)
    procs.kill_all()
    assert own.is_dir() and not procs.tmp_dir.exists()
