"""Progress in a CI log: each step says how far the task is and about how long it has left."""

from __future__ import annotations

import io

from rich.console import Console

from torchcanary.progress import Progress, clock_text


class StepClock:
    """A clock the test moves by hand, so the estimate is exact."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _progress(clock: StepClock) -> tuple[Progress, io.StringIO]:
    log = io.StringIO()
    return Progress(Console(file=log, width=200), clock=clock), log


def test_a_sized_task_estimates_the_time_left_from_its_pace() -> None:
    clock = StepClock()
    progress, log = _progress(clock)
    with progress.task("claims", total=4) as task:
        clock.now += 30
        task.advance("probe one")
        clock.now += 30
        task.advance("probe two")
    lines = log.getvalue().splitlines()
    assert lines == [
        "claims ...",
        "  [1/4, 30 s, about 1 min 30 s left] probe one",
        "  [2/4, 1 min 00 s, about 1 min 00 s left] probe two",
    ]


def test_a_poll_that_sees_several_steps_done_counts_them_all_in_the_estimate() -> None:
    clock = StepClock()
    progress, log = _progress(clock)
    with progress.task("calls: 300 replays", total=300) as task:
        clock.now += 10
        task.advance("100 calls replayed", 100)
        clock.now += 5
        task.advance("150 calls replayed", 50)
    assert log.getvalue().splitlines()[1:] == [
        "  [100/300, 10 s, about 20 s left] 100 calls replayed",
        "  [150/300, 15 s, about 15 s left] 150 calls replayed",
    ]


def test_a_task_of_unknown_size_counts_and_times_without_guessing() -> None:
    clock = StepClock()
    progress, log = _progress(clock)
    with progress.task("bench", total=None) as task:
        clock.now += 5
        task.advance("group 1")
    assert log.getvalue().splitlines()[-1] == "  [1, 5 s] group 1"


def test_quiet_prints_nothing() -> None:
    log = io.StringIO()
    progress = Progress(Console(file=log), quiet=True)
    with progress.task("claims", total=2) as task:
        task.advance("probe")
    assert log.getvalue() == ""


def test_clock_text_reads_as_minutes_past_a_minute() -> None:
    assert [clock_text(s) for s in (0.4, 59.4, 60, 185)] == [
        "0 s",
        "59 s",
        "1 min 00 s",
        "3 min 05 s",
    ]


def test_a_log_line_longer_than_the_console_is_written_whole() -> None:
    """Issue 28 item 11 (b): progress written to a file or pipe broke lines in the middle
    of an item ("baseline \\ncompile.complex-decomposition-opt-in: confirmed"); every note
    and step is one whole line, however narrow the console."""
    log = io.StringIO()
    progress = Progress(Console(file=log, width=40), clock=StepClock())
    progress.note("run 20261205-071512-a1b2c3 -> /very/long/path/to/canary-results/canary.db")
    with progress.task("claims", total=2) as task:
        task.advance("baseline compile.complex-decomposition-opt-in: confirmed")
    assert log.getvalue().splitlines() == [
        "run 20261205-071512-a1b2c3 -> /very/long/path/to/canary-results/canary.db",
        "claims ...",
        "  [1/2, 0 s, about 0 s left] baseline compile.complex-decomposition-opt-in: confirmed",
    ]


def test_a_line_longer_than_the_pipe_keeps_its_verdict_on_its_line() -> None:
    """Issue 28 item 13: piped (80 columns) a drill's line ended "kill:restart-unshared: "
    with its verdict wrapped onto a line of its own."""
    clock = StepClock()
    log = io.StringIO()
    progress = Progress(Console(file=log, width=80), clock=clock)
    with progress.task("fault drills", total=6) as task:
        clock.now += 74
        task.advance("baseline kill:restart-unshared: passed")
    line = "  [1/6, 1 min 14 s, about 6 min 10 s left] baseline kill:restart-unshared: passed"
    assert len(line) > 80
    assert log.getvalue().splitlines()[-1] == line


def test_a_bound_the_task_knows_replaces_the_pace_in_the_estimate() -> None:
    clock = StepClock()
    progress, log = _progress(clock)
    with progress.task("bench: interleaved A/B", total=12) as task:
        clock.now += 44  # the first group also calibrates: its pace would say 8 minutes
        task.advance("1 of 12 groups done", at_most_s=11 * 44)
        clock.now += 5
        task.advance("2 of 12 groups done", at_most_s=10 * 5)
    assert log.getvalue().splitlines()[1:] == [
        "  [1/12, 44 s, at most about 8 min 04 s left] 1 of 12 groups done",
        "  [2/12, 49 s, at most about 50 s left] 2 of 12 groups done",
    ]


def test_the_bench_bounds_its_time_left_by_its_last_group() -> None:
    """A later group measures only the benchmarks still unsettled, so it takes no longer
    than the last: the groups left times the last group's time bound what is left."""
    from torchcanary.bench.section import _BenchRun
    from torchcanary.bench.settings import BenchSettings

    told: list[tuple[str, float | None]] = []

    class Task:
        def advance(self, status: str, steps: int = 1, at_most_s: float | None = None) -> None:
            told.append((status, at_most_s))

    run = object.__new__(_BenchRun)
    run.settings = BenchSettings(groups=12)
    run.on_group(Task(), 4, 10.0)  # type: ignore[arg-type]  # the fourth group took 10 s
    assert told == [("4 of 12 groups done", 80.0)]
