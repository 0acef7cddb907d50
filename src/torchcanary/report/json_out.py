"""The JSON form of a run (schema in docs/json-schema.md): everything, nothing rendered."""

from __future__ import annotations

import json
import math
from typing import Any

from torchcanary.report.view import section_records
from torchcanary.results import SCHEMA_VERSION
from torchcanary.section_types import RunView
from torchcanary.sections import registered

JSON_SCHEMA_VERSION = 1


def strict_json(data: Any) -> str:
    """Strict JSON: a number that is not finite (an infinite ratio, a NaN bound) is written
    as null, since NaN and Infinity are not JSON and browsers, ``jq`` and most parsers
    outside Python refuse a file that holds them."""
    return json.dumps(_finite(data), indent=2, default=str, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def render_json(view: RunView) -> dict[str, Any]:
    run = view.run
    data = {
        "schema_version": JSON_SCHEMA_VERSION,
        "result_schema_version": SCHEMA_VERSION,
        "run": {
            "run_id": run.run_id,
            "created_at": run.created_at,
            "finished_at": run.finished_at,
            "status": run.status,
            "plan": run.plan,
        },
        "decision": run.decision,
        "decision_detail": run.decision_detail,
        "environments": {
            role: {
                "spec": env.spec,
                "python": env.python,
                "torch_version": env.torch_version,
                "build_seconds": env.build_seconds,
                "reused": env.reused,
                "manifest": env.manifest.to_json(),
            }
            for role, env in view.environments.items()
        },
        "confounds": {k: {"baseline": b, "candidate": c} for k, (b, c) in view.confounds().items()},
    }
    # A section's own top-level entries (the claims: ``claims``, ``coverage``, ``packs``).
    for section in registered().values():
        data |= section.json_parts(view)
    # Each row as its section's typed record writes it (docs/json-schema.md).
    data["sections"] = {
        name: [record.to_json() for record in section_records(view, name)] for name in view.sections
    }
    return data
