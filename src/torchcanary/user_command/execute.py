"""One environment's side of a run of the user's command: its overlay, the install, the
main run, re-runs.

Everything for a role lives under the folder its section gives it (the stack's is
``<work_dir>/stack/<role>/``): the overlay venv, the install log, and per run (``main``,
``rerun-1``, and ``main-2``, ``rerun-1-2``, ... when a crashing or hung test stopped pytest
and it was started again for the tests after it) the output log, the plugin's events and the
numerics directory. The two roles never share a directory, only the project's working
directory, and their runs happen one after the other so they do not compete for the machine.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from torchcanary.envs import companions
from torchcanary.envs.build_mismatch import mismatch_in
from torchcanary.envs.cache import Environment
from torchcanary.user_command.command import UserCommand, command_env
from torchcanary.user_command.events import SuiteEvents, command_warnings, read_events
from torchcanary.user_command.overlay import Overlay, OverlayError, create_overlay, install
from torchcanary.user_command.records import COMMAND_KEY, EnvRun, InstallOutcome, TestRecord
from torchcanary.user_command.session import CommandOutcome, run_command
from torchcanary.user_command.settings import CommandSettings
from torchcanary.worker.stack.pytest_plugin import SELECT_VAR, TEST_TIMEOUT_EXIT

_PYTEST_ENDS = {0: "passed", 1: "failed", 5: "no-tests"}
_NAMES_PYTEST = re.compile(r"^pytest($|[\[=<>~!;\s])")


class RoleRunner:
    """Runs the user's command in ``environment`` through an overlay of its own."""

    def __init__(
        self,
        role: str,
        environment: Environment,
        settings: CommandSettings,
        command: UserCommand,
        import_root: Path,
        root: Path,
        note: Callable[[str], None],
    ) -> None:
        self.role = role
        self.environment = environment
        self.settings = settings
        self.command = command
        self.import_root = import_root
        self.root = root
        self.note = note
        self.overlay: Overlay | None = None

    def prepare(self) -> InstallOutcome:
        """A fresh overlay with the user's requirements (and pytest, for a pytest command)."""
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        packages = list(self.settings.with_)
        if self.command.is_pytest and not any(_NAMES_PYTEST.match(p) for p in packages):
            packages.append("pytest")
        try:
            self.overlay = create_overlay(
                self.role, self.environment.python, self.environment.path, self.root / "overlay"
            )
        except (OverlayError, OSError) as exc:
            return InstallOutcome(False, packages, 0.0, f"cannot create the overlay: {exc}")
        first, without_deps = companions.install_order(
            packages, self.environment.companions, Path(self.settings.cwd)
        )
        alone = f" (then {' '.join(without_deps)} without its dependencies)" if without_deps else ""
        self.note(
            f"stack: installing {' '.join(first) or 'nothing'}{alone} into the {self.role} "
            f"overlay (torch {self.environment.torch_version})"
        )
        return install(
            self.overlay,
            first,
            list(self.settings.requirements),
            cwd=Path(self.settings.cwd),
            timeout_s=self.settings.install_timeout_s,
            log_path=self.root / "install.log",
            without_deps=without_deps,
        )

    def _invoke(
        self,
        name: str,
        timeout_s: float,
        select: list[str] | None,
        numerics_dir: Path | None = None,
    ) -> tuple[CommandOutcome, Path]:
        assert self.overlay is not None, "prepare() first"
        run_dir = self.root / name
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        extra = dict(self.settings.env)
        env = command_env(
            self.overlay,
            import_root=self.import_root,
            run_dir=run_dir,
            # a continuation records beside the run it continues
            numerics_dir=numerics_dir or run_dir / "numerics",
            seed=self.settings.seed,
            threads=self.settings.threads,
            test_timeout_s=self.settings.test_timeout_s,
            extra=extra,
        )
        if select is not None:
            (run_dir / "select.json").write_text(json.dumps(select))
            env[SELECT_VAR] = str(run_dir / "select.json")
        outcome = run_command(
            self.command.argv_in(self.overlay),
            cwd=Path(self.settings.cwd),
            env=env,
            timeout_s=timeout_s,
            log_path=run_dir / "output.log",
            tail_bytes=self.settings.output_tail_kib * 1024,
            log_limit_bytes=self.settings.log_limit_mib * 1024 * 1024,
        )
        shutil.rmtree(run_dir / "tmp", ignore_errors=True)  # whatever the run left there
        return outcome, run_dir

    def run_main(self, installed: InstallOutcome) -> EnvRun:
        """The command once, in full; or why it could not run."""
        torch_version = self.environment.torch_version
        volatile = (str(self.root), self.environment.path)
        if not installed.ok:
            return EnvRun(
                self.role,
                torch_version,
                "install-failed",
                installed.error,
                installed,
                pytest=self.command.is_pytest,
                volatile_paths=volatile,
            )
        self.note(f"stack: running `{self.command.text}` in {self.role} (torch {torch_version})")
        outcome, run_dir = self._invoke("main", self.settings.timeout_s, None)
        numerics_dir = str(run_dir / "numerics")
        if not self.command.is_pytest:
            status = {
                "exited": "passed" if outcome.succeeded else "failed",
                "signalled": "crashed",
            }.get(outcome.status, outcome.status)
            return EnvRun(
                self.role,
                torch_version,
                status,
                self._named_mismatch(status, outcome, outcome.describe()),
                installed,
                outcome,
                False,
                {},
                command_warnings(outcome.stderr_tail),
                numerics_dir,
                volatile,
            )
        suite = read_events(run_dir / "events.jsonl", outcome)
        status = _pytest_status(outcome, suite.exitstatus)
        tests, outcomes = self._continue(
            "main", suite, list(suite.collected), self.settings.timeout_s - outcome.duration_s
        )
        combined = dataclasses.replace(
            outcome,
            duration_s=outcome.duration_s + sum(o.duration_s for o in outcomes),
            stragglers=outcome.stragglers + [p for o in outcomes for p in o.stragglers],
        )
        run = EnvRun(
            self.role,
            torch_version,
            status,
            "",
            installed,
            combined,
            True,
            tests,
            (),
            numerics_dir,
            volatile,
        )
        detail = _pytest_detail(run, outcome, len(outcomes))
        text = "\n".join([outcome.stderr_tail, outcome.stdout_tail])
        text += "".join(f"\n{record.message}\n{record.longrepr}" for record in tests.values())
        return dataclasses.replace(run, detail=self._named_mismatch(status, text, detail))

    def _named_mismatch(self, status: str, output: CommandOutcome | str, detail: str) -> str:
        """``detail``, led by the build mismatch the output shows where a run failed on one."""
        if status == "passed" or self.overlay is None:
            return detail
        if isinstance(output, CommandOutcome):
            output = "\n".join([output.stderr_tail, output.stdout_tail])
        mismatch = mismatch_in(output, self.overlay.python)
        return f"{mismatch}; {detail}" if mismatch else detail

    def _continue(
        self, name: str, suite: SuiteEvents, wanted: list[str], budget_s: float
    ) -> tuple[dict[str, TestRecord], list[CommandOutcome]]:
        """After a run stopped by a crashing or hung test, pytest again for the tests after it.

        Returns every test's record (a test keeps the first record it got) and the
        continuations' outcomes. It stops when all of ``wanted`` have an outcome, a session
        ends normally, a continuation reaches no test, or ``budget_s`` is spent.
        """
        tests = dict(suite.tests)
        outcomes: list[CommandOutcome] = []
        deadline = time.monotonic() + budget_s
        numerics_dir = self.root / name / "numerics"
        ended = suite.exitstatus is not None
        while not ended:
            remaining = [key for key in wanted if key not in tests]
            left_s = deadline - time.monotonic()
            if not remaining or left_s < 1:
                break
            self.note(
                f"stack: {self.role}: pytest stopped early; again for {len(remaining)} test(s)"
            )
            outcome, run_dir = self._invoke(
                f"{name}-{len(outcomes) + 2}", left_s, remaining, numerics_dir
            )
            outcomes.append(outcome)
            again = read_events(run_dir / "events.jsonl", outcome)
            reached = any(key in again.tests for key in remaining)
            for key, record in again.tests.items():
                tests.setdefault(key, record)
            ended = again.exitstatus is not None or not reached or outcome.status == "timeout"
        return tests, outcomes

    def rerun(self, keys: list[str], timeout_s: float, round_no: int) -> dict[str, TestRecord]:
        """Run only ``keys`` again; for a plain command, the whole command (key ``command``).

        A re-run that crashes or hangs is continued for the keys it did not reach, so one
        bad test cannot hide the others' outcomes.
        """
        if self.overlay is None:
            installed = self.prepare()
            if not installed.ok:
                return {}
        name = f"rerun-{round_no}"
        outcome, run_dir = self._invoke(name, timeout_s, keys if self.command.is_pytest else None)
        if not self.command.is_pytest:
            word = (
                "passed"
                if outcome.succeeded
                else "failed"
                if outcome.status == "exited"
                else "error"
            )
            return {COMMAND_KEY: TestRecord(word, outcome.duration_s, outcome.describe())}
        suite = read_events(run_dir / "events.jsonl", outcome)
        tests, _ = self._continue(name, suite, keys, timeout_s - outcome.duration_s)
        return {key: tests[key] for key in keys if key in tests}


