"""The calls section's in-environment half, on the real interpreters of both versions: a tiny
script recorded under the baseline (2.13), replayed under the candidate (2.14) and again under
the baseline. The crash, the hang and the missing callable are made by editing the recording
(a torch that really crashes or hangs on a call is not at hand), as the replay must survive
them whatever their cause."""

from __future__ import annotations

import base64
import json
import math
import os
import struct
import subprocess
from pathlib import Path

import pytest

from torchcanary.calls.compare import CallVerdict, Replay, compare_call
from torchcanary.calls.merge import merge_workers
from torchcanary.envs.cache import Environment
from torchcanary.envs.worker_process import import_root_for
from torchcanary.worker import calls

SCRIPT = """
import warnings
import torch
import torch.nn.functional as F

warnings.simplefilter("ignore")
for step in range(5):
    x = torch.full((2, 3), float(step))
    y = F.relu(x - 1.0)
try:
    torch.ones(2, 3) @ torch.ones(2, 3)
except RuntimeError:
    pass
copied = torch.tensor(torch.ones(2))
address = copied.data_ptr()  # this process's own: no replay returns it again
g = torch.Generator().manual_seed(0)
noise = torch.rand(3, generator=g)
weight = torch.nn.Parameter(torch.ones(3))
with torch.no_grad():  # rebuilt as a leaf that needs grad and replayed with grad on, it raises
    weight.add_(1.0)
buffers = [torch.zeros(2), torch.ones(2)]
torch._foreach_add_(buffers, 1.0)  # returns nothing: what it did is in its arguments
steps = torch.arange(5000.0)  # too many values for its line: kept in the values file
for strict in (False, True):  # one line, two calls: deterministic mode fills empty with NaN
    torch.use_deterministic_algorithms(strict)
    scratch = torch.empty(2)
torch.use_deterministic_algorithms(False)
import tinylib, userproj
doubled = tinylib.double(torch.ones(2))  # a dependency calls torch: this line is the site
halved = userproj.halve(torch.ones(2))  # the user's project, installed: its own line
import threading, multiprocessing
helper = threading.Thread(target=lambda: torch.sigmoid(torch.ones(2)))  # another thread
helper.start(), helper.join()
forked = multiprocessing.get_context("fork").Process(target=torch.zeros, args=(1,))
forked.start(), forked.join()  # a forked process: not followed, counted
spawned = multiprocessing.get_context("spawn").Process(target=torch.zeros, args=(1,))
spawned.start(), spawned.join()  # a spawned one (no fork hook sees it): counted too
import subprocess, sys
subprocess.run([sys.executable, "-c", "import math"], check=True)  # a Python: counted
subprocess.run(["true"], check=True)  # not a Python: no torch call of the user's in it
sparse = torch.eye(3).to_sparse()  # another layout: its values compared dense
for cast in (False, True):  # one line, two calls: the modes are part of what a call is
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cast):
        product = torch.mm(torch.ones(2, 2), torch.ones(2, 2))
for step in range(300):  # one site and class, 7 shapes, 300 values: a bounded sample of it
    total = torch.sum(torch.full((step % 7 + 1,), float(step)))
for _ in range(3):  # the same call thrice: one sample, counted three times
    negated = torch.neg(torch.ones(2))
wide = torch.arange(5000.0).reshape(50, 100)
summed = torch.cumsum(wide, 0)  # an argument of 5000 values: kept, replayed and compared
flipped = torch.ones(2, dtype=torch.complex64).mul(torch.full((2,), 1 + 2j).conj())
import numpy as np
rows = torch.reshape(torch.linspace(0.0, 5.0, 6), (np.int64(2), -1))  # a numpy scalar argument
as_array = torch.linspace(0.0, 3.0, 4).numpy()  # a numpy array as the output: compared by value
scaled = torch.true_divide(torch.ones(2), np.float32(4.0))  # rebuilt as numpy's float32
double = torch.as_tensor(np.float64(0.25))  # numpy's float64 is a float too: float64 still
"""


