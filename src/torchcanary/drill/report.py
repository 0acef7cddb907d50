"""The drill section of the report: a table per drill and environment, and a timeline plot.

Every string that came from a result is escaped; plots are inline SVG drawn here (no
scripts, no external resources). The timeline shows each rank's step against time, one
line per rank and launch, with the fault, errors, checkpoints and recoveries marked.
"""

from __future__ import annotations

import html as html_lib
from typing import Any

from torchcanary.drill import job_folder, repeats
from torchcanary.drill.catalog import FAULTS, RECOVERIES
from torchcanary.drill.result import (
    DrillRecord,
    DrillReference,
    DrillRun,
    DrillVerdict,
    from_rows,
    is_reference,
)
from torchcanary.kept import describe_age
from torchcanary.section_types import JUnitCase

SECTION = "drill"
_ROLES = ("baseline", "candidate")
_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
_MARKS = {
    "fault": "#d62728",
    "error": "#d62728",
    "ckpt": "#999999",
    "launch": "#2ca02c",
    "recovered": "#1f77b4",
    "recovering": "#1f77b4",
    "done": "#000000",
    "unsupported": "#7f7f7f",
}


def _records(view: Any) -> list[DrillRecord]:
    return from_rows(view.sections.get(SECTION, []))


def _drills(view: Any) -> dict[str, dict[str, DrillRecord]]:
    rows: dict[str, dict[str, DrillRecord]] = {}
    for result in _records(view):
        rows.setdefault(result.key, {})[result.env_role] = result
    return rows


def _seconds(value: Any) -> str:
    return f"{value:.1f} s" if isinstance(value, (int, float)) else "–"


def _rate(before: Any, after: Any = None) -> str:
    if not isinstance(before, (int, float)):
        return "–"
    text = f"{before:.1f}"
    if isinstance(after, (int, float)):
        text += f" → {after:.1f}"
    return text + " steps/s"


def _loss(loss: Any, ref: Any = None) -> str:
    if not isinstance(loss, (int, float)):
        return "–"
    if not isinstance(ref, (int, float)):
        return f"{loss:.6f}"
    return f"{loss:.6f} (ref {ref:.6f}, Δ {abs(loss - ref):.1e})"


def _steps(check: dict[str, Any] | None) -> str:
    if not check:
        return "–"
    first = check.get("first_difference")
    if first is None:
        worst = max(check.get("max_loss_rdiff") or 0.0, check.get("max_grad_rdiff") or 0.0)
        return f"all {check.get('steps_compared')} match (worst Δ {worst:.0e})"
    if not first.get("runs"):
        return f"step {first['step']} never ran"
    loss, grad = first.get("loss_rdiff"), first.get("grad_rdiff")
    return f"step {first['step']} off: loss Δ {_relative(loss)}, grad norm Δ {_relative(grad)}"


def _relative(value: Any) -> str:
    return f"{value:.1e}" if isinstance(value, (int, float)) else "NaN"


def _mode(result: DrillRecord) -> str:
    """The data-parallel mode that ran (as the job said), or '–' when nothing ran."""
    return str(result.parallel or "–")


def _flight(result: DrillRun) -> str:
    fr = result.flight_recorder or {}
    if not fr:
        return "–"
    named = {
        True: "named the culprit",
        False: "did not name the culprit",
        None: "no rank at fault",
    }[fr.get("named_culprit")]
    text = f"{named}: {fr.get('finding', '')}"
    analyser = fr.get("torch_analyser") or {}
    if analyser.get("ran") and analyser.get("exit_code") == 0:
        ranks = analyser.get("named_ranks") or []
        text += (
            f"; torch fr_trace names rank {ranks}" if ranks else "; torch fr_trace names no rank"
        )
    elif analyser.get("ran"):
        last = (analyser.get("output_tail") or "").splitlines()[-1:] or [""]
        text += f"; torch fr_trace failed: {last[0][:120]}"
    return text


def _trials(result: DrillRun) -> str:
    """`` (2 of 3 passed)``: how many of its trials passed, for a row that kept its trials
    (a row stored before drills were repeated shows its verdict alone, as it did)."""
    return f" ({result.trials_passed} of {result.trial_count} passed)" if result.trials else ""


