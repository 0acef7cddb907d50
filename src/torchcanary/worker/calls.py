"""Every way the orchestrator enters code inside a target environment, named in one place.

The orchestrator never imports these modules (they import torch); it names them: a
``"module:function"`` for a call through :class:`~torchcanary.envs.worker_process.WorkerProcess`,
or a module it starts with ``python -m`` (or hands pytest as a plugin). Everything these
reach by import is the in-environment side: stdlib and torch only, under other torch
versions (tests/test_architecture.py checks both halves of that promise).
"""

from __future__ import annotations

# Calls through a worker process: "module:function", the function takes keyword arguments
# and returns JSON-ready data.
COLLECT_MANIFEST = "torchcanary.worker.manifest:collect"
AVAILABLE_DEVICES = "torchcanary.worker.devices:available_devices"
DEVICE_VIEW = "torchcanary.worker.devices:device_view"  # what a fleet unit's torch sees
RUN_PROBE = "torchcanary.worker.run_probe:run_probe"
RUN_RANKS = "torchcanary.worker.multirank:run_ranks"
COLLECT_SURFACE = "torchcanary.worker.surface:collect"
BENCH_TIMING = "torchcanary.worker.bench.timing"  # its configure/prepare/sample/release
BENCH_TIMING_CALLS = tuple(
    f"{BENCH_TIMING}:{name}" for name in ("configure", "prepare", "sample", "release")
)
BENCH_ROOFLINE = "torchcanary.worker.bench.roofline_probe:measure"
BENCH_DISPATCH = "torchcanary.worker.bench.dispatch:profile"
BENCH_COLLECTIVES = "torchcanary.worker.bench.collectives:measure"
BENCH_COLLECTIVES_RANK = "torchcanary.worker.bench.collectives:rank_main"  # run by run_ranks
BENCH_STARTUP = "torchcanary.worker.bench.oneshot:startup_sample"
BENCH_COMPILE = "torchcanary.worker.bench.oneshot:compile_sample"
BENCH_ONESHOT = {"startup": BENCH_STARTUP, "compile": BENCH_COMPILE}  # by one-shot kind
EXPLAIN_STARTUP = "torchcanary.worker.explain.startup:sample"  # one fresh import, measured
EXPLAIN_SETTINGS = "torchcanary.worker.explain.settings:snapshot"  # runtime settings
EXPLAIN_REMEASURE = "torchcanary.worker.explain.remeasure:measure"  # a sample, settings set back
EXPLAIN_STEADY = "torchcanary.worker.explain.remeasure:steady"  # targets of EXPLAIN_REMEASURE
EXPLAIN_ONESHOT_STARTUP = "torchcanary.worker.explain.remeasure:startup"
EXPLAIN_PROFILE_OPS = "torchcanary.worker.explain.profile_ops:profile"
EXPLAIN_COMPILE_PHASES = "torchcanary.worker.explain.compile_phases:sample"
CALLS_REPLAY = "torchcanary.worker.replay.replay:replay_recording"  # each call isolated

WORKER_CALLS = (
    COLLECT_MANIFEST,
    AVAILABLE_DEVICES,
    DEVICE_VIEW,
    RUN_PROBE,
    RUN_RANKS,
    COLLECT_SURFACE,
    *BENCH_TIMING_CALLS,
    BENCH_ROOFLINE,
    BENCH_DISPATCH,
    BENCH_COLLECTIVES,
    BENCH_COLLECTIVES_RANK,
    BENCH_STARTUP,
    BENCH_COMPILE,
    EXPLAIN_STARTUP,
    EXPLAIN_SETTINGS,
    EXPLAIN_REMEASURE,
    EXPLAIN_STEADY,
    EXPLAIN_ONESHOT_STARTUP,
    EXPLAIN_PROFILE_OPS,
    EXPLAIN_COMPILE_PHASES,
    CALLS_REPLAY,
)

# Modules started as processes of their own inside an environment.
WORKER_MAIN = "torchcanary.worker"  # the worker process (line-JSON protocol)
RANK_MAIN = "torchcanary.worker.rank_main"  # one rank of a multi-rank call
ONESHOT_MAIN = "torchcanary.worker.bench.oneshot"  # one cold-start sample
DRILL_JOB = "torchcanary.worker.drill.builtin_job"  # one rank of the drill training job (torchrun)
DRILL_STORE_HOST = "torchcanary.worker.drill.store_host"  # the job's rendezvous store
DRILL_USER_JOB = "torchcanary.worker.drill.job_shim"  # starts the user's own job under a drill
EXPLAIN_STARTUP_MAIN = "torchcanary.worker.explain.startup"  # one import torch, measured
CALLS_REPLAY_MAIN = "torchcanary.worker.replay.replay"  # RECORDING OUTPUT [--timeout S]
CALLS_RECORD_WORKLOAD_MAIN = "torchcanary.worker.replay.record_workload"  # SPEC_JSON
STACK_PYTEST_PLUGIN = "torchcanary.worker.stack.pytest_plugin"  # loaded by the user's pytest
# The calls section: record the user's torch calls (pytest plugin, or record.record_calls
# around a workload) into the folder this variable names; replay them, isolated.
CALLS_RECORD_PLUGIN = "torchcanary.worker.replay.pytest_record"  # loaded by the user's pytest
CALLS_RECORD_VAR = "TORCHCANARY_RECORD_CALLS"  # environment variable: the recording's folder
# environment variable: the user's code, JSON {"paths", "names"} (worker/replay/user_code.py)
CALLS_USER_CODE_VAR = "TORCHCANARY_USER_CODE"
# environment variable: calls in a row that meet no new group before the recorder rests (0: never)
CALLS_QUIET_VAR = "TORCHCANARY_RECORD_QUIET"
# a pytest-xdist worker's own recording, a folder inside the recording's (worker-gw0, ...)
CALLS_WORKER_FOLDER = "worker-"

MODULE_MAINS = (
    WORKER_MAIN,
    RANK_MAIN,
    ONESHOT_MAIN,
    DRILL_JOB,
    DRILL_STORE_HOST,
    DRILL_USER_JOB,
    EXPLAIN_STARTUP_MAIN,
    CALLS_REPLAY_MAIN,
    CALLS_RECORD_WORKLOAD_MAIN,
)


def in_environment_roots() -> tuple[str, ...]:
    """The modules the in-environment side starts from (probes and packs' probes are found,
    not named: the worker is handed their module)."""
    called = {call.split(":")[0] for call in WORKER_CALLS}
    return tuple(sorted(called | {*MODULE_MAINS, STACK_PYTEST_PLUGIN, CALLS_RECORD_PLUGIN}))