def _run(
    env: Environment, import_root: Path, args: list[str], cwd: Path | None = None, **extra: str
) -> str:
    environ = {**os.environ, "PYTHONPATH": str(import_root), **extra}
    done = subprocess.run(
        [env.python, *args], env=environ, capture_output=True, text=True, timeout=300, cwd=cwd
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _installed_packages(root: Path) -> Path:
    """A site-packages folder holding a third-party-like package (``tinylib``) and the
    user's project installed as a distribution (``userproj``), both calling torch."""
    site = root / "lib" / "site-packages"
    for name, body in (("tinylib", DEPENDENCY), ("userproj", PROJECT)):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(body)
    info = site / "userproj-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: userproj\nVersion: 1.0\n")
    (info / "RECORD").write_text("userproj/__init__.py,,\nuserproj-1.0.dist-info/METADATA,,\n")
    return site


DEPENDENCY = "import torch\n\n\ndef double(x):\n    return torch.mul(x, 2)\n"
PROJECT = "import torch\n\n\ndef halve(x):\n    return torch.div(x, 2)\n"


@pytest.fixture(scope="module")
def recording(
    baseline_env: Environment, import_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The script recorded through the plugin's way in (the variable), then edited; the
    user's code named as the section names it (the script's folder, ``userproj``)."""
    root = tmp_path_factory.mktemp("replay")
    (root / "user_script.py").write_text(SCRIPT)
    site = _installed_packages(root)
    folder = root / "recording"
    runner = (
        "import runpy, sys\n"
        "from torchcanary.worker.replay.record import start_from_environment\n"
        "with start_from_environment():\n"
        f"    runpy.run_path({str(root / 'user_script.py')!r})\n"
    )
    named = {"paths": [str(root)], "names": ["userproj"]}
    variables = {calls.CALLS_RECORD_VAR: str(folder), calls.CALLS_USER_CODE_VAR: json.dumps(named)}
    variables[calls.CALLS_QUIET_VAR] = "0"  # every call examined: resting has its own tests
    _run(
        baseline_env,
        import_root,
        ["-c", runner],
        PYTHONPATH=f"{import_root}{os.pathsep}{site}",
        **variables,
    )
    return folder


def _calls(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "calls.jsonl").read_text().splitlines()]


def _edited(recording: Path, target: Path) -> Path:
    """A copy with three calls added: one missing, one that crashes, one that hangs."""
    target.mkdir()
    (target / "values.bin").write_bytes((recording / "values.bin").read_bytes())
    entries = _calls(recording)
    template = {"level": "api", "site": {"file": "edited", "line": 1, "function": "f"}}
    extra = [
        ("torch.no_such_function", []),
        ("torch.os.abort", []),
        ("torch.os.system", [{"t": "scalar", "v": "sleep 30", "type": "str"}]),
        ("torch.zeros", [{"t": "scalar", "v": 2, "type": "int"}]),  # the one after them
    ]
    for name, args in extra:
        entries.append(
            {
                **template,
                "id": len(entries),
                "callable": name,
                "signature": "",
                "count": 1,
                "args": args,
                "kwargs": {},
                "replayable": True,
                "why_not": None,
            }
        )
    (target / "calls.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    return target


def test_recording_counts_each_distinct_call_once_with_where_it_was_made(
    recording: Path,
) -> None:
    entries = _calls(recording)
    relu = [e for e in entries if e["callable"] == "torch.nn.functional.relu"]
    assert len(relu) == 2 and [e["count"] for e in relu] == [1, 1]  # two values sampled
    assert relu[0]["level"] == "api" and relu[0]["group"] == relu[1]["group"]
    assert relu[0]["site"]["file"].endswith("user_script.py") and relu[0]["site"]["line"] == 9
    aten_relu = [e for e in entries if e["callable"] == "torch.ops.aten.relu.default"]
    assert len(aten_relu) == 2 and aten_relu[0]["site"]["line"] == 9
    rand = next(e for e in entries if e["callable"] == "torch.rand")
    assert not rand["replayable"] and "Generator" in rand["why_not"]
    meta = json.loads((recording / "meta.json").read_text())
    assert meta["torch"].startswith("2.13") and meta["distinct"] == len(entries)
    assert sum(meta["not_replayable"].values()) >= 2  # torch.rand and its aten operator


def test_a_site_keeps_a_bounded_sample_of_its_calls_and_counts_the_rest(
    recording: Path,
) -> None:
    """300 calls of one site and class in 7 shapes and 300 values keep 4 shapes of 2
    values each; the same call thrice is one sample counted thrice; every call is
    accounted for, kept or counted past its group's sample."""
    entries = _calls(recording)
    sums = [e for e in entries if e["callable"] == "torch.sum"]
    assert len(sums) == 8 and len({e["group"] for e in sums}) == 1
    shapes = [e["args"][0]["shape"] for e in sums]
    assert shapes == [[1], [2], [3], [4], [1], [2], [3], [4]]  # shapes 5 to 7 came too late
    assert len({(e["signature"], e["values_key"]) for e in sums}) == 8
    (negated,) = [e for e in entries if e["callable"] == "torch.neg"]
    assert negated["count"] == 3
    meta = json.loads((recording / "meta.json").read_text())
    assert meta["not_sampled"] >= 300 - 8
    assert meta["not_sampled_by"]["torch.sum"] == 300 - 8  # named, for the report's detail
    assert meta["calls"] == sum(e["count"] for e in entries) + meta["not_sampled"]


