"""Replays a recording, one call at a time, in a child process that may die.

The parent (:func:`replay_recording`, or ``python -m`` this module) starts a child that
replays the calls in order and reports each on a private pipe: a ``begin`` line, then its
result. A child that dies mid-call (a crash) or stays in one call past the timeout (a hang,
then killed) costs that call alone: it is written as ``crashed`` or ``timeout`` and a new
child goes on from the next call. Each result is one line of ``replay-<role>.jsonl``:
``{"id", "status", "exception", "warnings", "outputs", "mutated", "seconds"}`` with status
``returned``, ``raised``, ``missing`` (the callable no longer exists), ``not-replayable``,
``crashed`` or ``timeout``. ``mutated`` holds each tensor argument the call changed (an
in-place op, ``out=``, ``_foreach_*_``: what they do is there, not in what they return), as
an output tensor with ``arg``, its place among the arguments ("0", "0.1", "out"). The values
of outputs too large for a line go to ``replay-<role>.values.bin`` beside it, whatever their
size (``encode.REPLAY_VALUES_BUDGET`` in all), so every value is compared.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import IO, Any, BinaryIO

from torchcanary.worker.ending import end_now


def _resolve(name: str) -> Any:
    """The callable a recorded name spells, looked up from torch; None when it is gone."""
    import torch

    parts = name.split(".")
    value: Any = torch
    for part in parts[1:]:
        try:
            value = getattr(value, part)
        except (AttributeError, RuntimeError):
            return None
    return value if callable(value) else None


def _tensor_arguments(args: list[Any], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each tensor among the arguments (lists and tuples walked), with its place."""
    import torch

    found: list[tuple[str, Any]] = []

    def walk(place: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            found.append((place, value))
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                walk(f"{place}.{index}", item)

    for index, arg in enumerate(args):
        walk(str(index), arg)
    for name, value in kwargs.items():
        walk(name, value)
    return found


def _result(call_id: int, status: str, **fields: Any) -> dict[str, Any]:
    result = {"id": call_id, "status": status, "exception": None, "warnings": [], "outputs": []}
    result["mutated"] = []
    result["seconds"] = 0.0
    result.update(fields)
    return result


def values_path(output: Path) -> Path:
    """Where a replay's large output values go: beside its lines."""
    return output.with_suffix(".values.bin")


def replay_one(call: dict[str, Any], values: bytes | mmap.mmap, store: Any) -> dict[str, Any]:
    """Replay one recorded call in this process: what it returned, raised and warned;
    ``store`` (an ``encode.ValueStore``) keeps its large outputs' values."""
    import torch

    from torchcanary.worker.replay.context import restored
    from torchcanary.worker.replay.encode import (
        MAX_MESSAGE,
        NotReplayable,
        describe,
        output_tensor,
        rebuild,
        tensor_bytes,
    )
    from torchcanary.worker.replay.record import SEED

    if not call["replayable"]:
        return _result(call["id"], "not-replayable", why_not=call["why_not"])
    function = _resolve(call["callable"])
    if function is None:
        message = f"{call['callable']} does not exist in torch {torch.__version__}"
        return _result(call["id"], "missing", exception={"type": "missing", "message": message})
    try:
        args = [rebuild(a, values) for a in call["args"]]
        kwargs = {k: rebuild(v, values) for k, v in call["kwargs"].items()}
    except NotReplayable as exc:
        return _result(call["id"], "not-replayable", why_not=str(exc))
    except (RuntimeError, ValueError, TypeError) as exc:  # an argument this torch cannot build
        return _result(call["id"], "not-replayable", why_not=f"arguments not rebuilt: {exc}")
    watched = _tensor_arguments(args, kwargs)
    before = {place: tensor_bytes(tensor) for place, tensor in watched}
    inputs: dict[int, int] = {}
    for index, arg in enumerate(args):
        if isinstance(arg, torch.Tensor):
            inputs.setdefault(arg.untyped_storage().data_ptr(), index)
    torch.manual_seed(SEED)
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with restored(call.get("context")):  # the modes it was recorded under
                returned = function(*args, **kwargs)
            outcome, exception = "returned", None
        except Exception as exc:  # the user's call raising is a result, not our failure
            returned = None
            outcome = "raised"
            kind = type(exc)
            exception = {"type": f"{kind.__module__}.{kind.__qualname__}"}
            exception["message"] = str(exc)[:MAX_MESSAGE]
    seconds = time.perf_counter() - started
    outputs: list[Any] = []
    mutated: list[dict[str, Any]] = []
    if outcome == "returned":
        items = returned if isinstance(returned, (tuple, list)) else [returned]
        keep = lambda tensor: output_tensor(tensor, inputs, store)  # noqa: E731
        outputs = [describe(item, keep, []) for item in items]
        mutated = [
            {"arg": place, **output_tensor(tensor, inputs, store)}
            for place, tensor in watched
            if tensor_bytes(tensor) != before[place]
        ]
    said = [
        {"category": w.category.__name__, "message": str(w.message)[:MAX_MESSAGE]} for w in caught
    ]
    return _result(
        call["id"],
        outcome,
        exception=exception,
        warnings=said,
        outputs=outputs,
        mutated=mutated,
        seconds=seconds,
    )


def _child(recording: Path, start: int, channel: IO[str], kept: BinaryIO) -> None:
    """Replay calls from index ``start`` on, writing ``begin`` and result lines to ``channel``
    and large output values to the end of ``kept``."""
    # torch is imported before the first call's clock starts (the parent allows for it)
    from torchcanary.worker.replay import context, record  # noqa: F401
    from torchcanary.worker.replay.encode import REPLAY_VALUES_BUDGET, ValueStore
    from torchcanary.worker.replay.op_modules import import_all

    meta_path = recording / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    for failure in import_all(meta.get("imports", ())):  # what registers the user's ops
        print(f"torchcanary: could not import {failure}", file=sys.stderr)
    values = _mapped(recording / "values.bin")  # any size: read as each call needs it
    store = ValueStore(kept, REPLAY_VALUES_BUDGET, used=kept.tell())
    with open(recording / "calls.jsonl", encoding="utf-8") as lines:
        calls = [json.loads(line) for line in lines if line.strip()]
    context.prepare([call.get("context") for call in calls[start:]])
    for call in calls[start:]:
        channel.write(json.dumps({"begin": call["id"]}) + "\n")
        channel.flush()
        result = replay_one(call, values, store)
        kept.flush()  # the values a line names are on disk before the line
        channel.write(json.dumps({"result": result}) + "\n")
        channel.flush()


def _mapped(path: Path) -> bytes | mmap.mmap:
    """The file's bytes, mapped rather than read (an empty file cannot be mapped)."""
    with open(path, "rb") as stream:
        if os.fstat(stream.fileno()).st_size == 0:
            return b""
        return mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)


