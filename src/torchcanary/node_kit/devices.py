"""The accelerators a unit was given and what it saw of them, and the rule that judges it.

A unit holds its node's GPUs (and the other accelerators the engine manages) the way it
holds the node's CPUs: asked for by name, so the engine sets the visible-devices variables
and no other unit is given the same device. What the unit saw is recorded twice: here, in
the unit's own process (the variables, the engine's own answer), and by the worker in each
environment (``worker/devices.py``: torch's count and the devices' names). A unit that saw
fewer GPUs than it should have is not checked, never passed (``shortfall``).

Standard library only: imported on the node as well as on the driver.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from torchcanary.worker.devices import VISIBLE_VARIABLES

# The variable that counts GPUs for each vendor whose GPUs the engine calls "GPU".
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
# Variables that change what the engine does with those: Ray's NOSET_* (it leaves a
# vendor's variable alone), its zero-GPU override, and what Slurm says a job was given.
ENGINE_PREFIXES = ("RAY_EXPERIMENTAL_NOSET_", "RAY_ACCEL_ENV_VAR_OVERRIDE")
SLURM_VARIABLES = ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE")


def visible_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The visible-devices variables set in ``environ``, as they are set."""
    return {name: environ[name] for name in VISIBLE_VARIABLES if name in environ}


def unit_view() -> dict[str, Any]:
    """What this process (a unit, or a host across nodes) was given, as its engine set it."""
    environ = os.environ
    view: dict[str, Any] = {
        "variables": visible_variables(environ),
        "engine_variables": {
            name: value
            for name, value in environ.items()
            if name.startswith(ENGINE_PREFIXES) or name in SLURM_VARIABLES
        },
    }
    ray = sys.modules.get("ray")  # imported in a Ray worker; never imported here
    if ray is not None:
        view["ray_version"] = str(getattr(ray, "__version__", ""))
        try:
            ids = ray.get_runtime_context().get_accelerator_ids()
            # GPUs always (an empty list says "none given"); others only where held.
            view["accelerator_ids"] = {
                name: [str(i) for i in found]
                for name, found in ids.items()
                if found or name == "GPU"
            }
        except Exception as exc:  # outside a task or actor: say so, do not fail the unit
            view["accelerator_ids_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return view


def listed(value: str) -> int:
    """How many devices a visible-devices variable lists ("" and "-1" list none)."""
    items = [item for item in value.split(",") if item.strip()]
    return 0 if items == ["-1"] else len(items)


def gpus_seen(role: Mapping[str, Any], real_gpus: bool) -> int | None:
    """How many GPUs one environment's worker could use; None when nothing limits it.

    The visible-devices variable limits it when set; where the node's hardware facts list
    GPUs (``real_gpus``) torch's own count does too. On a node without GPU hardware (a Ray
    node declaring GPUs it does not have) torch's count is recorded, not judged.
    """
    variables = role.get("variables") or {}
    counts = [listed(variables[name]) for name in GPU_VARIABLES if name in variables]
    if real_gpus and isinstance(role.get("count"), int):
        counts.append(int(role["count"]))
    return min(counts) if counts else None


def shortfall(roles: Mapping[str, Mapping[str, Any]], expected: int, real_gpus: bool) -> str | None:
    """Why a unit that should have seen ``expected`` GPUs is not checked; None when it is.

    ``roles`` is each environment's view (``worker/devices.py:device_view``, or
    ``{"error": ...}`` where it could not be read).
    """
    if expected <= 0:
        return None
    seen: list[int] = []
    told: list[str] = []
    for name, role in sorted(roles.items()):
        if "error" in role:
            return f"not checked: the {name} environment could not count its GPUs: {role['error']}"
        count = gpus_seen(role, real_gpus)
        seen.append(expected if count is None else count)
        shown = ", ".join(f"{k}={v}" for k, v in sorted((role.get("variables") or {}).items()))
        told.append(f"{name}: {shown or 'no visible-devices variable'}, torch {role.get('count')}")
    fewest = min(seen, default=expected)
    if fewest >= expected:
        return None
    return f"not checked: the unit saw {fewest} of {expected} GPUs ({'; '.join(told)})"
