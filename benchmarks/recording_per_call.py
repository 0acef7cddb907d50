"""What recording costs per torch call, apart from what torch's modes cost by themselves.

    PYTHONPATH=src python benchmarks/recording_per_call.py [--env torch==2.13.0] [--steps 5000]

A loop of small calls (an ALS-like step on 8x8 tensors: matmul, reshape, conj, mul,
transpose, sum, norm; 15 calls a step at the two levels), timed in CPU seconds inside one
process of the environment, each way in turn, twice: no mode; an empty
``TorchFunctionMode`` alone (what seeing the public calls costs); an empty
``TorchDispatchMode`` alone (what seeing the ATen calls costs); both, pushed once; bare
modes (the function mode pushing the empty dispatch mode around each call, as the recorder
does, and nothing else: the floor any recording that way pays); recorded (``record_calls``,
every call past its group's sample after the first few). A suite of small calls costs at
least the floor's ratio recorded, whatever the recorder does; the lone modes show which
level a cheaper design could leave off for calls it only counts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

from torchcanary.envs.cache import ensure_environment
from torchcanary.envs.spec import parse_env_spec
from torchcanary.envs.worker_process import import_root_for
from torchcanary.worker.calls import CALLS_USER_CODE_VAR

STEPS_CODE = """
import contextlib, json, sys, tempfile, time
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torchcanary.worker.replay.record import record_calls

torch.set_num_threads(1)


class Empty(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls):
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class FunctionOnly(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def both_once():
    with FunctionOnly(), Empty():
        yield


class Bare(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.inner = Empty()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        with self.inner:
            return func(*args, **(kwargs or {}))


def step(a, b):
    c = torch.matmul(a, b)
    d = torch.reshape(c, (-1,))
    e = torch.conj(d) * 2.0
    f = torch.transpose(a, 0, 1)
    return e.sum() + f.norm()


def timed(mode, steps):
    for _ in range(200):
        step(a, b)
    with mode:
        started = time.process_time()
        for _ in range(steps):
            step(a, b)
        return time.process_time() - started


torch.manual_seed(0)
a, b = torch.randn(8, 8, dtype=torch.float64), torch.randn(8, 8, dtype=torch.float64)
steps = int(sys.argv[1])
ways = {
    "none": contextlib.nullcontext,
    "function mode alone": FunctionOnly,
    "dispatch mode alone": Empty,
    "both modes, pushed once": both_once,
    "bare modes": Bare,
}
result = {way: [] for way in [*ways, "recorded"]}
for _ in range(2):
    for way, mode in ways.items():
        result[way].append(timed(mode(), steps))
    with tempfile.TemporaryDirectory() as folder:
        result["recorded"].append(timed(record_calls(folder), steps))
print(json.dumps({way: min(times) / steps for way, times in result.items()}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", default="torch==2.13.0 numpy", help="the environment's spec")
    parser.add_argument("--steps", type=int, default=5000, help="steps timed each way")
    args = parser.parse_args()
    python = ensure_environment("baseline", parse_env_spec(args.env)).python
    with tempfile.TemporaryDirectory() as scratch:
        root = import_root_for(("torchcanary",), Path(scratch) / "root")
        script = Path(scratch) / "steps.py"
        script.write_text(STEPS_CODE)
        environ = {**os.environ, "PYTHONPATH": str(root)}
        environ[CALLS_USER_CODE_VAR] = json.dumps({"paths": [scratch]})
        done = subprocess.run(
            [python, str(script), str(args.steps)],
            env=environ,
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
    per_step = json.loads(done.stdout.strip().splitlines()[-1])
    none = per_step["none"]
    print(f"environment: {python}, {args.steps} steps of 15 calls, best of 2, CPU time")
    for way, seconds in per_step.items():
        print(f"{way}: {seconds * 1e6:.1f} us a step, {seconds / none:.1f}x no mode")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