def _pytest_status(outcome: CommandOutcome, exitstatus: int | None) -> str:
    if outcome.status == "timeout":
        return "timeout"
    if exitstatus is None and outcome.exit_code == TEST_TIMEOUT_EXIT:
        return "timeout"  # our watchdog stopped a hung test
    if outcome.status == "not-found":
        return "not-found"
    if outcome.status == "signalled" or exitstatus is None:
        return "crashed"  # killed, or the process exited in the middle of the session
    return _PYTEST_ENDS.get(outcome.exit_code or 0, "pytest-error")


def _pytest_detail(run: EnvRun, outcome: CommandOutcome, continuations: int) -> str:
    counts = ", ".join(f"{n} {word}" for word, n in run.outcome_counts().items()) or "no tests"
    how = (
        "stopped a test at its timeout"
        if outcome.exit_code == TEST_TIMEOUT_EXIT and run.status == "timeout"
        else outcome.describe()
    )
    text = f"{how}: {counts}"
    if continuations:
        text += f"; pytest was started {continuations} more time(s) for the tests after it"
    if run.status in ("pytest-error", "no-tests", "crashed"):
        lines = [
            line
            for line in (outcome.stderr_tail + outcome.stdout_tail).splitlines()
            if line.strip()
        ]
        errors = [line for line in lines if "error" in line.lower()]
        if errors or lines:
            text += f" ({(errors or lines)[-1].strip()[:200]})"
    return text
