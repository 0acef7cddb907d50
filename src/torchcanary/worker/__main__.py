"""Worker entry point: serve calls until stdin closes.

Anything a call prints, from Python or from C, must not corrupt the protocol, so the real
stdout is kept on a private descriptor and fd 1 is pointed at stderr before any call runs.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any

from torchcanary.worker.ending import end_now
from torchcanary.worker.lifeline import die_with_parent
from torchcanary.worker.protocol import MAX_LINE_BYTES, PROTOCOL_VERSION, decode, encode


def _resolve(func_ref: str) -> Any:
    module_name, _, attr = func_ref.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    try:
        value = _resolve(request["func"])(**request.get("kwargs", {}))
        return {"id": request["id"], "ok": True, "value": value}
    except BaseException as exc:  # the call's failure is data; only the orchestrator decides
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {
            "id": request["id"],
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}"[:2000],
            "traceback": traceback.format_exc()[-8000:],
        }


def main() -> None:
    die_with_parent()
    protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    protocol_in = sys.stdin.buffer
    protocol_out.write(
        encode(
            {
                "id": 0,
                "ok": True,
                "value": {
                    "ready": True,
                    "protocol": PROTOCOL_VERSION,
                    "pid": os.getpid(),
                    "python": sys.executable,
                },
            }
        )
    )
    for line in protocol_in:
        if not line.strip():
            continue
        response = _answer(decode(line))
        payload = encode(response)
        if len(payload) > MAX_LINE_BYTES:
            payload = encode(
                {
                    "id": response["id"],
                    "ok": False,
                    "error": f"result too large ({len(payload)} bytes)",
                    "traceback": "",
                }
            )
        protocol_out.write(payload)
    end_now()  # the orchestrator closed our input: every answer is out


if __name__ == "__main__":
    main()
