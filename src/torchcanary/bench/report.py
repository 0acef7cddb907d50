"""The bench section of the report: HTML fragment, Markdown, and JUnit cases.

Order follows what a skeptic checks first: what else differs between the environments
(confounds), then the verdicts at a glance (forest plot per benchmark family), then a table,
then per benchmark the distributions, roofline, what ran (dispatch diff) and the warnings.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from torchcanary.bench.details_html import dispatch_html, kept_note, list_html
from torchcanary.bench.history_plot import history_forest, recent_html
from torchcanary.bench.kept_facts import REUSED
from torchcanary.bench.plots import ForestRow, distributions, forest
from torchcanary.bench.result import (
    BenchMeasured,
    BenchResult,
    BenchSkipped,
    BenchVerdict,
    from_rows,
)
from torchcanary.bench.section import SECTION, VERDICTS, policy_rules
from torchcanary.bench.settings import BenchSettings
from torchcanary.bench.view import recent
from torchcanary.bench.workload_report import fact_lines, summary_line
from torchcanary.section_types import JUnitCase
from torchcanary.store.history import HistoryEntry
from torchcanary.worker.bench.roofline import describe


def _results(view: Any) -> list[BenchResult]:
    return from_rows(view.sections.get(SECTION, []))


def time_unit(seconds: float) -> tuple[float, str]:
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if seconds >= scale:
            return scale, unit
    return 1e-9, "ns"


def format_seconds(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    scale, unit = time_unit(seconds)
    return f"{seconds / scale:.4g} {unit}"


# Past this a figure says only "no bound worth printing": with two or three groups an
# interval or MDE can be 1e20 wide, and its digits would read as a measurement.
_UNBOUNDED_RATIO = 1000.0


def _ratio(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if value < _UNBOUNDED_RATIO else f"over {_UNBOUNDED_RATIO:g}"


def _interval(result: BenchResult) -> str:
    if not isinstance(result, BenchMeasured) or result.ratio is None:
        return "–"
    return f"{_ratio(result.ratio)} [{_ratio(result.ci_low)}, {_ratio(result.ci_high)}]"


def _percent(value: float | None) -> str:
    if value is None:
        return "–"
    bound = _UNBOUNDED_RATIO / 100
    return f"{value:.1%}" if value < bound else f"over {bound:.0%}"


# A change found needs no power figure; a "same" is decided by its interval, not by power.
_MDE_MEANS_SOMETHING = (BenchVerdict.NO_CHANGE_DETECTED, BenchVerdict.TOO_NOISY)


def _half_band(view: Any, result: BenchMeasured) -> float:
    """The band a "same" interval had to fit (as ``section.run`` set it: the policy's
    ``bench_max_slowdown`` narrows the configured equivalence band)."""
    rules = policy_rules(view.run.plan.get("policy"))
    return min(result.equivalence, float(rules["bench_max_slowdown"]))


def _bound(result: BenchResult, view: Any) -> str:
    """What bounds a row's change, beside its interval.

    A "same" was decided by its interval lying inside the band: it shows the largest change
    that interval leaves open, against the band. The MDE (the change found 9 times in 10,
    at the level a lone discovery needs) is far wider and would read as a contradiction
    there; it is shown where no change was found and none ruled out: how large one could
    hide. A change found needs neither.
    """
    if not isinstance(result, BenchMeasured):
        return "–"
    if result.verdict is BenchVerdict.SAME and result.ci_low and result.ci_high:
        reach = max(result.ci_high - 1, 1 / result.ci_low - 1)
        return f"within ±{_percent(reach)} (band ±{_percent(_half_band(view, result))})"
    if result.verdict in _MDE_MEANS_SOMETHING and result.mde is not None:
        return f"MDE {_percent(result.mde)}"
    return "–"


def _roofline_text(result: BenchResult) -> str:
    if not isinstance(result, BenchMeasured):
        return "–"
    parts = [
        f"{role}: {describe(placed)}"
        for role, placed in result.roofline.items()
        if "fraction" in placed
    ]
    return "; ".join(parts) or "–"


def _confound_flag(result: BenchResult) -> str:
    found = result.confounds if isinstance(result, BenchMeasured) else {}
    return ("also differs: " + ", ".join(sorted(found))) if found else ""


def _family(result: BenchResult) -> str:
    return result.key.split("/", 1)[0]


# --- HTML --------------------------------------------------------------------------------


def _confounds_html(view: Any) -> str:
    confounds = view.confounds()
    if not confounds or any(r.aa for r in _results(view)):
        return ""
    rows = "".join(
        f"<tr><td>{escape(str(key))}</td><td>{escape(str(base))}</td>"
        f"<td>{escape(str(cand))}</td></tr>"
        for key, (base, cand) in sorted(confounds.items())
    )
    return (
        "<div class='confounds'><h3>Not only the torch version differs</h3><p>These build "
        "facts differ between baseline and candidate; every figure they can move is "
        "marked <em>also differs</em> below.</p><table><tr><th>fact</th><th>baseline"
        f"</th><th>candidate</th></tr>{rows}</table></div>"
    )


def _forest_html(results: list[BenchMeasured], half_band: float) -> str:
    families: dict[str, list[ForestRow]] = {}
    for result in results:
        if result.ratio is None or result.ci_low is None or result.ci_high is None:
            continue
        families.setdefault(_family(result), []).append(
            ForestRow(
                result.key.split("/", 1)[-1],
                result.ratio,
                result.ci_low,
                result.ci_high,
                result.verdict.value,
            )
        )
    return "".join(
        f"<figure>{forest(rows, half_band, family)}</figure>"
        for family, rows in sorted(families.items())
    )


def _reproducer(view: Any, key: str) -> str:
    """The link to a slower benchmark's verified reproducer (``torchcanary repro``),
    relative to the run's output folder; empty when it has none."""
    folder = view.reproducers.get(f"{SECTION}:{key}")
    return f"{folder}/repro.py" if folder else ""