def test_an_argument_of_any_size_is_kept_replayed_and_compared_by_value(
    recording: Path, baseline_replay: dict
) -> None:
    (summed,) = [e for e in _calls(recording) if e["callable"] == "torch.cumsum"]
    assert summed["replayable"] and summed["args"][0]["data"]["length"] == 5000 * 4
    replayed = baseline_replay["torch.cumsum"]
    (output,) = replayed["outputs"]
    assert replayed["status"] == "returned" and output["data"]["length"] == 5000 * 4
    replay = Replay.from_json(replayed, values_file=baseline_replay["(values file)"])
    found = compare_call(replay, replay, replay, recorded=summed["outcome"])
    assert found.verdict is CallVerdict.SAME and found.metadata_only is None


def test_numpy_scalars_as_arguments_are_recorded_and_replayed_as_numpy_scalars(
    recording: Path, baseline_replay: dict
) -> None:
    entries = {e["callable"]: e for e in _calls(recording) if e["level"] == "api"}
    reshape, divide, made = (entries[f"torch.{n}"] for n in ("reshape", "true_divide", "as_tensor"))
    assert reshape["replayable"] and divide["replayable"] and made["replayable"]
    assert reshape["args"][1]["items"][0] == {
        "t": "scalar",
        "v": 2,
        "type": "int",
        "numpy": "int64",
    }
    assert divide["args"][1] == {"t": "scalar", "v": 4.0, "type": "float", "numpy": "float32"}
    assert made["args"][0] == {"t": "scalar", "v": 0.25, "type": "float", "numpy": "float64"}
    shapes = {"torch.reshape": [2, 3], "torch.true_divide": [2], "torch.as_tensor": []}
    for name, shape in shapes.items():
        replayed = baseline_replay[name]
        assert replayed["status"] == "returned" and replayed["outputs"][0]["shape"] == shape
        found = compare_call(*[Replay.from_json(replayed)] * 3, recorded=entries[name]["outcome"])
        assert found.verdict is CallVerdict.SAME and found.metadata_only is None


def test_a_numpy_array_output_is_compared_by_value(recording: Path, baseline_replay: dict) -> None:
    (entry,) = [e for e in _calls(recording) if e["callable"] == "torch.Tensor.numpy"]
    replayed = baseline_replay["torch.Tensor.numpy"]
    (output,) = replayed["outputs"]
    assert output["t"] == "tensor" and output["numpy"] is True
    assert struct.unpack("4f", base64.b64decode(output["data"]["b64"])) == (0.0, 1.0, 2.0, 3.0)
    replay = Replay.from_json(replayed)
    found = compare_call(replay, replay, replay, recorded=entry["outcome"])
    assert found.verdict is CallVerdict.SAME and found.metadata_only is None
    changed = {**output, "data": {"b64": base64.b64encode(struct.pack("4f", 0, 1, 2, 5)).decode()}}
    moved = Replay.from_json({**replayed, "outputs": [changed]})
    assert compare_call(replay, moved, replay).verdict is CallVerdict.DIFFERENT_RESULT


