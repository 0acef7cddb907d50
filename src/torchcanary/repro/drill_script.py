"""The writer for a drill that now fails (kind ``fault``): the user's job, written beside
the script (``job/``), started by the torchrun line the drill used with the variables it
set, and struck as the drill strikes it: SIGKILL (``kill``) or SIGSTOP (``hang``) to the
target rank's first launch once the job prints step ``at_step`` (under data parallelism no
rank finishes a step before every rank joined it, so any rank's step line is the job's).

The script prints how the job ended first: ``recovered: ...`` when torchrun exits 0 at the
fault-free run's last step with its final loss (within the job's tolerance), ``failed:
...`` otherwise, ``not struck: ...`` when the job ended before the step; then the torchrun
line, the steps the job printed (a restart shows as a step printed again) and each error
it raised, once. A drill that needs torchcanary's harness (the built-in job,
a network or store fault, an in-place recovery, a job with more than its script) is not
written, and says why."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from torchcanary.repro.literals import NotWritable
from torchcanary.repro.reproducer import ROLES, Reproducer
from torchcanary.section_types import Finding

JOB_FOLDER = "job"  # beside repro.py: the job's script, as the run ran it
_SIGNALS = {"kill": "SIGKILL", "hang": "SIGSTOP"}  # the faults a script strikes alone
_RECOVERIES = ("restart", "restart-unshared")  # torchrun's own restarts

_BODY = '''
def workers(parent):
    """(pid, variables) of each process torchrun ``parent`` started, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            environ = set((entry / "environ").read_bytes().split(b"\\0"))
        except OSError:
            continue
        if entry.name.isdigit() and int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append((int(entry.name), environ))
    return found


def rank_pid(parent, rank):
    """The pid of torchrun's worker of this rank in its first launch."""
    wanted = {f"RANK={rank}".encode(), b"TORCHELASTIC_RESTART_COUNT=0"}
    return next((pid for pid, environ in workers(parent) if wanted <= environ), None)


def steps(lines):
    return [(int(m["step"]), m["loss"]) for m in map(STEP.search, lines) if m]


scratch = Path(tempfile.mkdtemp(prefix="drill-"))
job = [arg.replace("{scratch}", str(scratch)) for arg in JOB]
script = Path(__file__).resolve().parent / "job" / job[0]
command = [sys.executable, *TORCHRUN, str(script), *job[1:]]
torchrun = subprocess.Popen(
    command,
    cwd=scratch,
    env={**os.environ, **LAUNCH_ENV, **JOB_ENV, "TMPDIR": str(scratch)},
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
)
lines, pid, struck = [], None, None


def read():
    """Keeps the job's lines and strikes as the step's line arrives: the job goes on
    meanwhile (a few tenths of a second to its end), so no poll stands between the two."""
    global pid, struck
    for line in torchrun.stdout:
        lines.append(line)
        if pid is None:  # looked up early: its first launch is there before any step
            pid = rank_pid(torchrun.pid, TARGET_RANK)
        if struck is None and pid is not None and any(s >= AT_STEP for s, _ in steps([line])):
            os.kill(pid, getattr(signal, SIGNAL))
            struck = f"{SIGNAL} to rank {TARGET_RANK} (pid {pid}) after step {AT_STEP}"


reader = threading.Thread(target=read)
reader.start()
deadline = time.monotonic() + BOUND_S
while torchrun.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)
bounded = torchrun.poll() is None
left = [p for p, _ in workers(torchrun.pid)] + [torchrun.pid] if bounded else []
# a stopped rank, and all of a job that outran its bound
for running in [pid if struck else None, *left]:
    with contextlib.suppress(ProcessLookupError, TypeError):
        os.kill(running, signal.SIGKILL)
code = torchrun.wait()
reader.join(10)
shutil.rmtree(scratch, ignore_errors=True)

shown = steps(lines)
last_step, last_loss = shown[-1] if shown else (None, None)
errors = [m[0] for m in map(ERROR.search, lines) if m and "ChildFailedError" not in m[0]]
expected = FAULT_FREE_LOSS.get(importlib.metadata.version("torch"))
if struck is None:
    print(f"not struck: the job ended (torchrun exit {code}) before step {AT_STEP}")
elif bounded:
    print(f"failed: the job still ran {BOUND_S:g} s after {struck}")
elif code != 0:
    print(f"failed: torchrun exit {code} after {struck}:", errors[-1] if errors else "")