def _reproduce_html(view: Any, key: str) -> str:
    link = _reproducer(view, key)
    return f' <a class="reproduce" href="{escape(link)}">Reproduce</a>' if link else ""


def _table_html(results: list[BenchResult], view: Any) -> str:
    head = (
        "<tr><th>benchmark</th><th>verdict</th><th>ratio [interval]</th><th>q</th>"
        "<th>bound / MDE</th><th>baseline</th><th>candidate</th><th>roofline</th>"
        "<th>notes</th></tr>"
    )
    rows = []
    for result in results:
        measured = result if isinstance(result, BenchMeasured) else None
        sides = measured.sides if measured else {}
        judged = "baseline-aa" if result.aa else "candidate"
        notes = [_confound_flag(result)]
        if measured and measured.noise_warnings:
            notes.append(f"{len(measured.noise_warnings)} noise warning(s)")
        if isinstance(result, BenchSkipped):
            notes.append(result.reason)
        if measured and measured.changed_dispatch:
            notes.append("what ran changed")
        q = measured.q_value if measured else None
        rows.append(
            f"<tr class='verdict-{escape(result.verdict)}'><td>{escape(result.key)}"
            f"{_reproduce_html(view, result.key)}</td>"
            f"<td>{escape(result.verdict)}</td><td>{escape(_interval(result))}</td>"
            f"<td>{'–' if q is None else f'{q:.2g}'}</td>"
            f"<td>{escape(_bound(result, view))}</td>"
            f"<td>{format_seconds((sides.get('baseline') or {}).get('median_s'))}</td>"
            f"<td>{format_seconds((sides.get(judged) or {}).get('median_s'))}</td>"
            f"<td>{escape(_roofline_text(result))}</td>"
            f"<td>{escape('; '.join(n for n in notes if n))}</td></tr>"
        )
    return f"<table class='bench'>{head}{''.join(rows)}</table>"