def test_a_conjugated_argument_is_kept_with_its_values_so_its_replay_is_faithful(
    recording: Path, baseline_replay: dict
) -> None:
    """``Tensor.conj`` sets a bit on a view; its storage holds the unconjugated values,
    which a replay rebuilt from them would multiply instead (tensorly's svd did)."""
    (flipped,) = [e for e in _calls(recording) if e["callable"] == "torch.Tensor.mul"]
    assert flipped["outcome"]["outputs"][0]["fingerprint"]["sum"] == 1 - 2 + 1 - 2
    assert _verdict(flipped, baseline_replay["torch.Tensor.mul"]) is CallVerdict.SAME


def _replay(
    env: Environment,
    import_root: Path,
    folder: Path,
    output: Path,
    cwd: Path | None = None,
    timeout_s: int = 2,
) -> dict:
    """Replay through the module's command line; returns the results by callable (api)."""
    command = ["-m", calls.CALLS_REPLAY_MAIN, str(folder), str(output)]
    command += ["--timeout", str(timeout_s)]
    printed = _run(env, import_root, command, cwd)
    results = {r["id"]: r for r in map(json.loads, output.read_text().splitlines())}
    entries = {e["id"]: e for e in _calls(folder)}
    assert set(results) == set(entries)  # one line per call, none dropped
    by_name = {
        entries[i]["callable"]: r for i, r in results.items() if entries[i]["level"] == "api"
    }
    by_name["(counts)"] = json.loads(printed.strip().splitlines()[-1])
    by_name["(by id)"] = results
    by_name["(values file)"] = output.with_suffix(".values.bin")
    by_name["(aten)"] = {
        entries[i]["callable"]: r for i, r in results.items() if entries[i]["level"] == "aten"
    }
    return by_name


def _check_user_calls(by_name: dict) -> None:
    assert by_name["torch.nn.functional.relu"]["status"] == "returned"
    assert by_name["torch.nn.functional.relu"]["outputs"][0]["data"]["b64"]
    assert by_name["torch.Tensor.matmul"]["status"] == "raised"
    assert by_name["torch.Tensor.matmul"]["exception"]["type"] == "builtins.RuntimeError"
    assert any("copy construct" in w["message"] for w in by_name["torch.tensor"]["warnings"])
    assert by_name["torch.rand"]["status"] == "not-replayable"
    assert "Generator" in by_name["torch.rand"]["why_not"]


def test_candidate_replay_reports_each_call_and_survives_crash_and_hang(
    recording: Path, candidate_env: Environment, import_root: Path, tmp_path: Path
) -> None:
    folder = _edited(recording, tmp_path / "edited")
    by_name = _replay(candidate_env, import_root, folder, tmp_path / "replay-candidate.jsonl")
    _check_user_calls(by_name)
    assert by_name["torch.no_such_function"]["status"] == "missing"
    assert by_name["torch.os.abort"]["status"] == "crashed"
    assert by_name["torch.os.system"]["status"] == "timeout"
    assert by_name["torch.zeros"]["status"] == "returned"  # the calls after them went on
    counts = by_name["(counts)"]
    assert counts["crashed"] == 1 and counts["timeout"] == 1 and counts["missing"] == 1


