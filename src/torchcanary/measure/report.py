"""The bench section of the report: HTML fragment, Markdown, and JUnit cases.

Order follows what a skeptic checks first: what else differs between the environments
(confounds), then the verdicts at a glance (forest plot per benchmark family), then a table,
then per benchmark the distributions, roofline, what ran (dispatch diff) and the warnings.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from torchcanary.measure.history_plot import recent_html
from torchcanary.measure.plots import ForestRow, distributions, forest
from torchcanary.measure.roofline import describe
from torchcanary.measure.section import SECTION, VERDICTS, policy_rules
from torchcanary.measure.workload_report import fact_lines, summary_line
from torchcanary.report.junit import JUnitCase
from torchcanary.store.sqlite import SectionResult


def _results(view: Any) -> list[SectionResult]:
    return list(view.sections.get(SECTION, []))


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


def _interval(payload: dict[str, Any]) -> str:
    if payload.get("ratio") is None:
        return "–"
    return f"{payload['ratio']:.3f} [{payload['ci_low']:.3f}, {payload['ci_high']:.3f}]"


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _roofline_text(payload: dict[str, Any]) -> str:
    parts = [
        f"{role}: {describe(placed)}"
        for role, placed in (payload.get("roofline") or {}).items()
        if "fraction" in placed
    ]
    return "; ".join(parts) or "–"


def _confound_flag(payload: dict[str, Any]) -> str:
    found = payload.get("confounds") or {}
    return ("also differs: " + ", ".join(sorted(found))) if found else ""


def _family(result: SectionResult) -> str:
    return result.key.split("/", 1)[0]


# --- HTML --------------------------------------------------------------------------------


def _confounds_html(view: Any) -> str:
    confounds = view.confounds()
    if not confounds or any(r.payload.get("aa") for r in _results(view)):
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


def _forest_html(results: list[SectionResult], equivalence: float) -> str:
    families: dict[str, list[ForestRow]] = {}
    for result in results:
        payload = result.payload
        if payload.get("ratio") is None:
            continue
        families.setdefault(_family(result), []).append(
            ForestRow(
                result.key.split("/", 1)[-1],
                payload["ratio"],
                payload["ci_low"],
                payload["ci_high"],
                result.verdict,
            )
        )
    return "".join(
        f"<figure>{forest(rows, equivalence, family)}</figure>"
        for family, rows in sorted(families.items())
    )


def _table_html(results: list[SectionResult]) -> str:
    head = (
        "<tr><th>benchmark</th><th>verdict</th><th>ratio [interval]</th><th>q</th>"
        "<th>MDE</th><th>baseline</th><th>candidate</th><th>roofline</th><th>notes</th></tr>"
    )
    rows = []
    for result in results:
        payload = result.payload
        sides = payload.get("sides") or {}
        judged = "baseline-aa" if payload.get("aa") else "candidate"
        notes = [_confound_flag(payload)]
        if payload.get("noise_warnings"):
            notes.append(f"{len(payload['noise_warnings'])} noise warning(s)")
        if result.verdict == "skipped":
            notes.append(payload.get("reason", ""))
        if (payload.get("dispatch_diff") or {}).get("changed"):
            notes.append("what ran changed")
        q = payload.get("q_value")
        rows.append(
            f"<tr class='verdict-{escape(result.verdict)}'><td>{escape(result.key)}</td>"
            f"<td>{escape(result.verdict)}</td><td>{escape(_interval(payload))}</td>"
            f"<td>{'–' if q is None else f'{q:.2g}'}</td><td>{_percent(payload.get('mde'))}</td>"
            f"<td>{format_seconds((sides.get('baseline') or {}).get('median_s'))}</td>"
            f"<td>{format_seconds((sides.get(judged) or {}).get('median_s'))}</td>"
            f"<td>{escape(_roofline_text(payload))}</td>"
            f"<td>{escape('; '.join(n for n in notes if n))}</td></tr>"
        )
    return f"<table class='bench'>{head}{''.join(rows)}</table>"


def _list_html(title: str, items: list[str]) -> str:
    if not items:
        return ""
    return (
        f"<h5>{escape(title)}</h5><ul>"
        + "".join(f"<li>{escape(str(item))}</li>" for item in items)
        + "</ul>"
    )


def _dispatch_html(payload: dict[str, Any]) -> str:
    dispatch_diff = payload.get("dispatch_diff")
    if not dispatch_diff:
        return ""
    if "error" in dispatch_diff:
        return f"<p>What ran: not recorded ({escape(str(dispatch_diff['error']))})</p>"
    if not dispatch_diff["changed"]:
        return "<p>What ran: the same operators, kernels and library calls in both.</p>"
    items = []
    for view_name, change in dispatch_diff["changes"].items():
        for name in change["only_baseline"]:
            items.append(f"{view_name}: only baseline ran {name}")
        for name in change["only_candidate"]:
            items.append(f"{view_name}: only candidate ran {name}")
        for name, (before, after) in change["count_changed"].items():
            items.append(f"{view_name}: {name} {before:g} -> {after:g} per call")
    return _list_html("What ran differently", items)


def _details_html(result: SectionResult, view: Any) -> str:
    payload = result.payload
    sides = payload.get("sides") or {}
    centre = next((s["median_s"] for s in sides.values() if s.get("n")), 1.0)
    scale, unit = time_unit(centre)
    body = [distributions(sides, scale, unit)]
    comparison = payload.get("comparison") or {}
    if comparison.get("method"):
        body.append(
            f"<p>{escape(comparison['method'])}; p = {comparison['p_value']:.2g}, "
            f"q = {payload['q_value']:.2g}; ratio of medians "
            f"{comparison['ratio_of_medians']:.3f}; unpaired Mann-Whitney p = "
            f"{comparison['mann_whitney_p']:.2g}.</p>"
        )
    if payload.get("calibration", 1.0) > 1.0:
        body.append(
            f"<p>Calibrated: the run's A/A controls showed p-values too small by a factor "
            f"{payload['calibration']:.2f} in z², so this p-value and interval were widened "
            f"accordingly (uncalibrated p = {comparison.get('uncalibrated_p_value', 0):.2g}).</p>"
        )
    control = payload.get("aa_control")
    if control and control.get("testable"):
        body.append(
            f"<p>A/A control (baseline against itself): {control['ratio']:.3f} "
            f"[{control['ci_low']:.3f}, {control['ci_high']:.3f}], q = "
            f"{control['q_value']:.2g}; minimum detectable effect "
            f"{_percent(payload.get('mde'))}.</p>"
        )
    body.append(_list_html("Why this verdict", payload.get("reasons") or []))
    body.append(_list_html("Noise warnings", payload.get("noise_warnings") or []))
    body.append(
        _list_html(
            "Also differs between the environments (may move this figure)",
            [f"{k}: {v[0]} vs {v[1]}" for k, v in (payload.get("confounds") or {}).items()],
        )
    )
    roofline = [
        f"{role}: {describe(placed, detail=True)}"
        for role, placed in (payload.get("roofline") or {}).items()
    ]
    body.append(_list_html("Roofline", roofline))
    bandwidth = [
        f"{role}: algbw {bw['algbw_bytes_per_s'] / 1e9:.3g} GB/s, busbw "
        f"{bw['busbw_bytes_per_s'] / 1e9:.3g} GB/s"
        for role, bw in (payload.get("collective_bandwidth") or {}).items()
    ]
    body.append(_list_html("Bandwidth (nccl-tests formulas)", bandwidth))
    oneshot = [
        f"{role}: phases {', '.join(f'{p} {s:.2f} s' for p, s in f['phases_s'].items())}"
        f"; graph breaks {f['graph_breaks']}; recompiles {f['recompiles']}"
        for role, f in (payload.get("oneshot") or {}).items()
        if f.get("phases_s")
    ]
    body.append(_list_html("Compile", oneshot))
    body.append(_list_html("Your workload (baseline -> candidate)", fact_lines(payload)))
    body.append(_dispatch_html(payload))
    history = getattr(view, "bench_history", {}).get(result.key, [])
    body.append(recent_html(result.key, history, view.run.run_id))
    harness = payload.get("harness") or {}
    body.append(
        f"<p class='harness'>{escape(', '.join(f'{k}={v}' for k, v in harness.items()))}</p>"
    )
    return (
        f"<details><summary>{escape(result.key)}: {escape(result.verdict)} "
        f"{escape(_interval(payload))}</summary>{''.join(body)}</details>"
    )


def html(view: Any) -> str:
    results = _results(view)
    if not results:
        return "<section class='bench'><h2>Performance A/B</h2><p>No benchmarks ran.</p></section>"
    aa = any(r.payload.get("aa") for r in results)
    equivalence = float(results[0].payload.get("equivalence", 0.05))
    counts = {v: sum(r.verdict == v for r in results) for v in VERDICTS}
    title = "Performance A/A (baseline against itself)" if aa else "Performance A/B"
    summary = ", ".join(f"{n} {escape(v)}" for v, n in counts.items() if n)
    skipped = [r for r in results if r.verdict == "skipped"]
    measured = [r for r in results if r.verdict != "skipped"]
    parts = [
        f"<section class='bench'><h2>{title}</h2>",
        _confounds_html(view),
        f"<p>{summary}.</p>",
        _forest_html(measured, equivalence),
        _table_html(results),
        "<h3>Per benchmark</h3>",
        "".join(_details_html(r, view) for r in measured),
    ]
    if skipped:
        parts.append(
            _list_html("Skipped", [f"{r.key}: {r.payload.get('reason', '')}" for r in skipped])
        )
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


def _marks(payload: dict[str, Any]) -> str:
    flags = (
        bool(payload.get("confounds")),
        bool(payload.get("noise_warnings")),
        bool((payload.get("dispatch_diff") or {}).get("changed")),
        bool((payload.get("numerics") or {}).get("drift")),
    )
    return "".join(mark for (mark, _meaning), flag in zip(_MARKS, flags, strict=True) if flag)


def markdown(view: Any) -> str:
    """A summary one terminal screen holds at 80 columns; the detail is the HTML report's.

    Benchmarks are listed under their verdict, one line each: name, ratio with interval and
    MDE. The build confound is stated once above, and what a row would repeat (confound,
    noise warnings, changed kernels) is a one-character mark explained once.
    """
    results = _results(view)
    aa = any(r.payload.get("aa") for r in results)
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
    used = {mark for r in results for mark in _marks(r.payload)}
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
        lines.append(f"**{verdict}** ({len(chosen)})")
        for result in chosen:
            payload = result.payload
            line = f"- `{result.key}`{_marks(payload)}"
            if payload.get("ratio") is not None:
                line += f" {_interval(payload)} MDE {_percent(payload.get('mde'))}"
            if verdict == "skipped":
                reason = str(payload.get("reason", ""))
                line += ": " + (reason if len(reason) <= 60 else reason[:59] + "…")
            lines.append(line)
            facts = summary_line(payload) if verdict != "skipped" else ""
            if facts:
                lines.append(f"  {facts}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# --- JUnit -------------------------------------------------------------------------------


def junit_cases(view: Any) -> list[JUnitCase]:
    """Slower beyond the run's own policy fails; too noisy, no change detected (not shown
    equivalent) or skipped is skipped, not passed."""
    cases = []
    rules = policy_rules(view.run.plan.get("policy"))  # as resolved and stored with the run
    limit = rules["bench_max_slowdown"]
    for result in _results(view):
        payload = result.payload
        seconds = float((payload.get("harness") or {}).get("measure_s") or 0.0)
        text = "\n".join(
            list(payload.get("reasons") or []) + list(payload.get("noise_warnings") or [])
        )
        if result.verdict == "slower" and not payload.get("aa") and payload["ratio"] - 1 > limit:
            status, message = "failure", f"{payload['ratio'] - 1:+.1%} slower {_interval(payload)}"
        elif (
            result.verdict in ("slower", "faster")
            and payload.get("aa")
            and rules["bench_block_on_aa_alarm"]
        ):
            status, message = "failure", "A/A run: differs from itself"
        elif (payload.get("numerics") or {}).get("drift") and rules["bench_block_on_numeric_drift"]:
            status, message = "failure", "outputs differ: " + payload["numerics"]["reason"]
        elif result.verdict == "skipped":
            failed = payload.get("failed") or {}
            status = "error" if failed else "skipped"
            message = payload.get("reason", "")
        elif result.verdict in ("too-noisy", "no-change-detected"):
            # Neither shows the benchmark unchanged, so neither may pass.
            status, message = (
                "skipped",
                f"{result.verdict}: " + "; ".join(payload.get("reasons") or []),
            )
        else:
            status, message = "passed", f"{result.verdict} {_interval(payload)}"
        cases.append(JUnitCase("bench", result.key, status, seconds, message, text))
    return cases