def _details_html(result: BenchMeasured, view: Any) -> str:
    """A benchmark's details: its samples, how it was judged, and what else was measured."""
    sides = result.sides
    centre = next((s["median_s"] for s in sides.values() if s.get("n")), 1.0)
    scale, unit = time_unit(centre)
    body = [distributions(sides, scale, unit), *_judgement_html(result)]
    body.append(list_html("Why this verdict", list(result.reasons)))
    body.append(list_html("Noise warnings", list(result.noise_warnings)))
    body.append(
        list_html(
            "Also differs between the environments (may move this figure)",
            [f"{k}: {v[0]} vs {v[1]}" for k, v in result.confounds.items()],
        )
    )
    body += _measured_html(result, view.run.created_at)
    body.append(list_html("Your workload (baseline -> candidate)", fact_lines(result.payload)))
    body.append(dispatch_html(result, view.run.created_at))
    history = recent(view, result.key)
    body.append(recent_html(result.key, history, view.run.run_id, _half_band(view, result)))
    harness = result.harness
    body.append(
        f"<p class='harness'>{escape(', '.join(f'{k}={v}' for k, v in harness.items()))}</p>"
    )
    return (
        f"<details><summary>{escape(result.key)}: {escape(result.verdict)} "
        f"{escape(_interval(result))}</summary>{''.join(body)}</details>"
    )


def _judgement_html(result: BenchMeasured) -> list[str]:
    """How the comparison was made, its calibration, and its A/A control."""
    body = []
    comparison = result.comparison
    if comparison.get("method"):
        body.append(
            f"<p>{escape(comparison['method'])}; p = {comparison['p_value']:.2g}, "
            f"q = {result.q_value:.2g}; ratio of medians "
            f"{comparison['ratio_of_medians']:.3f}; unpaired Mann-Whitney p = "
            f"{comparison['mann_whitney_p']:.2g}.</p>"
        )
    if result.calibration > 1.0:
        body.append(
            f"<p>Calibrated: the run's A/A controls showed p-values too small by a factor "
            f"{result.calibration:.2f} in z², so this p-value and interval were widened "
            f"accordingly (uncalibrated p = {comparison.get('uncalibrated_p_value', 0):.2g}).</p>"
        )
    control = result.aa_control
    if control and control.get("testable"):
        power = (
            f"; minimum detectable effect {_percent(result.mde)}"
            if result.verdict in _MDE_MEANS_SOMETHING
            else ""
        )
        body.append(
            f"<p>A/A control (baseline against itself): {control['ratio']:.3f} "
            f"[{control['ci_low']:.3f}, {control['ci_high']:.3f}], q = "
            f"{control['q_value']:.2g}{power}.</p>"
        )
    return body


def _measured_html(result: BenchMeasured, created_at: float) -> list[str]:
    """What else was measured on each side: roofline, collective bandwidth, compile."""
    roofline = [
        f"{role}: {describe(placed, detail=True)}" for role, placed in result.roofline.items()
    ]
    kept = kept_note(result.machine_roofline, created_at, "bounds")
    bandwidth = [
        f"{role}: algbw {bw['algbw_bytes_per_s'] / 1e9:.3g} GB/s, busbw "
        f"{bw['busbw_bytes_per_s'] / 1e9:.3g} GB/s"
        for role, bw in (result.collective_bandwidth or {}).items()
    ]
    oneshot = [
        f"{role}: phases {', '.join(f'{p} {s:.2f} s' for p, s in f['phases_s'].items())}"
        f"; graph breaks {f['graph_breaks']}; recompiles {f['recompiles']}"
        for role, f in (result.oneshot or {}).items()
        if f.get("phases_s")
    ]
    return [
        list_html(f"Roofline{kept}", roofline),
        list_html("Bandwidth (nccl-tests formulas)", bandwidth),
        list_html("Compile", oneshot),
    ]


