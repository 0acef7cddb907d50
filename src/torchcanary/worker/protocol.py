"""The worker protocol: one JSON object per line, request in, response out.

Request:  ``{"id": 3, "func": "package.module:function", "kwargs": {...}}``
Response: ``{"id": 3, "ok": true, "value": ...}`` or
          ``{"id": 3, "ok": false, "error": "ValueError: ...", "traceback": "..."}``
The worker sends ``{"id": 0, "ok": true, "value": {"ready": true, ...}}`` once it has started.
Standard library only: both sides import it.
"""

from __future__ import annotations

import json
from typing import Any

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 8 * 1024 * 1024


class ProtocolError(Exception):
    """The other side sent something that is not a protocol message."""


def encode(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, separators=(",", ":"), default=str) + "\n").encode()


def decode(line: bytes) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not JSON: {line[:200]!r}") from exc
    if not isinstance(message, dict) or "id" not in message:
        raise ProtocolError(f"not a protocol message: {line[:200]!r}")
    return message
