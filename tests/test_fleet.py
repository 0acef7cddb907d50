"""The fleet's plain parts, without a cluster: profiles, selection, units, secrets, connecting.

The parts that need a running Ray cluster are in test_fleet_ray.py; the tests here that
need Ray installed (connecting) carry the ``ray`` marker too, so ``-m "not ray"`` skips all.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from cli_helpers import FIXTURES
from fleet_helpers import require_ray
from local_cluster import SMOKE
from torchcanary.errors import ConfigError
from torchcanary.fleet import node_side
from torchcanary.fleet.secrets import strip_data, strip_env, strip_url
from torchcanary.fleet.unit import UnitResult, UnitStatus, WorkUnit, noticed_since
from torchcanary.hardware_profile import FleetNode, HardwareProfile, NodeSelection, group_by_profile

H100 = HardwareProfile(
    gpu_model="NVIDIA H100 80GB HBM3",
    gpu_count=8,
    gpu_driver="570.86",
    cuda_version="12.8",
    cpu_model="AMD EPYC 9454",
    cpu_cores=96,
    arch="x86_64",
    os="Ubuntu 22.04.4 LTS",
)
EPYC = HardwareProfile(cpu_model="AMD EPYC 7B13", cpu_cores=16, arch="x86_64", os="Debian 12")


def node(node_id: str, profile: HardwareProfile) -> FleetNode:
    return FleetNode(node_id=node_id, address="10.0.0.1", profile=profile)


def test_profile_key_is_readable_stable_and_changes_with_any_fact() -> None:
    assert H100.key.startswith("8xnvidia-h100-80gb-hbm3-")
    assert EPYC.key.startswith("cpu-x86_64-amd-epyc-7b13-16c-")
    assert HardwareProfile.from_json(H100.to_json()).key == H100.key
    assert replace(H100, gpu_driver="575.51").key != H100.key


def test_profile_label_on_the_node_wins_over_its_facts() -> None:
    facts = json.loads(json.dumps({"gpu_model": "", "cpu_model": "x", "unknown_fact": 1}))
    labelled = HardwareProfile.from_facts(facts, {"torchcanary.profile": "rack-a-mi300x"})
    assert labelled.key == "rack-a-mi300x"
    assert HardwareProfile.from_facts(facts, {}).key != "rack-a-mi300x"


def test_profile_json_round_trips() -> None:
    assert HardwareProfile.from_json(H100.to_json()) == H100


def test_nodes_are_grouped_by_profile_and_one_node_per_profile_runs_by_default() -> None:
    nodes = [node("n3", H100), node("n1", EPYC), node("n2", H100)]
    groups = group_by_profile(nodes)
    assert {key: [n.node_id for n in group] for key, group in groups.items()} == {
        H100.key: ["n2", "n3"],
        EPYC.key: ["n1"],
    }
    assert [n.node_id for n in NodeSelection.parse().choose(nodes)] == [
        groups[key][0].node_id for key in groups
    ]
    assert len(NodeSelection.parse("all").choose(nodes)) == 3


def test_key_value_filters_pick_nodes_by_any_profile_field() -> None:
    nodes = [node("n1", EPYC), node("n2", H100), node("n3", H100)]
    by_count = NodeSelection.parse("all", ["gpu_count=8"]).choose(nodes)
    assert [n.node_id for n in by_count] == ["n2", "n3"]
    by_model = NodeSelection.parse("profile", ["gpu_model=nvidia h100 80gb hbm3", "arch=x86_64"])
    assert [n.node_id for n in by_model.choose(nodes)] == ["n2"]
    assert NodeSelection.parse("all", [f"key={EPYC.key}"]).choose(nodes) == [nodes[0]]


def test_one_key_given_twice_takes_either_value_while_different_keys_must_all_match() -> None:
    nodes = [node("n1", EPYC), node("n2", H100), node("n3", replace(H100, label="rack-b"))]
    either = NodeSelection.parse("all", [f"key={EPYC.key}", "key=rack-b"]).choose(nodes)
    assert [n.node_id for n in either] == ["n1", "n3"]
    both = NodeSelection.parse("all", ["key=rack-b", "gpu_count=0"]).choose(nodes)
    assert both == []


@pytest.mark.parametrize(
    ("nodes", "selectors", "message"),
    [
        ("some", [], "'profile' or 'all'"),
        ("profile", ["gpu"], "KEY=VALUE"),
        ("profile", ["vram=80"], "unknown key 'vram'"),
    ],
)
def test_bad_node_choices_are_config_errors_that_say_the_fix(
    nodes: str, selectors: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        NodeSelection.parse(nodes, selectors)


def test_passwords_and_secret_parameters_are_stripped_from_urls() -> None:
    url = "postgresql://canary:hunter2@db.internal:5432/runs?sslmode=require&access_token=abc"
    assert strip_url(url) == "postgresql://canary@db.internal:5432/runs?sslmode=require"
    assert strip_url("https://:tok@host/x") == "https://host/x"
    assert strip_url("https://host/x?a=1") == "https://host/x?a=1"


def test_secret_environment_variables_and_keys_are_never_shipped() -> None:
    env = {
        "HF_TOKEN": "hf_x",
        "AWS_SECRET_ACCESS_KEY": "k",
        "PGPASSWORD": "p",
        "WANDB_API_KEY": "w",
        "CANARY_STORE": "postgresql://u:pw@db/runs",
        "OMP_NUM_THREADS": "4",
    }
    assert strip_env(env) == {"CANARY_STORE": "postgresql://u@db/runs", "OMP_NUM_THREADS": "4"}
    payload = {"store": "mysql://root:pw@h/db", "password": "x", "ids": ["see https://a:b@c/"]}
    assert strip_data(payload) == {"store": "mysql://root@h/db", "ids": ["see https://a@c/"]}


def test_units_and_results_are_plain_json_that_round_trips() -> None:
    unit = WorkUnit("u1", SMOKE, {"probe_ids": ["a", "b"], "env_spec": "torch==2.14.1"})
    assert WorkUnit.from_json(unit.to_json()) == unit
    result = UnitResult("u1", UnitStatus.LOST, "n1", "alpha", error="node went away")
    assert UnitResult.from_json(result.to_json()) == result
    with pytest.raises(ValueError, match="module:function"):
        WorkUnit("u2", "fleet_smoke")


def test_a_unit_runs_on_the_node_side_and_a_raising_worker_is_failed_not_an_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))  # where a test node finds the smoke unit

    def run(unit: WorkUnit) -> list[UnitResult]:
        results = [UnitResult.from_json(text) for text in node_side.stream_unit(unit.to_json())]
        given = results.pop(0)  # first, what the unit was given
        assert given.output is not None and given.output["op"] == "devices"
        assert given.output["asked"] == {"CPU": unit.num_cpus, "GPU": unit.num_gpus}
        return results

    piece, ok = run(WorkUnit("u1", SMOKE, {"rounds": 3, "echo": [1]}))
    assert (piece.status, ok.status) == (UnitStatus.PARTIAL, UnitStatus.OK)
    assert piece.output is not None and piece.output["echo"] == [1]
    [failed] = run(WorkUnit("u2", SMOKE, {"pieces": 0, "fail": "disk full\nmore"}))
    assert (failed.status, failed.error) == (UnitStatus.FAILED, "RuntimeError: disk full")


def test_a_result_that_never_arrives_ends_its_unit_failed_within_the_deadline() -> None:
    """Issue 38 item 6: reading a unit's result had no deadline, so the driver's last wait
    could last for ever. Ray's own names, stood in for (no cluster is needed)."""
    from types import SimpleNamespace

    from torchcanary.fleet.executor import Assignment
    from torchcanary.fleet.ray_executor import RESULT_READ_S, RayExecutor

    class RayError(Exception):
        pass

    class GetTimeoutError(RayError, TimeoutError):
        pass

    asked: list[float] = []

    def get(ref: object, timeout: float) -> str:
        asked.append(timeout)
        raise GetTimeoutError("Get timed out: some object(s) not ready.")

    errors = {"RayError": RayError, "GetTimeoutError": GetTimeoutError}
    for name in ("RayTaskError", "RuntimeEnvSetupError", "WorkerCrashedError"):
        errors[name] = type(name, (RayError,), {})
    ray = SimpleNamespace(remote=lambda f: f, get=get, exceptions=SimpleNamespace(**errors))
    executor = RayExecutor(ray, owns_connection=False)  # type: ignore[arg-type]
    node = FleetNode("node-1", "", HardwareProfile(label="gpu"))
    ends: list[UnitResult] = []
    executor._read_stream(["ref"], Assignment(node, WorkUnit("u1", SMOKE, {})), ends.append)
    assert asked == [RESULT_READ_S]
    [end] = ends
    assert (end.status, end.error) == (
        UnitStatus.FAILED,
        f"error: the unit's result did not arrive within {RESULT_READ_S:g} s: "
        "GetTimeoutError: Get timed out: some object(s) not ready.",
    )