def html(view: Any) -> str:
    results = _results(view)
    if not results:
        return "<section class='bench'><h2>Performance A/B</h2><p>No benchmarks ran.</p></section>"
    aa = any(r.aa for r in results)
    measured = [r for r in results if isinstance(r, BenchMeasured)]
    skipped = [r for r in results if not isinstance(r, BenchMeasured)]
    half_band = _half_band(view, measured[0]) if measured else 0.05
    counts = {v: sum(r.verdict == v for r in results) for v in VERDICTS}
    title = "Performance A/A (baseline against itself)" if aa else "Performance A/B"
    summary = ", ".join(f"{n} {escape(v)}" for v, n in counts.items() if n)
    parts = [
        f"<section class='bench'><h2>{title}</h2>",
        _confounds_html(view),
        f"<p>{summary}.</p>",
        _forest_html(measured, half_band),
        _table_html(results, view),
        "<h3>Per benchmark</h3>",
        "".join(_details_html(r, view) for r in measured),
    ]
    if skipped:
        parts.append(list_html("Skipped", [f"{r.key}: {r.reason}" for r in skipped]))
    parts.append("</section>")
    return "".join(parts)


# --- Markdown ----------------------------------------------------------------------------


# The order a reader acts on: what blocks first, what was shown harmless last.
_MARKDOWN_ORDER = ("slower", "faster", "too-noisy", "no-change-detected", "same", "skipped")


# Marks after a benchmark's name, explained once above the list.
_MARKS = (
    ("*", "not only torch differs (the confound above) and can move this figure"),
    ("~", "noisy: see the warnings in the HTML report"),
    ("^", "what ran (operators, kernels) changed"),
    ("!", "a workload's outputs differ between the versions beyond its tolerance"),
)


def _marks(result: BenchResult) -> str:
    if not isinstance(result, BenchMeasured):
        return ""
    flags = (
        bool(result.confounds),
        bool(result.noise_warnings),
        result.changed_dispatch,
        result.numerics_drift,
    )
    return "".join(mark for (mark, _meaning), flag in zip(_MARKS, flags, strict=True) if flag)


