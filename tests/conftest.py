"""Shared fixtures: real environments, real stores, real run contexts.

The two torch environments are built once (into the torchcanary cache, reused across
sessions) and shared by every test that needs them. The session has a temporary folder of
its own (``TMPDIR``), and a test that leaves anything in it fails.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from hypothesis import settings

from early_stop import stop_after_last_use
from env_specs import BARE_BASELINE_SPEC, BASELINE_SPEC, CANDIDATE_SPEC
from torchcanary.context import RunContext
from torchcanary.envs.cache import Environment, cache_root, ensure_environment
from torchcanary.envs.spec import parse_env_spec
from torchcanary.envs.worker_process import import_root_for
from torchcanary.plan import RunPlan
from torchcanary.process_set import SCOPE_VARIABLE, TOKEN_VARIABLE
from torchcanary.progress import Progress
from torchcanary.report.view import run_so_far
from torchcanary.store.sqlite import SqliteStore

# real_parts: a test that could not use PostgreSQL, Ray, namespaces or Chromium fails under
# CI and is counted in the summary; auto_marks: markers from the fixtures a test uses;
# suite_time: the time per kind of real part and per module; early_stop: session fixtures
# (the Ray cluster) stopped after their last test; pytester: the real inner pytest runs
# that test real_parts.
pytest_plugins = (
    *("pytester", "real_parts", "auto_marks", "suite_time", "early_stop", "xdist_scopes"),
)

# CI replays the same generated cases every time, so a red build names a change, not a draw;
# HYPOTHESIS_PROFILE=explore draws fresh cases each run, for hunting new bugs.
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session", autouse=True)
def session_temp_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh TMPDIR for the session, removed at its end: other processes' files never
    land there, so what is in it comes from this session's tests and what they started."""
    tmp_path_factory.getbasetemp()  # pytest's own folders stay where they always are
    root = Path(tempfile.mkdtemp(prefix="tcs-"))  # short: Ray's socket paths live under it
    # Like /tmp: the PostgreSQL server runs as its own user and must reach its folder.
    root.chmod(0o1777)
    # What outlives one test by design, gone at the end: Ray's session files, and the
    # session's PostgreSQL server.
    for lasting in ("ray", "servers"):
        (root / lasting).mkdir()
        (root / lasting).chmod(0o1777)
    patch = pytest.MonkeyPatch()
    patch.setenv("TMPDIR", str(root))
    patch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    yield root
    patch.undo()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def temp_dir_left_clean(session_temp_dir: Path) -> Iterator[None]:
    """A test (its fixtures and the processes it started) leaves nothing in the temp dir."""
    before = set(os.listdir(session_temp_dir))
    yield
    left = sorted(set(os.listdir(session_temp_dir)) - before)
    assert left == [], f"left in the temp dir: {left} (use tmp_path, or remove your scratch)"


# Where the torch environments live, built once and reused across sessions.
SHARED_CACHE = cache_root()


@pytest.fixture(autouse=True)
def own_result_caches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each test starts with no kept claim verdicts or fault-free runs (a verdict kept by
    one test would answer for the next), but with the shared environments."""
    cache = tmp_path_factory.mktemp("cache")
    (cache / "envs").symlink_to(SHARED_CACHE / "envs", target_is_directory=True)
    (SHARED_CACHE / "envs").mkdir(parents=True, exist_ok=True)
    patch = pytest.MonkeyPatch()
    patch.setenv("TORCHCANARY_CACHE", str(cache))
    yield
    patch.undo()


def _shared_environment(role: str, spec: str) -> Environment:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHCANARY_CACHE", str(SHARED_CACHE))
        return ensure_environment(role, parse_env_spec(spec))


@pytest.fixture(scope="session")
def baseline_env() -> Environment:
    return _shared_environment("baseline", BASELINE_SPEC)


@pytest.fixture(scope="session")
def candidate_env() -> Environment:
    return _shared_environment("candidate", CANDIDATE_SPEC)


@pytest.fixture(scope="session")
def bare_baseline_env() -> Environment:
    """The baseline's torch alone (no numpy): what the README's own command builds."""
    return _shared_environment("baseline", BARE_BASELINE_SPEC)


@pytest.fixture(scope="session")
def import_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_root_for(("torchcanary",), tmp_path_factory.mktemp("import-root"))


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    with SqliteStore(tmp_path / "canary.db") as opened:
        yield opened


@pytest.fixture
def make_context(
    tmp_path: Path,
    store: SqliteStore,
    baseline_env: Environment,
    candidate_env: Environment,
    import_root: Path,
):
    """Build a RunContext over both real environments for a plan of the test's choosing."""
    contexts: list[RunContext] = []

    def build(**plan_fields: object) -> RunContext:
        plan = RunPlan(baseline=BASELINE_SPEC, candidate=CANDIDATE_SPEC, **plan_fields)
        run_id = store.create_run(plan.to_json())
        context = RunContext(
            run_id=run_id,
            store=store,
            plan=plan,
            environments={"baseline": baseline_env, "candidate": candidate_env},
            import_root=import_root,
            work_dir=tmp_path / "work",
            progress=Progress(quiet=True),
            run_so_far=functools.partial(run_so_far, store, run_id),
        )
        context.work_dir.mkdir(exist_ok=True)
        contexts.append(context)
        return context

    yield build
    for context in contexts:
        context.close_workers()


