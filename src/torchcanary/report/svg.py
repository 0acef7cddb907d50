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