def _read_lines(stream: IO[str], into: queue.Queue[str | None]) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def _start_child(
    recording: Path, output: Path, start: int
) -> tuple[subprocess.Popen[str], queue.Queue[str | None]]:
    read_end, write_end = os.pipe()
    command = [sys.executable, "-m", __spec__.name if __spec__ else "", str(recording)]
    command += [str(output), "--child", str(start), "--channel", str(write_end)]
    # its own session, so a hung call's helper processes are stopped with it
    child = subprocess.Popen(
        command,
        pass_fds=(write_end,),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    os.close(write_end)
    lines: queue.Queue[str | None] = queue.Queue()
    reader = open(read_end, encoding="utf-8")  # noqa: SIM115 - read to the end by the thread
    threading.Thread(target=_read_lines, args=(reader, lines), daemon=True).start()
    return child, lines


def replay_recording(
    recording: str, output: str, timeout_s: float = 60.0, start_timeout_s: float = 120.0
) -> dict[str, int]:
    """Replay every call of the recording folder into ``output`` (one JSON line per call id);
    returns how many calls ended in each status."""
    folder = Path(recording)
    with open(folder / "calls.jsonl", encoding="utf-8") as recorded:
        ids = [json.loads(line)["id"] for line in recorded if line.strip()]
    counts: dict[str, int] = {}
    position = 0
    values_path(Path(output)).write_bytes(b"")  # each child appends to it
    with open(output, "w", encoding="utf-8") as out:

        def write(result: dict[str, Any]) -> None:
            out.write(json.dumps(result) + "\n")
            out.flush()
            counts[result["status"]] = counts.get(result["status"], 0) + 1

        while position < len(ids):
            child, lines = _start_child(folder, Path(output), position)
            current: int | None = None
            deadline = time.monotonic() + start_timeout_s
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    os.killpg(child.pid, signal.SIGKILL)
                    child.wait()
                    line = "timeout"
                if line is None or line == "timeout":
                    child.wait()
                    if current is None:  # the child itself failed before any call
                        current = ids[position]
                    status = "timeout" if line == "timeout" else "crashed"
                    message = (
                        f"no result within {timeout_s:g} s; the replay process was stopped"
                        if status == "timeout"
                        else f"the replay process died (exit code {child.returncode})"
                    )
                    if position < len(ids):
                        failure = {"type": status, "message": message}
                        write(_result(current, status, exception=failure))
                        position += 1
                    break
                message_line = json.loads(line)
                if "begin" in message_line:
                    current = message_line["begin"]
                    deadline = time.monotonic() + timeout_s
                    continue
                write(message_line["result"])
                position += 1
                current = None
                deadline = time.monotonic() + timeout_s
                if position >= len(ids):
                    child.wait()
                    break
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torchcanary.worker.replay.replay",
        description="Replay a recording of torch calls, each isolated; one JSON line per call.",
    )
    parser.add_argument("recording", help="the recording folder (calls.jsonl, values.bin)")
    parser.add_argument("output", help="the replay-<role>.jsonl file to write")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per call")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--channel", type=int, default=None, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child is not None:
        kept_path = values_path(Path(options.output))
        with (
            open(options.channel, "w", encoding="utf-8") as channel,
            open(kept_path, "ab") as kept,
        ):
            _child(Path(options.recording), options.child, channel, kept)
        end_now()  # every result is written and its files closed; the parent waits for this
    if not (Path(options.recording) / "calls.jsonl").is_file():
        print(
            f"torchcanary: {options.recording} holds no calls.jsonl; "
            "give the folder a recording was written to",
            file=sys.stderr,
        )
        return 2
    counts = replay_recording(options.recording, options.output, options.timeout)
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