# PostgreSQL --------------------------------------------------------------------------------
# One throwaway server per session (see pg_cluster.py), a fresh database per test. Where no
# server can be made the PostgreSQL tests are skipped as "not checked", never passed.


@pytest.fixture(scope="session")
def postgres_cluster(session_temp_dir: Path):
    from pg_cluster import ClusterUnavailable, PostgresCluster

    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("not checked: psycopg is not installed (pip install -e '.[dev]')")
    try:
        cluster = PostgresCluster(parent=session_temp_dir / "servers")
    except ClusterUnavailable as exc:
        pytest.skip(f"not checked: no PostgreSQL server could be started here: {exc}")
    yield cluster
    cluster.destroy()


@pytest.fixture
def postgres_url(postgres_cluster) -> str:
    """A URL (password included) of an empty database of its own on the session's server."""
    return postgres_cluster.new_database()


@pytest.fixture(params=["sqlite", "postgres"])
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where an empty store goes, once per engine: a SQLite path or a PostgreSQL URL."""
    if request.param == "sqlite":
        return str(tmp_path / "canary-results" / "canary.db")
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture(scope="session")
def ray_cluster(request: pytest.FixtureRequest):
    """A real three-node Ray cluster on 127.0.0.1; at the end, every Ray process is gone.

    The head also serves Ray clients; ``cluster.client_address`` is its ``ray://`` address.
    """
    import socket

    from fleet_helpers import FLEET_PROFILES, require_ray

    require_ray()
    from local_cluster import start_local_cluster, stop_local_cluster

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        client_port = probe.getsockname()[1]
    cluster = start_local_cluster(FLEET_PROFILES, client_port=client_port)
    cluster.client_address = f"ray://127.0.0.1:{client_port}"

    def stop() -> None:
        import ray

        # A test that ran the CLI in this process may leave its driver connected; Ray
        # refuses to stop a cluster under a connected driver.
        if ray.is_initialized():
            ray.shutdown()
        assert stop_local_cluster(cluster) == [], "Ray processes left behind"

    # Stopped after the last test that uses it, not kept up idle through later modules.
    stop = stop_after_last_use(request, stop)
    try:
        yield cluster
    finally:
        stop()


@pytest.fixture(scope="session")
def fleet(request: pytest.FixtureRequest, ray_cluster):
    """The Ray executor connected to the shared test cluster, closed after its last test."""
    from torchcanary.fleet.ray_connect import connect

    with ExitStack() as stack:
        executor = stack.enter_context(connect(ray_cluster.address, timeout_s=60))
        stop = stop_after_last_use(request, stack.close)
        yield executor
        stop()


# Slurm -------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def slurm_cluster(request: pytest.FixtureRequest, session_temp_dir: Path):
    """One real Slurm cluster for the session (slurm_cluster.TEST_NODES), stopped after the
    last test that uses it; clients (the CLI runs too) reach it through SLURM_CONF."""
    from slurm_cluster import TEST_NODES, ClusterUnavailable, SlurmCluster

    try:
        cluster = SlurmCluster(TEST_NODES, parent=session_temp_dir / "servers")
    except ClusterUnavailable as exc:
        pytest.skip(f"not checked: no Slurm cluster could be started here: {exc}")
    patch = pytest.MonkeyPatch()
    patch.setenv("SLURM_CONF", str(cluster.conf))

    def stop() -> None:
        patch.undo()
        assert cluster.destroy() == [], "Slurm daemons or job processes left behind"

    stop = stop_after_last_use(request, stop)
    try:
        yield cluster
    finally:
        stop()


# Drills ------------------------------------------------------------------------------------
def _drill_processes(scope: str) -> tuple[dict[int, str], set[str]]:
    """Live drill processes of ``scope`` (pid -> command line), and other drills' tokens."""
    needle, mine = f"{TOKEN_VARIABLE}=".encode(), f"{SCOPE_VARIABLE}={scope}".encode()
    own: dict[int, str] = {}
    others: set[str] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        tokens = [item[len(needle) :].decode() for item in environ if item.startswith(needle)]
        if state == "Z" or not tokens:
            continue
        if mine in environ:
            own[int(entry.name)] = command[:200]
        else:
            others.add(tokens[0])
    return own, others


def _drill_namespaces() -> list[str]:
    if shutil.which("ip") is None:
        return []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith("torchcanary-")]


@pytest.fixture
def drill_leak_check(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No process or namespace of this test's drills survives it.

    The test's drill processes carry its own scope (SCOPE_VARIABLE, inherited from this
    process's environment), so drills of other runs on the machine cannot trip the check.
    A namespace is named after its drill's token: one of another run's live drill is theirs.
    """
    scope = f"test-{uuid.uuid4().hex}"
    monkeypatch.setenv(SCOPE_VARIABLE, scope)
    namespaces_before = set(_drill_namespaces())
    yield
    own, other_tokens = _drill_processes(scope)
    assert own == {}, f"a drill left processes running: {own}"
    new_namespaces = set(_drill_namespaces()) - namespaces_before
    leaked = {n for n in new_namespaces if not any(token in n for token in other_tokens)}
    assert leaked == set(), f"a drill left namespaces: {sorted(leaked)}"