def _between_versions(rows: dict[str, DrillRecord]) -> str | None:
    """What the trials say about the two versions, for a drill repeated in either."""
    base, cand = rows.get("baseline"), rows.get("candidate")
    if not (isinstance(base, DrillRun) and isinstance(cand, DrillRun)):
        return None
    if max(base.trial_count, cand.trial_count) == 1:
        return None
    return repeats.compare(base, cand).describe()


def _cells(result: DrillRun) -> list[str]:
    identical = result.params_identical
    return [
        _mode(result),
        result.verdict.value + _trials(result),
        _seconds(result.detect_s),
        _seconds(result.resume_s),
        "–" if result.steps_lost is None else str(result.steps_lost),
        _rate(result.throughput_before, result.throughput_after),
        _steps(result.step_check),
        _loss(result.final_loss, result.reference_loss),
        "–" if identical is None else ("yes" if identical else "NO"),
        _flight(result),
        result.reason_text,
    ]


def _reference_cells(result: DrillReference) -> list[str]:
    left = job_folder.describe(result.extra.get("left_in_folder") or {})
    return [
        _mode(result),
        result.verdict.value,
        "–",
        "–",
        "–",
        _rate(result.throughput),
        f"{len(result.steps or [])} recorded",
        _loss(result.final_loss),
        str(result.params_identical),
        "–",
        "; ".join(
            part
            for part in (str(result.reason or ""), left and f"wrote in its folder: {left}")
            if part
        ),
    ]


def _esc(text: Any) -> str:
    return html_lib.escape(str(text))


_HEADERS = [
    "env",
    "mode",
    "verdict",
    "detect",
    "resume",
    "steps lost",
    "throughput",
    "steps vs fault-free",
    "final loss",
    "replicas identical",
    "Flight Recorder",
    "why",
]


def timeline_svg(timeline: dict[str, Any], title: str, width: int = 520, height: int = 170) -> str:
    """One drill's timeline as an inline SVG: step over time per rank, with marks."""
    series = timeline.get("series") or {}
    marks = timeline.get("marks") or []
    points = [p for line in series.values() for p in line]
    times = [p[0] for p in points] + [m["t"] for m in marks]
    if not times:
        return ""
    left, right, top, bottom = 40, 10, 18, 26
    t_max = max(max(times), 1e-6)
    s_max = max([p[1] for p in points] + [1])

    def x(t: float) -> float:
        return left + (width - left - right) * t / t_max

    def y(step: float) -> float:
        return height - bottom - (height - top - bottom) * step / s_max

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(title)}">',
        f'<text x="{left}" y="12" font-size="11">{_esc(title)}</text>',
        f'<line x1="{left}" y1="{y(0)}" x2="{width - right}" y2="{y(0)}" stroke="#333"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{y(0)}" stroke="#333"/>',
        f'<text x="{left}" y="{height - 8}" font-size="10">0 s</text>',
        f'<text x="{width - right}" y="{height - 8}" font-size="10" '
        f'text-anchor="end">{t_max:.1f} s</text>',
        f'<text x="4" y="{y(s_max) + 4}" font-size="10">{s_max}</text>',
        f'<text x="4" y="{y(0)}" font-size="10">step 0</text>',
    ]
    for index, (name, line) in enumerate(sorted(series.items())):
        colour = _COLOURS[index % len(_COLOURS)]
        coords = " ".join(f"{x(t):.1f},{y(s):.1f}" for t, s in line)
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" '
            f'points="{coords}"><title>{_esc(name)}</title></polyline>'
        )
    for mark in marks:
        colour = _MARKS.get(mark["kind"], "#555")
        label = _esc(f"{mark['kind']} rank {mark.get('rank')}: {mark.get('label', '')}")
        if mark["kind"] == "fault":
            parts.append(
                f'<line x1="{x(mark["t"]):.1f}" y1="{top}" x2="{x(mark["t"]):.1f}" '
                f'y2="{y(0)}" stroke="{colour}" stroke-dasharray="4 3">'
                f"<title>{label}</title></line>"
            )
        elif mark["kind"] == "ckpt":
            parts.append(
                f'<line x1="{x(mark["t"]):.1f}" y1="{y(0)}" x2="{x(mark["t"]):.1f}" '
                f'y2="{y(0) + 5}" stroke="{colour}"><title>{label}</title></line>'
            )
        else:
            parts.append(
                f'<circle cx="{x(mark["t"]):.1f}" cy="{y(0) - 4}" r="3" '
                f'fill="{colour}"><title>{label}</title></circle>'
            )
    parts.append("</svg>")
    return "".join(parts)