elif last_step != LAST_STEP:
    print(f"failed: it ended at step {last_step}, the fault-free run at {LAST_STEP}")
elif expected is not None and abs(float(last_loss) - expected) > RTOL * abs(expected):
    print(f"failed: final loss {last_loss}, the fault-free run's {expected}")
else:
    print(f"recovered: ran to step {last_step} after {struck}, final loss {last_loss}")
print("torchrun:", shlex.join(command))
print("steps printed:", " ".join(str(step) for step, _ in shown))
print("errors raised:", *dict.fromkeys(errors), sep="\\n")
'''

_IMPORTS = """\
import contextlib
import importlib.metadata
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
"""


def _writable_job(finding: Finding) -> tuple[dict[str, Any], Path]:
    """The finding's job and its script, or why a script cannot run the drill alone."""
    facts, spec = finding.facts, finding.facts["spec"]
    job = facts.get("job")
    if job is None:
        raise NotWritable(
            "the built-in drill job is torchcanary's own module (with its helpers); only a "
            "drill of your own job ([drill] job) is written"
        )
    if spec["fault"] not in _SIGNALS or spec["recovery"] not in _RECOVERIES:
        raise NotWritable(
            f"{spec['fault']}:{spec['recovery']} needs torchcanary's harness (namespaces, "
            "a store host, an armed rank or in-place ranks); a script strikes "
            f"{' or '.join(_SIGNALS)} under {' or '.join(_RECOVERIES)} alone"
        )
    argv = list(job["argv"])
    script = Path(job["cwd"]) / argv[0]
    if argv[0] == "-m" or job["with"] or [Path(f) for f in job["files"]] != [script]:
        raise NotWritable(
            f"the job {shlex.join(argv)} needs more than its script (a module, files it "
            "is given or packages job_with installs)"
        )
    if not script.is_file():
        raise NotWritable(f"the job's script {script} is gone")
    return job, script


def drill_reproducer(finding: Finding) -> Reproducer:
    """The drill's job and fault as a script that runs it under torchrun and says whether
    it recovered; the job's script goes beside it, in ``job/``."""
    job, script = _writable_job(finding)
    facts, spec = finding.facts, finding.facts["spec"]
    losses = {
        facts[role]["torch"]: facts[role]["reference_loss"]
        for role in ROLES
        if facts[role].get("torch") and facts[role].get("reference_loss") is not None
    }
    final_steps = {facts[role]["final_step"] for role in ROLES} - {None}
    if len(final_steps) != 1:
        raise NotWritable(f"the fault-free runs ended at steps {sorted(final_steps)}, not one")
    fault = f"{spec['fault']} of rank {spec['target_rank']} after step {spec['at_step']}"
    constants = [
        f"# drill {finding.item} ({fault}) of the job in job/, as torchcanary ran it",
        f"JOB = {[script.name, *job['argv'][1:]]!r}  # {{scratch}}: a fresh folder",
        f"JOB_ENV = {job['env']!r}",
        f"LAUNCH_ENV = {facts['launch']['env']!r}",
        f"TORCHRUN = {shlex.split(facts['launch']['torchrun'])!r}",
        f"STEP = re.compile({job['step_pattern']!r})",
        'ERROR = re.compile(r"\\b\\w+(?:Error|Exception): .*")',
        f"SIGNAL, TARGET_RANK, AT_STEP = {_SIGNALS[spec['fault']]!r}, "
        f"{spec['target_rank']}, {spec['at_step']}",
        f"LAST_STEP = {final_steps.pop()}  # where the fault-free run ended",
        f"FAULT_FREE_LOSS = {losses!r}  # its final loss, by torch version",
        f"RTOL = {job['rtol']!r}",
        f"BOUND_S = {spec['drill_timeout_s']!r}",
    ]
    source = "\n".join([_IMPORTS, *constants, "", _BODY.rstrip()]) + "\n"
    return Reproducer(
        finding=f"{finding.section}:{finding.item}",
        title=f"{script.name} recovers from {fault} under torchrun in the baseline, "
        "not in the candidate",
        script=source,
        observed={role: f"{facts[role]['verdict']}: {facts[role]['reason']}" for role in ROLES},
        expects={"baseline": "recovered:", "candidate": "failed:"},
        facts=facts,
        files={f"{JOB_FOLDER}/{script.name}": script.read_text()},
        bound_s=float(spec["drill_timeout_s"]),
    )
