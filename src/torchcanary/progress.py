"""Progress on long work: rich bars on a terminal, plain whole lines in CI logs and files.

Both say how far a task is and, once its size is known and a step has finished, about how
long it has left: a user waiting on a ten-minute run should know whether to get coffee.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress

Clock = Callable[[], float]


def clock_text(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``: short enough for a log line, exact enough to plan by."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    return f"{whole // 60} min {whole % 60:02d} s"


class Progress:
    """A small facade so sections need not know whether a terminal is attached."""

    def __init__(
        self, console: Console | None = None, quiet: bool = False, clock: Clock = time.monotonic
    ) -> None:
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self.clock = clock
        self._live = self.console.is_terminal and not quiet

    def note(self, message: str) -> None:
        if not self.quiet:
            # In a file or pipe a line is a record (grep, CI logs): never wrap one in two.
            self.console.print(
                message, markup=False, highlight=False, soft_wrap=not self.console.is_terminal
            )

    @contextmanager
    def task(self, description: str, total: int | None) -> Iterator[TaskHandle]:
        if not self._live:
            self.note(f"{description} ...")
            plain = PlainTask(self, total) if not self.quiet else None
            yield TaskHandle(None, None, plain)
            return
        bars = RichProgress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[status]}"),
            console=self.console,
            transient=False,
        )
        with bars:
            task_id = bars.add_task(description, total=total, status="")
            yield TaskHandle(bars, task_id, None)


class PlainTask:
    """A task's count and clock for log lines: ``[3/23, 42 s, about 2 min 10 s left]``."""

    def __init__(self, progress: Progress, total: int | None) -> None:
        self._progress = progress
        self._total = total
        self._done = 0
        self._started = progress.clock()

    def advance(self, status: str, steps: int = 1, at_most_s: float | None = None) -> None:
        self._done += steps
        if status:
            self._progress.note(f"  [{self.position(at_most_s)}] {status}")

    def position(self, at_most_s: float | None = None) -> str:
        """How far, how long so far, and how long left: the bound the task knows where it
        gave one, else the pace so far carried over what is left."""
        elapsed = self._progress.clock() - self._started
        if not self._total:
            return f"{self._done}, {clock_text(elapsed)}"
        if at_most_s is not None:
            estimate = f", at most about {clock_text(at_most_s)} left"
        elif self._done:
            left = elapsed / self._done * (self._total - self._done)
            estimate = f", about {clock_text(left)} left"
        else:
            estimate = ""
        return f"{self._done}/{self._total}, {clock_text(elapsed)}{estimate}"


class TaskHandle:
    def __init__(self, bars: RichProgress | None, task_id: object, plain: PlainTask | None):
        self._bars = bars
        self._task_id = task_id
        self._plain = plain

    def advance(self, status: str = "", steps: int = 1, at_most_s: float | None = None) -> None:
        """``steps`` more of the total done (a poll of work done elsewhere may see several).

        ``at_most_s``: a bound on the time left the task knows better than its pace so far
        does (the bench, whose groups get shorter as its benchmarks settle).
        """
        if self._bars is not None:
            if at_most_s is not None:
                status = f"{status}; at most {clock_text(at_most_s)} left"
            self._bars.update(self._task_id, advance=steps, status=status[:60])  # type: ignore[arg-type]
        elif self._plain is not None:
            self._plain.advance(status, steps, at_most_s)

    def status(self, status: str) -> None:
        if self._bars is not None:
            self._bars.update(self._task_id, status=status[:60])  # type: ignore[arg-type]
