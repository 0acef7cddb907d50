"""Small inline-SVG plots, so the HTML report needs no script, network or plotting library."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

ROLE_COLOURS = {"baseline": "#4c72b0", "candidate": "#dd8452"}
_FONT = 'font-family="sans-serif" font-size="11"'


def _text(x: float, y: float, label: str, anchor: str = "start", extra: str = "") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" {_FONT} {extra}>'
        f"{html.escape(label)}</text>"
    )


def grouped_bars(title: str, groups: Sequence[tuple[str, dict[str, float]]], unit: str = "") -> str:
    """One row per group, one bar per role; values share one linear axis from zero."""
    values = [v for _, by_role in groups for v in by_role.values() if math.isfinite(v)]
    if not values:
        return ""
    top = max(values) or 1.0
    label_w, plot_w, bar_h = 220, 360, 12
    rows = []
    y = 24
    for label, by_role in groups:
        rows.append(_text(4, y + bar_h, label[:36]))
        for role, value in by_role.items():
            width = plot_w * (value / top) if math.isfinite(value) else 0
            colour = ROLE_COLOURS.get(role, "#888")
            rows.append(
                f'<rect x="{label_w}" y="{y}" width="{width:.1f}" height="{bar_h - 2}" '
                f'fill="{colour}"><title>{html.escape(role)}: {value:.4g} {unit}'
                "</title></rect>"
            )
            rows.append(_text(label_w + width + 4, y + bar_h - 3, f"{value:.3g} {unit}"))
            y += bar_h
        y += 6
    heading = _text(4, 14, title, extra='font-weight="bold"')
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + plot_w + 90}" '
        f'height="{y + 8}" role="img"><title>{html.escape(title)}</title>'
        f"{heading}{''.join(rows)}</svg>"
    )


def forest(
    title: str, rows: Sequence[tuple[str, float, float, float]], reference: float = 1.0
) -> str:
    """Ratios with intervals on a log axis, one row each: (label, low, centre, high)."""
    finite = [v for _, lo, mid, hi in rows for v in (lo, mid, hi) if v > 0 and math.isfinite(v)]
    if not finite:
        return ""
    lo_axis = math.log(min(min(finite), reference) * 0.95)
    hi_axis = math.log(max(max(finite), reference) * 1.05)
    label_w, plot_w, row_h = 260, 320, 18

    def x_of(value: float) -> float:
        return label_w + plot_w * (math.log(value) - lo_axis) / (hi_axis - lo_axis or 1)

    parts = [_text(4, 14, title, extra='font-weight="bold"')]
    ref_x = x_of(reference)
    height = 30 + row_h * len(rows)
    parts.append(
        f'<line x1="{ref_x:.1f}" y1="20" x2="{ref_x:.1f}" y2="{height - 14}" '
        'stroke="#999" stroke-dasharray="3,3"/>'
    )
    for index, (label, low, centre, high) in enumerate(rows):
        y = 30 + row_h * index
        parts.append(_text(4, y + 4, label[:42]))
        if min(low, centre, high) <= 0:
            continue
        colour = "#c44e52" if low > reference else "#55a868" if high < reference else "#555"
        parts.append(
            f'<line x1="{x_of(low):.1f}" y1="{y}" x2="{x_of(high):.1f}" y2="{y}" '
            f'stroke="{colour}" stroke-width="2"/>'
        )
        parts.append(
            f'<circle cx="{x_of(centre):.1f}" cy="{y}" r="3.5" fill="{colour}">'
            f"<title>{centre:.4f} [{low:.4f}, {high:.4f}]</title></circle>"
        )
        parts.append(_text(label_w + plot_w + 6, y + 4, f"{centre:.3f}"))
    parts.append(_text(ref_x, height - 2, f"{reference:g}", anchor="middle"))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + plot_w + 60}" '
        f'height="{height}" role="img">{"".join(parts)}</svg>'
    )


def strip(title: str, samples: dict[str, Sequence[float]], unit: str = "") -> str:
    """Every sample of each role as a dot on a shared axis, with the median as a bar."""
    values = [v for series in samples.values() for v in series if math.isfinite(v)]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or abs(high) or 1.0
    label_w, plot_w, row_h = 90, 420, 26

    def x_of(value: float) -> float:
        return label_w + plot_w * (value - low) / span

    parts = [_text(4, 14, title, extra='font-weight="bold"')]
    for index, (role, series) in enumerate(samples.items()):
        y = 34 + row_h * index
        colour = ROLE_COLOURS.get(role, "#888")
        parts.append(_text(4, y + 4, role))
        for value in series:
            parts.append(
                f'<circle cx="{x_of(value):.1f}" cy="{y}" r="2.5" fill="{colour}" '
                'fill-opacity="0.5"/>'
            )
        if series:
            ordered = sorted(series)
            median = ordered[len(ordered) // 2]
            parts.append(
                f'<line x1="{x_of(median):.1f}" y1="{y - 8}" x2="{x_of(median):.1f}" '
                f'y2="{y + 8}" stroke="#000" stroke-width="2"/>'
            )
    height = 34 + row_h * len(samples)
    parts.append(_text(label_w, height, f"{low:.4g} {unit}"))
    parts.append(_text(label_w + plot_w, height, f"{high:.4g} {unit}", anchor="end"))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + plot_w + 20}" '
        f'height="{height + 6}" role="img">{"".join(parts)}</svg>'
    )
