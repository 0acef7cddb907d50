"""The user's command as it runs in one overlay, under the same conditions in both.

``pytest ...`` and ``python -m pytest ...`` run as the overlay's ``python -m pytest`` with our
plugin; ``python ...`` runs the overlay's interpreter; any other program is found on a PATH
that starts with the overlay's and the base environment's ``bin``. The command is split
like a shell would split it but not run by one: write ``sh -c '...'`` for pipelines.
Both environments get the same working directory, ``PYTHONHASHSEED``, seed variable,
thread counts and cuBLAS workspace setting; each run gets its own temporary directory.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from torchcanary.numerics import DIR_VAR
from torchcanary.user_command.overlay import Overlay
from torchcanary.worker.calls import STACK_PYTEST_PLUGIN
from torchcanary.worker.stack.pytest_plugin import EVENTS_VAR, SELECT_VAR, TEST_TIMEOUT_VAR

PLUGIN = STACK_PYTEST_PLUGIN
SEED_VAR = "TORCHCANARY_SEED"
_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
# Variables that would point the command at another interpreter's packages.
_DROPPED = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    EVENTS_VAR,
    SELECT_VAR,
    TEST_TIMEOUT_VAR,
    DIR_VAR,
)


@dataclass(frozen=True)
class UserCommand:
    text: str
    argv: tuple[str, ...]
    is_pytest: bool

    @classmethod
    def parse(cls, text: str) -> UserCommand:
        argv = tuple(shlex.split(text))
        if not argv:
            raise ValueError("empty command")
        program = os.path.basename(argv[0])
        is_pytest = program in ("pytest", "py.test") or (
            bool(_PYTHON.match(program)) and argv[1:3] == ("-m", "pytest")
        )
        return cls(text, argv, is_pytest)

    def argv_in(self, overlay: Overlay) -> list[str]:
        if self.is_pytest:
            options = (
                self.argv[3:] if _PYTHON.match(os.path.basename(self.argv[0])) else self.argv[1:]
            )
            return [
                overlay.python,
                "-m",
                "pytest",
                *options,
                "-p",
                PLUGIN,
                "-p",
                "no:cacheprovider",
            ]  # no .pytest_cache written into the project
        if _PYTHON.match(os.path.basename(self.argv[0])):
            return [overlay.python, *self.argv[1:]]
        return list(self.argv)


def command_env(
    overlay: Overlay,
    *,
    import_root: Path,
    run_dir: Path,
    numerics_dir: Path,
    seed: int,
    threads: int,
    test_timeout_s: float,
    extra: dict[str, str],
) -> dict[str, str]:
    """The environment variables of one run; ``extra`` (the user's) wins over ours."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _DROPPED and not k.startswith("TORCHCANARY_")
    }
    scratch = run_dir / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "PATH": os.pathsep.join([*overlay.bin_dirs, os.environ.get("PATH", "")]),
            "VIRTUAL_ENV": str(overlay.path),
            "PYTHONHASHSEED": "0",
            "PYTHONUNBUFFERED": "1",
            SEED_VAR: str(seed),
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "OPENBLAS_NUM_THREADS": str(threads),
            "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
            "TMPDIR": str(scratch),
            DIR_VAR: str(numerics_dir),
            EVENTS_VAR: str(run_dir / "events.jsonl"),
            TEST_TIMEOUT_VAR: str(test_timeout_s),
        }
    )
    env.update(extra)
    # torchcanary itself must stay importable: for the plugin and for numerics.record().
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(import_root), extra.get("PYTHONPATH")) if p)
    return env
