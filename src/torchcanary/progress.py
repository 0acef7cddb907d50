"""Progress on long work: rich bars on a terminal, plain lines in CI logs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Progress as RichProgress


class Progress:
    """A small facade so sections need not know whether a terminal is attached."""

    def __init__(self, console: Console | None = None, quiet: bool = False) -> None:
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self._live = self.console.is_terminal and not quiet

    def note(self, message: str) -> None:
        if not self.quiet:
            self.console.print(message, markup=False, highlight=False)

    @contextmanager
    def task(self, description: str, total: int | None) -> Iterator[TaskHandle]:
        if not self._live:
            self.note(f"{description} ...")
            yield TaskHandle(None, None, self if not self.quiet else None)
            return
        bars = RichProgress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            console=self.console,
            transient=False,
        )
        with bars:
            task_id = bars.add_task(description, total=total, status="")
            yield TaskHandle(bars, task_id, None)


class TaskHandle:
    def __init__(self, bars: RichProgress | None, task_id: object, plain: Progress | None):
        self._bars = bars
        self._task_id = task_id
        self._plain = plain

    def advance(self, status: str = "") -> None:
        if self._bars is not None:
            self._bars.update(self._task_id, advance=1, status=status[:60])  # type: ignore[arg-type]
        elif self._plain is not None and status:
            self._plain.note(f"  {status}")

    def status(self, status: str) -> None:
        if self._bars is not None:
            self._bars.update(self._task_id, status=status[:60])  # type: ignore[arg-type]
