"""Small inline-SVG plots, so the HTML report needs no script, network or plotting library."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

ROLE_COLOURS = {"baseline": "#4c72b0", "candidate": "#dd8452"}
# Every section's verdict words in one palette: green good, red bad, grey or amber unsure.
VERDICT_COLOURS = {
    "faster": "#1a7f37",
    "slower": "#cf222e",
    "same": "#57606a",
    "no-change-detected": "#6e7781",
    "too-noisy": "#bf8700",
    "skipped": "#8c959f",
    "already in baseline": "#1a7f37",
    "new in candidate": "#1a7f37",
    "passed": "#1a7f37",
    "regressed": "#cf222e",
    "failed": "#cf222e",
    "error": "#cf222e",
}
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


def verdict_strip(title: str, rows: Sequence[tuple[str, str]]) -> str:
    """One row per ``(label, verdict)``: the label, and the verdict in its colour."""
    row_h, top = 18, 28
    height = top + row_h * max(len(rows), 1) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="720" height="{height}" role="img" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="4" y="14" font-weight="bold">{html.escape(title)}</text>',
    ]
    for index, (label, verdict) in enumerate(rows):
        y = top + index * row_h + row_h / 2
        colour = VERDICT_COLOURS.get(verdict, "#57606a")
        parts.append(f'<text x="4" y="{y + 4:.1f}">{html.escape(label)}</text>')
        parts.append(
            f'<rect x="330" y="{y - 6:.1f}" width="12" height="12" fill="{colour}"/>'
            f'<text x="348" y="{y + 4:.1f}" fill="{colour}">{html.escape(verdict)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
