"""Text that reads the same in a terminal, a Markdown file and a rendered page."""

from __future__ import annotations

import re

_TAG_LIKE = re.compile(r"<[^<>\n]*>")


def literal_text(text: str) -> str:
    """``text`` for Markdown prose, with every ``<...>`` (a repr such as ``<alias of x>``)
    as a code span: bare, a renderer takes it for an HTML tag and drops it, and an entity
    (``&lt;``) shows as such in the terminal and in the file itself."""
    return _TAG_LIKE.sub(lambda found: _code_span(found.group(0)), text)


def _code_span(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"
