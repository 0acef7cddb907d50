"""One section of a run, on a fleet node: the node's environments, its devices, its cache.

This is the orchestrator side running on the node (under the node's Python, with
torchcanary and its dependencies installed): it builds or reuses the plan's environments in
the node's own cache, records their manifests when asked, and runs the section exactly as
a local run would, through a ``RelayStore``. Each write is yielded as a JSON record the
moment it happens, so the driver commits every finished unit at once and a node that dies
mid-section loses only what had not finished.

Before the section runs, each environment counts its devices in a fresh worker and the
count goes home (``{"op": "devices", "roles": ...}``); a unit that saw fewer GPUs than the
driver expected runs nothing and says so (``node_kit/devices.py:shortfall``): a GPU claim
answered on fewer GPUs than the profile has must not be filed as checked.
"""

from __future__ import annotations

import functools
import queue
import shutil
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from torchcanary.context import RunContext
from torchcanary.envs.prepare import prepare_environments
from torchcanary.envs.worker_process import WorkerProcess
from torchcanary.fleet.relay import Record, RelayStore
from torchcanary.node_kit.devices import shortfall
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress
from torchcanary.report.view import run_so_far
from torchcanary.runner import import_root
from torchcanary.runner import record_manifests as runner_record_manifests
from torchcanary.sections import get_section
from torchcanary.store.rows import SECTION_FAILURE_PREFIX, RunRow
from torchcanary.worker.calls import DEVICE_VIEW

_DONE = object()
_DEVICE_VIEW_TIMEOUT_S = 300.0
# How the driver names this unit's work to a node. Not an in-environment call (it runs under
# the node's own Python, orchestrator side), so it is not in ``worker/calls.py``.
RUN_SECTION = f"{__name__}:run_section"


def run_section(payload: Mapping[str, Any]) -> Iterator[Record]:
    """Run ``payload["section"]`` of the plan here, yielding each store write as it happens.

    The payload carries the run (id, plan), the keys already stored for this node's profile
    (``done_rows``, ``done_sections``), ``record_manifests``, and the GPUs the unit should
    see (``gpus_expected``; ``real_gpus``: the node's hardware facts list GPUs). A section
    that breaks sends its traceback as the same artifact a local run stores, then raises,
    so the unit comes back FAILED with the error's first line.
    """
    plan = RunPlan.from_json(dict(payload["plan"]))
    run_id = str(payload["run_id"])
    section = str(payload["section"])
    records: queue.Queue[Any] = queue.Queue()
    store = RelayStore(
        RunRow(
            run_id,
            float(payload.get("created_at", 0.0)),
            None,
            "running",
            plan.to_json(),
            None,
            None,
        ),
        records.put,
        payload.get("done_rows", {}),
        payload.get("done_sections", {}),
    )
    failure: list[BaseException] = []

    def work() -> None:
        try:
            _run_here(
                plan,
                run_id,
                section,
                str(payload.get("profile", "")),
                store,
                bool(payload.get("record_manifests")),
                _GpuCheck(
                    int(payload.get("gpus_expected", 0)),
                    bool(payload.get("real_gpus")),
                    records.put,
                ),
            )
        except BaseException as exc:  # sent home below
            failure.append(exc)
            store.save_artifact(
                run_id,
                SECTION_FAILURE_PREFIX + section,
                "text/plain",
                traceback.format_exc().encode(),
            )
        finally:
            records.put(_DONE)

    thread = threading.Thread(target=work, name=f"torchcanary-fleet-{section}", daemon=True)
    thread.start()
    while (record := records.get()) is not _DONE:
        yield record
    thread.join()
    if failure:
        raise failure[0]


def _run_here(
    plan: RunPlan,
    run_id: str,
    section: str,
    profile: str,
    store: RelayStore,
    record_manifests: bool,
    gpus: _GpuCheck,
) -> None:
    progress = Progress(quiet=True)
    environments = prepare_environments(plan, progress)  # in this node's own cache
    work_dir = Path(tempfile.mkdtemp(prefix=f"torchcanary-{run_id}-{section}-"))
    ctx = RunContext(
        run_id=run_id,
        store=store,
        plan=plan,
        environments=environments,
        import_root=import_root(plan, work_dir),
        work_dir=work_dir,
        progress=progress,
        # Always: the driver sends what its store holds for this profile; skipping it
        # is what makes --resume redo only what is missing.
        resume=True,
        profile=profile,
        run_so_far=functools.partial(run_so_far, store, run_id),
    )
    try:
        if record_manifests:
            runner_record_manifests(ctx)
        if gpus.passes(ctx):
            get_section(section).run(ctx)
    finally:
        ctx.close_workers()
        shutil.rmtree(work_dir, ignore_errors=True)  # results went home through the store


class _GpuCheck:
    """What each environment saw of the unit's GPUs, sent home; whether that is enough."""

    def __init__(self, expected: int, real_gpus: bool, send: Callable[[Record], None]) -> None:
        self.expected = expected
        self.real_gpus = real_gpus
        self.send = send

    def passes(self, ctx: RunContext) -> bool:
        roles = role_devices(ctx)
        reason = shortfall(roles, self.expected, self.real_gpus)
        self.send(
            {"op": "devices", "roles": roles, "expected": self.expected, "not_checked": reason}
        )
        return reason is None


def role_devices(ctx: RunContext) -> dict[str, dict[str, Any]]:
    """Each environment's own view of its devices, read at once in a fresh worker each."""

    def view(python: str) -> dict[str, Any]:
        worker = WorkerProcess(python, ctx.import_root)
        try:
            call = worker.call(DEVICE_VIEW, {}, timeout_s=_DEVICE_VIEW_TIMEOUT_S)
        finally:
            worker.close()
        return dict(call.value) if call.ok else {"error": call.error or call.status}

    roles = list(ctx.environments)
    pythons = [ctx.environments[role].python for role in roles]
    with ThreadPoolExecutor(max_workers=max(len(roles), 1)) as pool:
        return dict(zip(roles, pool.map(view, pythons), strict=True))
