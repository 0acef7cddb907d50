"""Inline SVG for the bench report: a forest plot of ratios and per-side distributions.

Plain strings, no scripts or external resources, so the report opens anywhere. Every label
that comes from results passes through ``html.escape``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from torchcanary.report_kit.svg import VERDICT_COLOURS

SIDE_COLOURS = {"baseline": "#0969da", "baseline-aa": "#8250df", "candidate": "#cf222e"}


@dataclass(frozen=True)
class ForestRow:
    label: str
    ratio: float
    low: float
    high: float
    verdict: str


def _log_position(value: float, low: float, high: float, width: float) -> float:
    value = min(max(value, low), high)
    return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low)) * width


def forest(rows: list[ForestRow], equivalence: float, title: str = "") -> str:
    """Ratio candidate/baseline with its interval per row, on a log axis centred on 1."""
    if not rows:
        return ""
    finite = [v for r in rows for v in (r.low, r.high, r.ratio) if math.isfinite(v) and v > 0]
    spread = max([abs(math.log(v)) for v in finite] + [math.log(1 + 2 * equivalence)])
    spread = min(spread * 1.1, math.log(16))
    low, high = math.exp(-spread), math.exp(spread)
    label_w, plot_w, row_h, top = 330, 420, 18, 28

    def x_of(value: float) -> float:
        return label_w + _log_position(value, low, high, plot_w)

    height = top + row_h * len(rows) + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + plot_w + 110}" '
        f'height="{height}" role="img" font-family="sans-serif" font-size="11">'
    ]
    if title:
        parts.append(f'<text x="4" y="14" font-weight="bold">{escape(title)}</text>')
    band_l, band_r = x_of(1 / (1 + equivalence)), x_of(1 + equivalence)
    parts.append(
        f'<rect x="{band_l:.1f}" y="{top - 4}" width="{band_r - band_l:.1f}" '
        f'height="{row_h * len(rows) + 4}" fill="#eaeef2"/>'
    )
    one = x_of(1.0)
    parts.append(
        f'<line x1="{one:.1f}" x2="{one:.1f}" y1="{top - 6}" '
        f'y2="{top + row_h * len(rows)}" stroke="#57606a"/>'
    )
    for index, row in enumerate(rows):
        # An interval open at an end is drawn to the axis' end.
        ends = (row.low if row.low > 0 else low, row.high if math.isfinite(row.high) else high)
        y = top + index * row_h + row_h / 2
        xs = (x_of(ends[0]), x_of(row.ratio), x_of(ends[1]))
        parts += _forest_row(row, y, xs, label_w, label_w + plot_w + 6)
    ticks = (1.0, low, high, 1 / (1 + equivalence), 1 + equivalence)
    axis_y = top + row_h * len(rows) + 14
    parts += _forest_axis([(tick, x_of(tick)) for tick in ticks], axis_y)
    parts.append(
        f'<text x="{label_w + plot_w / 2}" y="{axis_y + 13}" text-anchor="middle" '
        'fill="#57606a">candidate / baseline time (log scale; shaded: equivalence '
        "band)</text></svg>"
    )
    return "".join(parts)


def _forest_row(
    row: ForestRow, y: float, xs: tuple[float, float, float], label_w: int, values_x: int
) -> list[str]:
    """One row: its label, its interval (``xs``: low, estimate, high) and estimate, and
    the ratio and verdict after."""
    x_low, x_mid, x_high = xs
    colour = VERDICT_COLOURS.get(row.verdict, "#57606a")
    return [
        f'<text x="{label_w - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(row.label)}</text>',
        f'<line x1="{x_low:.1f}" x2="{x_high:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
        f'stroke="{colour}" stroke-width="2"/>',
        f'<circle cx="{x_mid:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}"/>',
        f'<text x="{values_x}" y="{y + 4:.1f}" fill="{colour}">'
        f"{row.ratio:.3f} {escape(row.verdict)}</text>",
    ]


def _forest_axis(ticks: list[tuple[float, float]], axis_y: float) -> list[str]:
    """The axis' tick labels, ``(value, x)``, leaving out those that would overlap."""
    parts: list[str] = []
    placed: list[float] = []
    for tick, x in ticks:
        if any(abs(x - other) < 34 for other in placed):
            continue  # labels that would overlap say nothing
        placed.append(x)
        parts.append(
            f'<text x="{x:.1f}" y="{axis_y}" text-anchor="middle" fill="#57606a">{tick:.2f}</text>'
        )
    return parts


def distributions(
    sides: dict[str, dict[str, float | list[float]]], unit_s: float, unit: str
) -> str:
    """Box (quartiles, 5-95% whiskers) and strip of sampled points per side, log axis."""
    present = {name: s for name, s in sides.items() if s.get("n")}
    if not present:
        return ""
    values = [v for s in present.values() for v in s["plot_s"]]  # type: ignore[union-attr]
    low, high = min(values), max(values)
    if high <= low:
        high = low * 1.01 + 1e-12
    label_w, plot_w, row_h = 110, 460, 34
    height = row_h * len(present) + 34
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + plot_w + 50}" '
        f'height="{height}" role="img" font-family="sans-serif" font-size="11">'
    ]

    low, high = max(low, 1e-15), max(high, 1e-15)

    def x_of(value: float) -> float:  # log scale: timing tails are long and one-sided
        return label_w + _log_position(max(value, 1e-15), low, high, plot_w)

    for index, (name, side) in enumerate(present.items()):
        y = 8 + index * row_h
        colour = SIDE_COLOURS.get(name, "#57606a")
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 16}" text-anchor="end">{escape(name)}</text>'
        )
        q05, q25, q50, q75, q95 = (
            float(side[k])  # type: ignore[arg-type]
            for k in ("q05_s", "q25_s", "median_s", "q75_s", "q95_s")
        )
        parts.append(
            f'<line x1="{x_of(q05):.1f}" x2="{x_of(q95):.1f}" y1="{y + 12}" '
            f'y2="{y + 12}" stroke="{colour}"/>'
        )
        parts.append(
            f'<rect x="{x_of(q25):.1f}" y="{y + 4}" width="'
            f'{max(x_of(q75) - x_of(q25), 1):.1f}" height="16" fill="none" '
            f'stroke="{colour}"/>'
        )
        parts.append(
            f'<line x1="{x_of(q50):.1f}" x2="{x_of(q50):.1f}" y1="{y + 2}" '
            f'y2="{y + 22}" stroke="{colour}" stroke-width="2"/>'
        )
        for point in side["plot_s"]:  # type: ignore[union-attr]
            parts.append(
                f'<circle cx="{x_of(point):.1f}" cy="{y + 28}" r="1.5" '
                f'fill="{colour}" fill-opacity="0.5"/>'
            )
    axis_y = row_h * len(present) + 24
    for fraction in (0.0, 0.5, 1.0):
        value = math.exp(math.log(low) + (math.log(high) - math.log(low)) * fraction)
        parts.append(
            f'<text x="{x_of(value):.1f}" y="{axis_y}" text-anchor="middle" '
            f'fill="#57606a">{value / unit_s:.4g} {escape(unit)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
