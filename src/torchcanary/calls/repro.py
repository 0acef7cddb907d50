"""The calls section's part of ``torchcanary repro``: each changed call as a finding a
script can show, with the recorded call itself (its arguments' values inline) and what
each version's replay did in the run.

The recorded call is kept in its stored row (``extra["call"]``) when the run judges it, so
a reproducer needs the store alone, not the run's work folder.
"""

from __future__ import annotations

import base64
import mmap
from collections.abc import Mapping
from typing import Any

from torchcanary.calls.compare import CallVerdict
from torchcanary.calls.result import CallChange, from_rows
from torchcanary.section_types import Finding, RunView

SECTION = "calls"
KIND = "call"  # the repro writer that reads these findings
# The verdicts a standalone script can show: the call behaves otherwise in the candidate.
SHOWN = (CallVerdict.RAISES_NOW, CallVerdict.DIFFERENT_RESULT, CallVerdict.NEW_WARNING)


INLINE_LIMIT = 1 << 20  # bytes of one tensor argument a stored row keeps inline


def inline_values(encoded: Any, values: bytes | mmap.mmap) -> Any:
    """An encoded argument with each tensor's bytes inline (``data: {"b64"}``) instead of
    an offset into the recording's ``values.bin``; a tensor past ``INLINE_LIMIT`` keeps its
    metadata alone (``data`` null: a row stays small, the reproducer says it cannot write
    it)."""
    if isinstance(encoded, list):
        return [inline_values(item, values) for item in encoded]
    if not isinstance(encoded, dict):
        return encoded
    if encoded.get("t") == "tensor" and encoded.get("data"):
        data = encoded["data"]
        if data["length"] > INLINE_LIMIT:
            return {**encoded, "data": None}
        raw = values[data["offset"] : data["offset"] + data["length"]]
        return {**encoded, "data": {"b64": base64.b64encode(raw).decode("ascii")}}
    return {key: inline_values(value, values) for key, value in encoded.items()}


def kept_call(
    call: Mapping[str, Any], values: bytes | mmap.mmap, seed: int | None
) -> dict[str, Any]:
    """What of a recorded call a script needs: the callable, its arguments (values inline),
    the modes it ran under and the seed its replays drew from."""
    return {
        "seed": seed,
        "callable": call["callable"],
        "args": inline_values(list(call.get("args", [])), values),
        "kwargs": inline_values(dict(call.get("kwargs", {})), values),
        "context": call.get("context") or {},
    }


def reproducible(view: RunView) -> list[Finding]:
    """Every changed call the run kept the recording of, with what each version did."""
    found = []
    for change in from_rows(view.sections.get(SECTION, [])):
        if not isinstance(change, CallChange) or change.verdict not in SHOWN:
            continue
        call = change.extra.get("call")
        if not call:
            continue  # a run stored before rows kept their call
        found.append(
            Finding(
                section=SECTION,
                item=change.key,
                kind=KIND,
                delta=change.sentence(),
                facts={
                    "call": call,
                    "verdict": change.verdict.value,
                    "site": change.site,
                    "observed": dict(change.extra.get("observed", {})),
                    "announced": dict(change.announced),
                },
            )
        )
    return found