def html(view: Any) -> str:
    rows = _drills(view)
    out = [
        '<section class="drills"><h2>Fault drills</h2>',
        "<p>A tiny GPT trained data-parallel in the configured mode (the mode column: DDP "
        "or FSDP2), by torchrun for the restart drills and as plain ranks for the in-place "
        "ones; each drill injects one fault after a chosen step and measures detection, "
        "resumption, lost steps and whether the result is still right: every step's loss "
        "and gradient norm against a fault-free run with the same seeds and mode. "
        "Network faults act on veth links between per-rank network namespaces: link down "
        "and tc tbf rate limits (this kernel has no netem, so no delay or loss emulation)."
        "</p>",
    ]
    if not rows:
        out.append("<p>No drills ran.</p></section>")
        return "".join(out)
    jobs = sorted({str(r.job) for r in _records(view) if r.job})
    for job in jobs:
        out.append(
            f"<p>These drills ran on your job, <code>{_esc(job)}</code>, under torchrun in "
            "place of the tiny GPT; each is compared with that job's own fault-free run (the "
            "why column says how: as a deterministic job or within your tolerance).</p>"
        )
    for key in sorted(rows, key=lambda k: (is_reference(k), k)):
        out += _drill_html(key, rows[key], _reproducer(view, key))
    out.append(
        "<p>Timelines: one line per rank and launch (step against seconds; hover for "
        "names); red dashed line: the fault; dots: red error, green launch, blue "
        "recovery, black done; grey ticks: checkpoints.</p>"
    )
    out.append("</section>")
    return "".join(out)


def _reproducer(view: Any, key: str) -> str:
    """The link to a failing drill's verified reproducer (``torchcanary repro``), relative
    to the run's output folder; empty when it has none."""
    folder = view.reproducers.get(f"drill:{key}")
    return f"{folder}/repro.py" if folder else ""


