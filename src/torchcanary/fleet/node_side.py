"""The code that runs on a fleet node: read its hardware facts, run one work unit.

Standard library only: a node has whatever Python its Ray worker runs, not the driver's
packages. Both functions take and return plain JSON text, so nothing but strings crosses
between driver and node.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import shutil
import subprocess
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from torchcanary.fleet.unit import UnitResult, UnitStatus, WorkUnit
from torchcanary.node_kit.devices import unit_view

_TOOL_TIMEOUT_S = 10.0
# The first piece of every unit: what the unit was given, as its engine set it.
DEVICES_OP = "devices"


def collect_hardware_facts() -> str:
    """This node's hardware as JSON: GPUs, driver, CUDA or ROCm, CPU, OS.

    Each fact comes from the tool that owns it (nvidia-smi, rocm-smi, /proc/cpuinfo, the
    OS release file); a missing tool leaves its facts empty rather than failing the node.
    """
    gpu_models, driver, cuda = _nvidia_facts()
    rocm = _rocm_version()
    if not gpu_models and rocm:
        gpu_models = _rocm_gpu_models()
    facts = {
        "gpu_model": gpu_models[0] if gpu_models else "",
        "gpu_count": len(gpu_models),
        "gpu_driver": driver,
        "cuda_version": cuda,
        "rocm_version": rocm,
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count() or 0,
        "arch": platform.machine(),
        "os": _os_name(),
    }
    return json.dumps(facts, sort_keys=True)


def stream_unit(unit_json: str) -> Iterator[str]:
    """Run one unit whose worker yields its output piece by piece; each piece goes home now.

    Each piece comes back as a PARTIAL result, the first saying what the unit was given
    (``{"op": "devices", "unit": ...}``, see ``node_kit/devices.py``); the last result is OK,
    or FAILED with the first line of what the worker raised (pieces sent before it stay
    sent).
    """
    unit = WorkUnit.from_json(unit_json)
    started = time.perf_counter()
    os.environ.update(unit.env)  # a Ray worker process runs one streaming unit at a time
    given = {"op": DEVICES_OP, "unit": unit_view(), "asked": asked(unit)}
    yield UnitResult(unit.unit_id, UnitStatus.PARTIAL, "", "", output=given).to_json()
    status, error = UnitStatus.OK, None
    try:
        module_name, _, function_name = unit.worker.partition(":")
        worker = getattr(importlib.import_module(module_name), function_name)
        for piece in worker(dict(unit.payload)):
            yield UnitResult(
                unit.unit_id, UnitStatus.PARTIAL, "", "", output=piece, seconds=0.0
            ).to_json()
    except Exception as exc:
        status = UnitStatus.FAILED
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        traceback.print_exc()
    yield UnitResult(
        unit.unit_id, status, "", "", error=error, seconds=time.perf_counter() - started
    ).to_json()


def asked(unit: WorkUnit) -> dict[str, float]:
    """What the unit asked its engine for, by resource name."""
    return {"CPU": unit.num_cpus, "GPU": unit.num_gpus, **dict(unit.resources)}


def _run_tool(*command: str) -> str:
    if shutil.which(command[0]) is None:
        return ""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def _nvidia_facts() -> tuple[list[str], str, str]:
    rows = _run_tool("nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader")
    models: list[str] = []
    driver = ""
    for row in rows.splitlines():
        name, _, version = row.partition(",")
        if name.strip():
            models.append(name.strip())
            driver = version.strip()
    cuda = ""
    # The CUDA version the driver supports is only in nvidia-smi's banner.
    for line in _run_tool("nvidia-smi").splitlines():
        if "CUDA Version:" in line:
            cuda = line.split("CUDA Version:")[1].split()[0].strip(" |")
    return models, driver, cuda


def _rocm_version() -> str:
    for path in (Path("/opt/rocm/.info/version"), Path("/opt/rocm/.info/version-dev")):
        if path.is_file():
            return path.read_text().strip()
    return ""


def _rocm_gpu_models() -> list[str]:
    rows = _run_tool("rocm-smi", "--showproductname", "--csv")
    models = []
    for row in rows.splitlines()[1:]:
        cells = [cell.strip() for cell in row.split(",")]
        if len(cells) > 1 and cells[1]:
            models.append(cells[1])
    return models


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def _os_name() -> str:
    try:
        release = platform.freedesktop_os_release()
        return (
            release.get("PRETTY_NAME")
            or f"{release.get('NAME', '')} {release.get('VERSION_ID', '')}".strip()
        )
    except OSError:
        return f"{platform.system()} {platform.release()}"