def test_a_loss_noticed_just_past_its_bound_never_reads_as_within_it() -> None:
    """A node silent for 4.03 s past a 4 s bound was noticed after more than 4 s: rounding
    to the nearest tenth said "4.0 s" (and failed the Slurm heartbeat test on CI)."""
    assert noticed_since(time.monotonic() - 4.03) == 4.1
    assert noticed_since(time.monotonic() - 3.95) == 4.0


def test_hardware_facts_are_read_on_this_machine() -> None:
    facts = json.loads(node_side.collect_hardware_facts())
    profile = HardwareProfile.from_facts(facts, {})
    assert profile.cpu_cores >= 1 and profile.os and profile.arch
    assert profile.key == HardwareProfile.from_facts(facts, {}).key


def test_importing_the_fleet_and_the_cli_does_not_import_ray() -> None:
    code = (
        "import sys, torchcanary.cli, torchcanary.hardware_profile, torchcanary.fleet.executor, "
        "torchcanary.fleet.unit, torchcanary.fleet.node_side, torchcanary.fleet.ray_executor, "
        "torchcanary.fleet.ray_connect, torchcanary.fleet.ray_spread, torchcanary.fleet.connect; "
        "print('ray' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_slurm_address_picks_slurm_and_anything_else_ray() -> None:
    from torchcanary.fleet.connect import engine_of

    assert [engine_of(a) for a in ("slurm", "slurm:debug", "auto", "ray://h:10001")] == [
        "slurm",
        "slurm",
        "ray",
        "ray",
    ]
    assert engine_of("slurmhost:6379") == "ray"  # a Ray head whose name starts so


def test_a_slurm_fleet_that_cannot_be_used_is_one_line_and_never_imports_ray() -> None:
    """Without the Slurm executor (or without Slurm here) ``--fleet slurm:P`` is one line."""
    code = (
        "import sys\n"
        "from torchcanary.errors import CanaryError\n"
        "from torchcanary.fleet.connect import connect_fleet\n"
        "try:\n"
        "    connect_fleet('slurm:no-such-partition')\n"
        "except CanaryError as exc:\n"
        "    print(exc); print('ray' in sys.modules); sys.exit(2)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 2, done.stderr
    line, ray_imported = done.stdout.splitlines()
    assert "slurm" in line.lower() and ray_imported == "False"


def _connect_in_a_fresh_process(address: str, timeout_s: float) -> subprocess.CompletedProcess:
    code = (
        "import sys\n"
        "from torchcanary.errors import FleetError\n"
        "from torchcanary.fleet.ray_connect import connect\n"
        "try:\n"
        f"    connect({address!r}, timeout_s={timeout_s})\n"
        "except FleetError as exc:\n"
        "    print(exc); sys.exit(2)\n"
    )
    # A fresh process: a connect that gave up leaves Ray's own attempt behind in its thread.
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.ray
def test_an_address_nobody_listens_on_is_one_clear_line() -> None:
    require_ray()
    port = _free_port()
    done = _connect_in_a_fresh_process(f"ray://127.0.0.1:{port}", timeout_s=5)
    assert done.returncode == 2, done.stderr
    assert done.stdout.splitlines() == [
        f"cannot reach the Ray cluster at ray://127.0.0.1:{port} (Connection refused); "
        "check the address (HOST:PORT or ray://HEAD:10001) and that the Ray head node is up"
    ]


@pytest.mark.ray
def test_a_port_that_accepts_but_never_answers_gives_up_within_the_deadline() -> None:
    require_ray()
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        done = _connect_in_a_fresh_process(f"127.0.0.1:{port}", timeout_s=3)
    assert done.returncode == 2, done.stderr
    assert done.stdout.splitlines() == [
        f"the Ray cluster at 127.0.0.1:{port} did not answer within 3s; "
        "check the address (HOST:PORT or ray://HEAD:10001) and that the Ray head node is up"
    ]


@pytest.mark.ray
def test_a_malformed_address_says_how_to_write_one() -> None:
    require_ray()
    done = _connect_in_a_fresh_process("head-without-port", timeout_s=3)
    assert done.returncode == 2
    assert "cannot read the Ray cluster address 'head-without-port'" in done.stdout


NVIDIA_SMI = """#!/bin/sh
# Answers as nvidia-smi 570 does on a two-GPU H200 node.
if [ "$1" = "--query-gpu=name,driver_version" ]; then
    printf 'NVIDIA H200, 570.124.06\\nNVIDIA H200, 570.124.06\\n'
else
    echo '+-----------------------------------------------------------------------------+'
    echo '| NVIDIA-SMI 570.124.06   Driver Version: 570.124.06   CUDA Version: 12.8     |'
fi
"""


def test_gpu_facts_come_from_nvidia_smi_when_the_node_has_it(tmp_path, monkeypatch) -> None:
    # No GPU here: an executable that answers as nvidia-smi does stands in for the tool.
    tool = tmp_path / "nvidia-smi"
    tool.write_text(NVIDIA_SMI)
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    profile = HardwareProfile.from_facts(json.loads(node_side.collect_hardware_facts()), {})
    assert (profile.gpu_model, profile.gpu_count) == ("NVIDIA H200", 2)
    assert (profile.gpu_driver, profile.cuda_version) == ("570.124.06", "12.8")
    assert profile.key.startswith("2xnvidia-h200-")


class _RefusingRay:
    """Stands for the ``ray`` module: its client server refuses ``refusals`` connections.

    A fake, because a real Ray client server refuses only when starting a client's own
    server fails on a loaded head (item 14), which no test can bring about on demand.
    """

    def __init__(self, refusals: int) -> None:
        self.refusals, self.tries = refusals, 0

    def init(self, **kwargs: object) -> None:
        self.tries += 1
        if self.tries <= self.refusals:
            raise ConnectionAbortedError(
                "Initialization failure from server:\nTraceback (most recent call last):\n"
                "  ...\nRuntimeError: Proxy failed to Connect to backend! Check logs."
            )


def test_a_client_server_that_refuses_once_is_tried_again_within_the_deadline() -> None:
    """Item 14: one refusal by a loaded head's client server no longer ends the connect."""
    from torchcanary.fleet.ray_connect import _init_with_deadline

    ray = _RefusingRay(refusals=1)
    _init_with_deadline(ray, "ray://10.214.7.2:10001", {}, timeout_s=30)  # type: ignore[arg-type]
    assert ray.tries == 2


def test_a_client_server_that_always_refuses_is_one_line_with_its_reason() -> None:
    """Item 14: past the deadline the error counts the refusals and keeps the server's reason."""
    from torchcanary.errors import FleetError
    from torchcanary.fleet.ray_connect import _init_with_deadline

    ray = _RefusingRay(refusals=100)
    with pytest.raises(FleetError) as raised:
        _init_with_deadline(ray, "ray://10.214.7.2:10001", {}, timeout_s=3)  # type: ignore[arg-type]
    assert ray.tries == 2
    assert str(raised.value).splitlines() == [
        "cannot connect to the Ray cluster at ray://10.214.7.2:10001: its client server "
        "refused 2 connection(s) in 3s, the last: RuntimeError: Proxy failed to Connect to "
        "backend! Check logs.; check the address (HOST:PORT or ray://HEAD:10001) and that "
        "the Ray head node is up"
    ]
