"""Runs one probe inside the worker and turns whatever happens into an Outcome."""

from __future__ import annotations

import importlib
import importlib.util
import os
import tempfile
import time
import traceback
from typing import Any

from torchcanary.probe import Probe, ProbeContext, probes_in_module
from torchcanary.probe_result import Outcome, Verdict
from torchcanary.worker.devices import available_devices

_EVIDENCE_TEXT_LIMIT = 20_000


def _bounded(value: Any) -> Any:
    """Keep evidence small enough to store and show: long strings keep their tail."""
    if isinstance(value, str) and len(value) > _EVIDENCE_TEXT_LIMIT:
        return "...[truncated]..." + value[-_EVIDENCE_TEXT_LIMIT:]
    if isinstance(value, dict):
        return {str(k): _bounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_bounded(v) for v in value[:2000]]
    return value


def _load_probe(module_name: str, probe_id: str) -> Probe:
    """Import the probe's module (the orchestrator found it there) and pick it by id."""
    module = importlib.import_module(module_name)
    for probe in probes_in_module(module):
        if probe.id == probe_id:
            return probe
    raise LookupError(f"module {module_name} defines no probe {probe_id!r}")


def run_probe(module: str, probe_id: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check the probe's needs, run it, and return its Outcome as JSON with timing."""
    probe = _load_probe(module, probe_id)
    devices = available_devices()
    started = time.time()
    missing_devices = probe.needs.devices and not set(probe.needs.devices) & set(devices)
    missing_packages = [p for p in probe.needs.packages if importlib.util.find_spec(p) is None]
    if missing_devices:
        outcome = Outcome(
            Verdict.NOT_CHECKABLE,
            f"not checked: needs {' or '.join(probe.needs.devices)}; this environment has "
            f"{', '.join(devices)}",
            {"needs": probe.needs.describe(), "devices_here": list(devices)},
        )
    elif missing_packages:
        outcome = Outcome(
            Verdict.NOT_CHECKABLE,
            f"not checked: needs package(s) {', '.join(missing_packages)}",
            {"needs": probe.needs.describe()},
        )
    else:
        with tempfile.TemporaryDirectory(prefix=f"canary-{probe_id}-") as scratch:
            context = ProbeContext(scratch_dir=scratch, devices=devices, params=params or {})
            cwd = os.getcwd()
            try:
                outcome = probe.run(context)
                if not isinstance(outcome, Outcome):
                    raise TypeError(f"probe returned {type(outcome).__name__}, not Outcome")
            except Exception as exc:
                outcome = Outcome(
                    Verdict.ERROR,
                    f"probe raised {type(exc).__name__}: {str(exc)[:300]}",
                    {"traceback": traceback.format_exc()[-6000:]},
                )
            finally:
                os.chdir(cwd)
    data = outcome.to_json()
    data["evidence"] = _bounded(data["evidence"])
    data["duration_s"] = time.time() - started
    return data