def _drill_html(key: str, by_role: dict[str, DrillRecord], link: str = "") -> list[str]:
    """One drill: what it does, a row per environment, what changed, and its timelines
    (and its reproducer's link, where ``torchcanary repro`` verified one)."""
    fault, _, recovery = key.partition(":")
    what = f"{FAULTS.get(fault, 'fault-free run')}; {RECOVERIES.get(recovery, recovery)}"
    reproduce = f' <a class="reproduce" href="{_esc(link)}">Reproduce</a>' if link else ""
    out = [
        f"<h3>{_esc(key)}{reproduce}</h3><p>{_esc(what)}</p>"
        "<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in _HEADERS) + "</tr></thead><tbody>"
    ]
    for role in _ROLES:
        result = by_role.get(role)
        if result is None:
            continue
        cells = [
            role,
            *(_reference_cells(result) if isinstance(result, DrillReference) else _cells(result)),
        ]
        out.append("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    between = _between_versions(by_role)
    if between:
        out.append(f"<p>Between the versions: {_esc(between)}.</p>")
    both = _both_failed(by_role)
    if both:
        out.append(f"<p>This drill {_esc(both)}.</p>")
    plots = [
        timeline_svg(_timeline(by_role[role]), f"{key} — {role}")
        for role in _ROLES
        if role in by_role
    ]
    out.append("<div>" + "".join(plots) + "</div>")
    return out


def _timeline(result: DrillRecord) -> dict[str, Any]:
    return (result.timeline if isinstance(result, DrillRun) else None) or {}


def _summary_line(key: str, role: str, result: DrillRun) -> str:
    """One drill in one environment as a line a terminal shows whole at 80 columns."""
    facts = [f"detected {_seconds(result.detect_s)}", f"resumed {_seconds(result.resume_s)}"]
    if result.steps_lost is not None:
        facts.append(f"{result.steps_lost} steps lost")
    if result.step_check:
        facts.append(f"steps vs fault-free: {_steps(result.step_check)}")
    line = (
        f"- `{key}` {role} ({_mode(result)}): **{result.verdict.value}**{_trials(result)}; "
        + ", ".join(facts)
    )
    if not result.passed and result.reason:
        line += f"; {result.reason[:160]}"
    return line.replace("\n", " ")


def markdown(view: Any) -> str:
    """A line per drill and environment; the full table (throughput, losses, Flight
    Recorder findings, timelines) is in the HTML report, where it has room."""
    rows = _drills(view)
    lines = ["## Fault drills", ""]
    if not rows:
        return "\n".join([*lines, "No drills ran.", ""])
    for key in sorted(rows):
        if is_reference(key):
            continue
        link = _reproducer(view, key)
        for role in _ROLES:
            result = rows[key].get(role)
            if isinstance(result, DrillRun):
                shown = role == "candidate" and link
                lines.append(
                    _summary_line(key, role, result) + (f" ([Reproduce]({link}))" if shown else "")
                )
        between = _between_versions(rows[key])
        if between:
            lines.append(f"- `{key}` between the versions: {between}")
        both = _both_failed(rows[key])
        if both:
            lines.append(f"- `{key}` {both}")
    lines += _reference_lines(rows)
    lines += [
        "",
        "Network faults: veth link down and tc tbf rate limits between per-rank "
        "namespaces (no netem on the kernel these ran on). Details: the HTML report.",
        "",
    ]
    return "\n".join(lines)


def _reference_lines(rows: dict[str, dict[str, Any]]) -> list[str]:
    """A line per environment whose fault-free run of the user's job came from the cache,
    or had a rank die of a signal (counted over the tries: it may not repeat)."""
    lines = []
    for role, result in sorted(rows.get("reference:job", {}).items()):
        if not isinstance(result, DrillReference):
            continue
        cached = result.cached
        if cached is not None and isinstance(cached.get("age_s"), (int, float)):
            lines.append(
                f"- your job's fault-free run in the {role}: reused from the cache, made "
                f"{describe_age(cached['age_s'])} before this run (`--fresh-reference` "
                "makes it again)"
            )
        elif result.extra.get("died_in_tries"):
            lines.append(f"- your job's fault-free run in the {role}: {result.reason}")
        left = job_folder.describe(result.extra.get("left_in_folder") or {})
        if left:
            lines.append(
                f"- your job's fault-free run in the {role} wrote in its folder: {left} (every "
                "attempt starts in its own copy of your folder, so none resumes from another's "
                "files, and your folder is left as it was)"
            )
    return lines


def _both_failed(rows: dict[str, DrillRecord]) -> str | None:
    """Whose a drill's failure is, when it failed in both versions: such a drill says
    nothing about the release unless its cause is named (an *error* is the harness's)."""
    base, cand = rows.get("baseline"), rows.get("candidate")
    if not (isinstance(base, DrillRun) and isinstance(cand, DrillRun)):
        return None
    if base.verdict is not DrillVerdict.FAILED or cand.verdict is not DrillVerdict.FAILED:
        return None
    causes = {str(run.extra.get("cause") or "not known") for run in (base, cand)}
    return "failed in both versions; the cause: " + " / ".join(sorted(causes))


def reused(view: Any) -> dict[str, tuple[int, int]]:
    """Fault-free reference runs taken from the on-disk cache, of all this run has."""
    references = [r for r in _records(view) if isinstance(r, DrillReference)]
    kept = sum(1 for reference in references if reference.cached is not None)
    return {"drill references": (kept, len(references))} if references else {}


def junit_cases(view: Any) -> list[JUnitCase]:
    status = {
        DrillVerdict.PASSED: "passed",
        DrillVerdict.FAILED: "failure",
        DrillVerdict.ERROR: "error",
        DrillVerdict.ABSENT: "skipped",
        DrillVerdict.NOT_CHECKABLE: "skipped",
        DrillVerdict.FLAKY: "failure",  # a recovery that works only some of the time
    }
    cases = []
    for result in _records(view):
        if not isinstance(result, DrillRun):
            continue
        cases.append(
            JUnitCase(
                suite="drill",
                name=f"{result.key} [{result.env_role}]",
                status=status[result.verdict],
                time_s=float(result.duration_s or 0.0),
                message=(
                    f"{result.trials_passed} of {result.trial_count} trials passed: "
                    if result.trials
                    else ""
                )
                + result.reason_text,
                text=_flight(result),
            )
        )
    return cases