def markdown(view: Any) -> str:
    """A summary one terminal screen holds at 80 columns; the detail is the HTML report's.

    Benchmarks are listed under their verdict, one line each: name, ratio with interval,
    and where no change was found nor ruled out the MDE; the "same" heading names the band
    each of its intervals lies in (what decided them, see ``_bound``). The build confound
    is stated once above, and what a row would repeat (confound, noise warnings, changed
    kernels) is a one-character mark explained once.
    """
    results = _results(view)
    aa = any(r.aa for r in results)
    lines = ["## Performance A/A (baseline against itself)" if aa else "## Performance A/B", ""]
    confounds = view.confounds()
    if confounds and not aa:
        lines += [
            "Not only the torch version differs: "
            + "; ".join(f"{k} {b} vs {c}" for k, (b, c) in sorted(confounds.items())),
            "",
        ]
    if not results:
        return "\n".join([*lines, "No benchmarks ran."])
    used = {mark for r in results for mark in _marks(r)}
    legend = [f"{mark} {meaning}" for mark, meaning in _MARKS if mark in used]
    if legend:
        lines += ["Marks: " + "; ".join(legend) + ".", ""]
    order = [v for v in _MARKDOWN_ORDER if v in VERDICTS] + [
        v for v in VERDICTS if v not in _MARKDOWN_ORDER
    ]
    for verdict in order:
        chosen = [r for r in results if r.verdict == verdict]
        if not chosen:
            continue
        lines.append(f"**{verdict}** ({len(chosen)})" + _heading_note(verdict, chosen, view))
        for result in chosen:
            line = f"- `{result.key}`{_marks(result)}"
            if isinstance(result, BenchMeasured) and result.ratio is not None:
                line += f" {_interval(result)}"
                if result.verdict in _MDE_MEANS_SOMETHING and result.mde is not None:
                    line += f" MDE {_percent(result.mde)}"
                link = _reproducer(view, result.key)
                line += f" ([Reproduce]({link}))" if link else ""
            if not isinstance(result, BenchMeasured):
                reason = result.reason
                line += ": " + (reason if len(reason) <= 60 else reason[:59] + "…")
            lines.append(line)
            facts = summary_line(result.payload) if isinstance(result, BenchMeasured) else ""
            if facts:
                lines.append(f"  {facts}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _heading_note(verdict: str, chosen: list[BenchResult], view: Any) -> str:
    measured = [r for r in chosen if isinstance(r, BenchMeasured)]
    if verdict != BenchVerdict.SAME or not measured:
        return ""
    bands = sorted({_half_band(view, r) for r in measured})
    return f": each interval inside ±{'/'.join(_percent(b) for b in bands)}"


def reused(view: Any) -> dict[str, tuple[int, int]]:
    """Dispatch profiles (one per benchmark and side) and rooflines (one per environment)
    kept from earlier runs of the same environment, of all this run has."""
    profiles: list[bool] = []
    rooflines: dict[str, bool] = {}
    for result in _results(view):
        if not isinstance(result, BenchMeasured):
            continue
        profiles += [_is_kept(found) for found in (result.dispatch or {}).values()]
        for role, found in result.machine_roofline.items():
            rooflines[role] = rooflines.get(role, False) or _is_kept(found)
    counts = {"dispatch profiles": profiles, "rooflines": list(rooflines.values())}
    return {kind: (sum(kept), len(kept)) for kind, kept in counts.items() if kept}


def _is_kept(found: Any) -> bool:
    return isinstance(found, dict) and isinstance(found.get(REUSED), dict)


# --- JUnit -------------------------------------------------------------------------------


def junit_cases(view: Any) -> list[JUnitCase]:
    """Slower beyond the run's own policy fails; too noisy, no change detected (not shown
    equivalent) or skipped is skipped, not passed."""
    cases = []
    rules = policy_rules(view.run.plan.get("policy"))  # as resolved and stored with the run
    limit = rules["bench_max_slowdown"]
    changed = (BenchVerdict.SLOWER, BenchVerdict.FASTER)
    for result in _results(view):
        seconds = float(result.harness.get("measure_s") or 0.0)
        if not isinstance(result, BenchMeasured):
            status = "error" if result.failed else "skipped"
            cases.append(JUnitCase("bench", result.key, status, seconds, result.reason, ""))
            continue
        text = "\n".join([*result.reasons, *result.noise_warnings])
        slowdown = result.slowdown
        if (
            result.verdict is BenchVerdict.SLOWER
            and not result.aa
            and slowdown is not None
            and slowdown > limit
        ):
            status, message = "failure", f"{slowdown:+.1%} slower {_interval(result)}"
        elif result.verdict in changed and result.aa and rules["bench_block_on_aa_alarm"]:
            status, message = "failure", "A/A run: differs from itself"
        elif result.numerics_drift and rules["bench_block_on_numeric_drift"]:
            status, message = "failure", "outputs differ: " + (result.numerics or {})["reason"]
        elif result.verdict in (BenchVerdict.TOO_NOISY, BenchVerdict.NO_CHANGE_DETECTED):
            # Neither shows the benchmark unchanged, so neither may pass.
            status, message = "skipped", f"{result.verdict}: " + "; ".join(result.reasons)
        else:
            status, message = "passed", f"{result.verdict} {_interval(result)}"
        cases.append(JUnitCase("bench", result.key, status, seconds, message, text))
    return cases


def history_plot(item: str, entries: list[HistoryEntry]) -> str | None:
    """A benchmark's history for ``torchcanary history``: the forest of its ratios across
    runs (None when no run has a ratio, and the command draws its verdicts instead).

    Across runs there is no one run's policy: the band shaded is the defaults' (the
    equivalence band, narrowed by ``bench_max_slowdown``), as a run with no settings of its
    own decides with."""
    default_band = min(BenchSettings.equivalence, float(policy_rules(None)["bench_max_slowdown"]))
    return history_forest(item, entries, default_band)