@pytest.fixture(scope="module")
def baseline_replay(
    recording: Path,
    baseline_env: Environment,
    import_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict:
    """The recording replayed in the baseline, by callable (api)."""
    output = tmp_path_factory.mktemp("baseline-replay") / "replay-baseline.jsonl"
    return _replay(baseline_env, import_root, recording, output)


def test_baseline_control_replay_gives_the_same_outcomes(baseline_replay: dict) -> None:
    _check_user_calls(baseline_replay)
    assert set(baseline_replay["(counts)"]) == {"returned", "raised", "not-replayable"}


def test_a_replay_keeps_each_tensor_argument_the_call_changed(baseline_replay: dict) -> None:
    foreach = baseline_replay["(aten)"]["torch.ops.aten._foreach_add_.Scalar"]
    assert foreach["status"] == "returned"
    assert [m["arg"] for m in foreach["mutated"]] == ["0.0", "0.1"]
    assert all(m["data"]["b64"] for m in foreach["mutated"])
    assert baseline_replay["torch.nn.functional.relu"]["mutated"] == []


def test_a_replayed_output_of_any_size_keeps_every_value_in_the_values_file(
    baseline_replay: dict,
) -> None:
    (steps,) = baseline_replay["torch.arange"]["outputs"]
    assert "why_no_data" not in steps and steps["data"]["length"] == 5000 * 4
    kept = baseline_replay["(values file)"].read_bytes()
    start = steps["data"]["offset"]
    assert kept[start : start + 5000 * 4] == struct.pack("=5000f", *range(5000))
    assert steps["fingerprint"] == {"sum": 4999 * 5000 / 2, "abs": 4999 * 5000 / 2, "nonfinite": 0}


def test_a_replayed_sparse_output_keeps_its_values_dense(baseline_replay: dict) -> None:
    (sparse,) = baseline_replay["torch.Tensor.to_sparse"]["outputs"]
    assert sparse["layout"] == "torch.sparse_coo" and "why_no_data" not in sparse
    assert sparse["data"]["dtype"] == "torch.float32"
    eye = struct.pack("=9f", 1, 0, 0, 0, 1, 0, 0, 0, 1)
    assert base64.b64decode(sparse["data"]["b64"]) == eye


def test_a_call_a_dependency_makes_is_sited_at_the_users_line_and_the_users_project_its_own(
    recording: Path,
) -> None:
    entries = [e for e in _calls(recording) if e["level"] == "api"]
    (mul,) = [e for e in entries if e["callable"] == "torch.mul"]
    doubled = 1 + SCRIPT.splitlines().index(
        "doubled = tinylib.double(torch.ones(2))  # a dependency calls torch: this line is the site"
    )
    assert mul["site"]["file"].endswith("user_script.py") and mul["site"]["line"] == doubled
    (div,) = [e for e in entries if e["callable"] == "torch.div"]
    assert div["site"]["file"].endswith("userproj/__init__.py") and div["site"]["line"] == 5


def test_a_call_in_another_thread_is_recorded_and_other_processes_are_counted(
    recording: Path,
) -> None:
    (sigmoid,) = [e for e in _calls(recording) if e["callable"] == "torch.sigmoid"]
    helper = 1 + SCRIPT.splitlines().index(
        "helper = threading.Thread(target=lambda: torch.sigmoid(torch.ones(2)))  # another thread"
    )
    assert sigmoid["site"]["line"] == helper and sigmoid["outcome"]["status"] == "returned"
    meta = json.loads((recording / "meta.json").read_text())
    assert meta["not_followed"] == {
        "forked process(es)": 1,
        "spawned process(es)": 1,
        "python subprocess(es)": 1,
    }
    zeros = [e["signature"] for e in _calls(recording) if e["callable"] == "torch.zeros"]
    assert zeros == ["2"]  # the script's own; the forked process's torch.zeros(1) is not there


SUITE = """
import torch

def add_one(x):
    return torch.add(x, 1)  # one call site, whichever worker runs the test

def test_one():
    assert add_one(torch.ones(2)).sum() == 4

def test_two():
    assert torch.mul(torch.ones(3), 2).sum() == 6

def test_three():
    assert add_one(torch.ones(2)).sum() == 4
"""


def test_each_pytest_xdist_worker_records_its_own_and_the_recordings_merge(
    baseline_env: Environment, tmp_path: Path
) -> None:
    """Under ``-n 2`` every worker opened the same values.bin with "wb" and the last to
    save won; each now writes its own folder, merged as one process would have written."""
    packages = ("torchcanary", "pytest", "_pytest", "pluggy", "iniconfig", "packaging")
    packages += ("py", "pygments", "xdist", "execnet")
    root = import_root_for(packages, tmp_path / "import-root")
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_calls.py").write_text(SUITE)
    folder = tmp_path / "recording"
    command = ["-m", "pytest", "-q", "-p", "xdist.plugin", "-n", "2", "-p", "no:cacheprovider"]
    command.append(f"--basetemp={tmp_path / 'inner'}")
    environ = {**os.environ, "PYTHONPATH": str(root), calls.CALLS_RECORD_VAR: str(folder)}
    environ["PYTEST_PLUGINS"] = calls.CALLS_RECORD_PLUGIN
    environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    done = subprocess.run(
        [baseline_env.python, *command],
        cwd=tmp_path / "suite",
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert merge_workers(folder) == 2
    api = {e["callable"]: e for e in _calls(folder) if e["level"] == "api"}
    assert api["torch.add"]["count"] == 2 and api["torch.mul"]["count"] == 1
    assert [e["id"] for e in _calls(folder)] == list(range(len(_calls(folder))))
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["distinct"] == len(_calls(folder)) and meta["calls"] >= 3
    by_name = _replay(baseline_env, root, folder, tmp_path / "replay-baseline.jsonl")
    for name in ("torch.add", "torch.mul", "torch.ones"):  # values read from the merged file
        assert _verdict(api[name], by_name[name]) is CallVerdict.SAME


RESTING = """
import torch
x = torch.ones(2)
y = x.double()
for step in range(100):
    torch.add(x, x if step < 99 else y)  # the 100th differs only in its second argument
torch.abs(x)  # a new line: the recorder wakes, and this call is recorded
for _ in range(100):
    torch.neg(x)  # a new site, then quiet again
torch.neg(torch.ones(3, 3))  # a new line: recorded
"""


def test_the_recorder_rests_after_quiet_calls_and_counts_what_it_did_not_examine(
    baseline_env: Environment, import_root: Path, tmp_path: Path
) -> None:
    """After 20 calls in a row that meet no new group (``TORCHCANARY_RECORD_QUIET``), calls
    are counted unexamined: in each loop calls 22 to 100 (79), the last torch.add among them,
    whose second argument's class a glance does not see; a call from a new line is
    examined, and wakes the recorder as it meets a new group."""
    (tmp_path / "script.py").write_text(RESTING)
    folder = tmp_path / "recording"
    runner = (
        "import runpy\n"
        "from torchcanary.worker.replay.record import start_from_environment\n"
        "with start_from_environment():\n"
        f"    runpy.run_path({str(tmp_path / 'script.py')!r})\n"
    )
    named = json.dumps({"paths": [str(tmp_path)], "names": []})
    variables = {calls.CALLS_RECORD_VAR: str(folder), calls.CALLS_USER_CODE_VAR: named}
    _run(baseline_env, import_root, ["-c", runner], **variables, **{calls.CALLS_QUIET_VAR: "20"})
    api = [(e["callable"], e["site"]["line"]) for e in _calls(folder) if e["level"] == "api"]
    assert api == [
        ("torch.ones", 3),
        ("torch.Tensor.double", 4),
        ("torch.add", 6),  # float32 + float32 only: the float64 one came while resting
        ("torch.abs", 7),
        ("torch.neg", 9),
        ("torch.ones", 10),
        ("torch.neg", 10),
    ]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["not_examined"] == 79 + 79 and meta["quiet"] == 20


OPS = """import torch


@torch.library.custom_op("tc41::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2
"""


def test_an_operator_the_users_code_registers_is_replayed_where_it_exists_not_missing(
    baseline_env: Environment,
    candidate_env: Environment,
    import_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 41 case 4: the replay child imported nothing of the user's, so an operator
    the project registers (``torch.library``) was "missing" in every role."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    (tmp_path / "myops.py").write_text(OPS)
    (tmp_path / "script.py").write_text("import torch\nimport myops\n\n")
    with open(tmp_path / "script.py", "a") as script:
        script.write("doubled = torch.ops.tc41.twice(torch.ones(2))\n")
    runner = (
        "import runpy\n"
        "from torchcanary.worker.replay.record import start_from_environment\n"
        "with start_from_environment():\n"
        "    runpy.run_path('script.py')\n"
    )
    folder = tmp_path / "recording"
    named = json.dumps({"paths": [str(tmp_path)], "names": []})
    variables = {calls.CALLS_RECORD_VAR: str(folder), calls.CALLS_USER_CODE_VAR: named}
    _run(baseline_env, import_root, ["-c", runner], tmp_path, **variables)
    assert json.loads((folder / "meta.json").read_text())["imports"] == ["myops"]
    (twice,) = [e for e in _calls(folder) if e["callable"] == "torch.ops.tc41.twice.default"]
    replays = {}
    for role, env in (("baseline", baseline_env), ("candidate", candidate_env)):
        output = tmp_path / f"replay-{role}.jsonl"
        # a custom operator's first call imports much of torch: seconds, not a hang
        replays[role] = _replay(env, import_root, folder, output, tmp_path, 60)["(aten)"]
    replayed = [Replay.from_json(replays[r]["torch.ops.tc41.twice.default"]) for r in replays]
    found = compare_call(*replayed, control=replayed[0], recorded=twice["outcome"])
    assert found.verdict is CallVerdict.SAME


def test_each_recorded_call_keeps_its_outcome(recording: Path) -> None:
    entries = {e["callable"]: e for e in _calls(recording) if e["level"] == "api"}
    relu = entries["torch.nn.functional.relu"]["outcome"]
    assert relu["status"] == "returned" and relu["outputs"][0]["shape"] == [2, 3]
    assert relu["outputs"][0]["fingerprint"] == {"sum": 0.0, "abs": 0.0, "nonfinite": 0}
    matmul = entries["torch.Tensor.matmul"]["outcome"]
    assert matmul["status"] == "raised" and matmul["exception"]["type"] == "builtins.RuntimeError"
    assert all(e["outcome"] for e in _calls(recording))


def test_an_address_of_the_recording_process_is_not_held_against_its_replay(
    recording: Path, baseline_replay: dict
) -> None:
    """``Tensor.data_ptr`` returns an address no replay returns again: its recorded value
    is kept unchecked, so its faithful replay is "same", not "replay-not-faithful"."""
    address = next(e for e in _calls(recording) if e["callable"] == "torch.Tensor.data_ptr")
    unchecked = {"t": "unchecked", "why": "a value of the recording process"}
    assert address["outcome"] == {"status": "returned", "outputs": [unchecked]}
    assert _verdict(address, baseline_replay["torch.Tensor.data_ptr"]) is CallVerdict.SAME


def test_an_operator_keeps_the_arguments_it_writes_and_its_replay_writes_them_alike(
    recording: Path, baseline_replay: dict
) -> None:
    """``_foreach_add_`` returns nothing; its schema names the list it writes, which the
    recording keeps fingerprinted before and after, for its replay to reproduce."""
    foreach = next(e for e in _calls(recording) if e["callable"].endswith("_foreach_add_.Scalar"))
    written = foreach["outcome"]["mutated"]
    assert [w["arg"] for w in written] == ["0.0", "0.1"]
    assert [(w["before"]["sum"], w["fingerprint"]["sum"]) for w in written] == [(0, 2), (2, 4)]
    replayed = baseline_replay["(aten)"]["torch.ops.aten._foreach_add_.Scalar"]
    assert _verdict(foreach, replayed) is CallVerdict.SAME


def _verdict(entry: dict, replayed: dict) -> CallVerdict:
    """The verdict on a call whose three replays did alike, checked against its record."""
    replay = Replay.from_json(replayed)
    return compare_call(replay, replay, replay, recorded=entry["outcome"]).verdict


def test_each_call_is_replayed_under_the_modes_it_ran_under(
    recording: Path, baseline_replay: dict
) -> None:
    entries = _calls(recording)
    line = 1 + SCRIPT.splitlines().index(
        "        product = torch.mm(torch.ones(2, 2), torch.ones(2, 2))"
    )
    at_line = [e for e in entries if e["level"] == "api" and e["site"]["line"] == line]
    products = [e for e in at_line if e["callable"] != "torch.ones"]  # torch.mm's name varies
    assert [e["context"]["autocast"] for e in products] == [{}, {"cpu": "torch.bfloat16"}]
    replayed = baseline_replay["(by id)"]
    dtypes = [replayed[e["id"]]["outputs"][0]["dtype"] for e in products]
    assert dtypes == ["torch.float32", "torch.bfloat16"]
    empties = [e for e in entries if e["callable"] == "torch.empty"]
    assert [e["context"]["deterministic"] for e in empties] == [False, True]
    strict = replayed[empties[1]["id"]]["outputs"][0]["data"]["b64"]
    assert all(math.isnan(v) for v in struct.unpack("=2f", base64.b64decode(strict)))
    # recorded under no_grad, the in-place update of a parameter replays under no_grad
    add = next(e for e in entries if e["callable"] == "torch.Tensor.add_")
    assert add["context"]["grad"] is False
    assert _verdict(add, replayed[add["id"]]) is CallVerdict.SAME


def test_a_replay_that_does_not_do_what_the_call_did_is_not_faithful_never_same(
    recording: Path, baseline_env: Environment, import_root: Path, tmp_path: Path
) -> None:
    """The in-place update of a parameter recorded under no_grad, its modes left out (as
    before they were kept): rebuilt as a leaf that needs grad and replayed with grad on, it
    raises in all three roles alike, which compared as "same"."""
    folder = tmp_path / "modeless"
    folder.mkdir()
    (folder / "values.bin").write_bytes((recording / "values.bin").read_bytes())
    entries = [{**e, "context": None} for e in _calls(recording)]
    (folder / "calls.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    by_name = _replay(baseline_env, import_root, folder, tmp_path / "replay-baseline.jsonl")
    named = {e["callable"]: e for e in entries if e["level"] == "api"}
    assert _verdict(named["torch.Tensor.add_"], by_name["torch.Tensor.add_"]) is (
        CallVerdict.NOT_FAITHFUL
    )
    for faithful in ("torch.nn.functional.relu", "torch.Tensor.matmul", "torch.tensor"):
        assert _verdict(named[faithful], by_name[faithful]) is not CallVerdict.NOT_FAITHFUL


COMPILED = """
import torch

def step(x):
    return torch.sin(x) * 2 + x.cos()

compiled = torch.compile(step, fullgraph=True, backend="eager")
result = compiled(torch.ones(3))
assert torch.allclose(result, step(torch.ones(3)))
"""


def test_fullgraph_compile_runs_under_recording_as_without(
    baseline_env: Environment, import_root: Path, tmp_path: Path
) -> None:
    """Dynamo refuses a frame while a dispatch mode is on; the recording must step aside
    (recording runs under the baseline; the same script passes under 2.14 too)."""
    (tmp_path / "compiled.py").write_text(COMPILED)
    runner = (
        "import runpy\n"
        "from torchcanary.worker.replay.record import start_from_environment\n"
        "with start_from_environment():\n"
        f"    runpy.run_path({str(tmp_path / 'compiled.py')!r})\n"
    )
    folder = tmp_path / "recording"
    scratch = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    _run(
        baseline_env,
        import_root,
        ["-c", runner],
        **{calls.CALLS_RECORD_VAR: str(folder)},
        **scratch,
    )
    entries = _calls(folder)
    sites = {(e["callable"], e["site"]["line"]) for e in entries}
    # the compiled graph's operators are attributed to the step's own lines
    assert ("torch.ones", 8) in sites and ("torch.ops.aten.sin.default", 5) in sites
    assert all(e["site"]["file"].endswith("compiled.py") for e in entries)
