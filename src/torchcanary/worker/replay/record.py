"""Records the torch calls a user's code makes, at two levels, deduplicated.

- api: each public call as written in the user's code (``torch.*``,
  ``torch.nn.functional.*``, Tensor methods), seen by a ``TorchFunctionMode``; a call torch
  makes internally is not one of these (its ATen operators are, below).
- aten: each ATen operator below, seen by a ``TorchDispatchMode``, attributed to the user's
  call site.

A call's site is the nearest Python frame in the user's code (``user_code``: the suite's own
files and the projects given with ``--with``), past torch, torchcanary and third-party
dependencies (a torch call inside an installed package is the user's line that called it;
the nearest frame outside torch when no frame is the user's). Calls are
grouped by (site, callable, argument class: dtypes and ranks, the modes they ran under:
``context``), and each group keeps a bounded sample of concrete signatures and values
(``_Group``), so a suite of thousands of tests records in bounded space: a training loop
records a few of each of its calls, and counts the rest. Each sampled call keeps its tensor
arguments' values, whatever their size, and its outcome (what it returned, fingerprinted,
or raised: the baseline replay must reproduce it; see ``encode`` for the format).
Under ``torch.compile`` both modes step aside while Dynamo traces (a fullgraph compile must
see no mode's code) and the ATen mode is pushed only for the duration of each call, as
Dynamo refuses a frame while such a mode is on; a compiled graph's own calls are attributed
to the user's line that ran it.
Random generators are seeded when recording starts, and the seed is written down.

Turned on by ``TORCHCANARY_RECORD_CALLS=<folder>``: under pytest with
``-p torchcanary.worker.replay.pytest_record``, or around a workload with
:func:`record_calls`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import multiprocessing.process
import os
import re
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

from torchcanary.worker.calls import CALLS_QUIET_VAR, CALLS_RECORD_VAR, CALLS_WORKER_FOLDER
from torchcanary.worker.replay import context
from torchcanary.worker.replay.encode import (
    FORMAT_VERSION,
    MAX_MESSAGE,
    ValueStore,
    concrete_of,
    describe,
    fingerprint,
    kind_of,
    outcome_tensor,
    signature_of,
    tensor_meta,
    values_key,
)
from torchcanary.worker.replay.op_modules import registering_modules
from torchcanary.worker.replay.user_code import UserCode

SEED = 20260  # seeded at the start of recording and before each replayed call
FORKED = "forked process(es)"  # what is not followed: in meta.json's not_followed
SPAWNED = "spawned process(es)"  # multiprocessing's spawn and forkserver: not followed either
PYTHONS = "python subprocess(es)"  # a Python the user's code starts through subprocess
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OURS_DIR = os.path.dirname(os.path.dirname(os.path.dirname(__file__))) + os.sep
# Torch frames between the mode and the user that still make a call "as written": the
# override machinery and the called function's own wrapper.
_PASS_THROUGH = ("overrides.py", "_tensor.py")
_GENERATED = "<eval_with_key>"  # code torch.fx writes (a compiled graph run eagerly)
_DYNAMO = "torch._dynamo"  # loaded: something may compile, so Dynamo must not trace the mode
_guard = threading.local()
# Asked at every call, also while resting: looked up once.
_is_compiling, _caller, _Tensor = torch.compiler.is_compiling, sys._getframe, torch.Tensor
# A group's sample (site x callable x argument class x context): up to SHAPES concrete
# signatures, VALUES distinct values each, taken from its first EXAMINED calls.
SHAPES, VALUES, EXAMINED = 4, 2, 256
# Resting: once QUIET public calls in a row of one thread met no new group (a new sample of a
# known group, other values, does not count: tests draw new values all the time), the
# thread's recorder counts the next calls without examining them (no site, no group, no ATen
# mode: a few attribute operations each), first FIRST_REST of them, then examines again;
# each rest that ends in QUIET more calls with nothing new doubles the next (up to MAX_REST).
# A call unlike every call the thread examined (``_glance``: callable, calling instruction,
# first argument's dtype and rank) is examined during a rest, and ends it if it meets a new
# group. A call that differs only in what a glance does not see (another argument's
# class, the modes, a site further out) is not recorded while the recorder rests: the price
# of recording a real suite at a small multiple of its time (``TORCHCANARY_RECORD_QUIET=0``
# examines every call).
QUIET, FIRST_REST, MAX_REST = 128, 4096, 1 << 20
# Calls whose value is this process's own (a storage address, an identity hash): no replay
# returns it again, so their recorded value is not something a replay must reproduce.
_PER_PROCESS = ("torch.Tensor.data_ptr", "torch.Tensor.__hash__")


Site = tuple[str, int, str]  # a call site's file, line and function
_OURS, _TORCH, _THROUGH, _OTHER = range(4)  # what a frame's file is, for _user_site
_file_kinds: dict[str, int] = {}  # remembered: asked at every frame of every call


def _file_kind(filename: str) -> int:
    kind = _file_kinds.get(filename)
    if kind is None:
        if filename.startswith(_OURS_DIR):
            kind = _OURS
        elif filename.startswith(_TORCH_DIR) or filename.startswith(_GENERATED):
            kind = _THROUGH if filename.endswith(_PASS_THROUGH) else _TORCH
        else:
            kind = _OTHER
        _file_kinds[filename] = kind
    return kind


def _user_site(
    frame: FrameType | None, user_code: UserCode, called: str = ""
) -> tuple[Site | None, bool]:
    """(the user's call site, whether the call was written in code outside torch): walks out
    past torch, torchcanary and third-party dependencies to the nearest frame in the user's
    code (else the nearest outside torch); the call is direct when every torch frame before
    the first frame outside torch is pass-through or the called function itself."""
    direct, written, nearest = True, False, None
    while frame is not None:
        code = frame.f_code
        kind = _file_kind(code.co_filename)
        if kind == _OURS:
            frame = frame.f_back
            continue
        if kind != _OTHER:
            if not written and kind == _TORCH:
                direct = direct and code.co_name == called
            frame = frame.f_back
            continue
        written = True
        site = code.co_filename, frame.f_lineno, code.co_name  # a dict only once sampled
        if user_code.owns(code.co_filename):
            return site, direct
        nearest = nearest or site  # a dependency's: the site only when no user frame is found
        frame = frame.f_back
    return nearest, direct and nearest is not None


class _Group:
    """The calls of one site, callable, argument class and context: a bounded sample of
    them is kept (``SHAPES`` concrete signatures, ``VALUES`` distinct values each); after
    ``EXAMINED`` calls it takes no new sample, so a long loop costs a count per call."""

    def __init__(self, number: int) -> None:
        self.number = number
        # its arguments in full (shapes, strides, other values) -> values -> entry
        self.samples: dict[Hashable, dict[str, dict[str, Any]]] = {}
        self.seen = 0

    def closed(self) -> bool:
        return self.seen >= EXAMINED


class Recording:
    """The calls seen so far, grouped and sampled, and where they go on disk."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self._values_file = open(folder / "values.bin", "wb")  # noqa: SIM115 - closed in save
        self._values = ValueStore(self._values_file)
        self._groups: dict[tuple[str, int, str, Hashable, context.Modes], _Group] = {}
        self._calls: list[dict[str, Any]] = []
        self.total = 0
        self.not_sampled = 0  # calls past their group's sample: counted, not kept
        self.not_sampled_by: Counter[str] = Counter()  # the same, by callable
        self.lock = threading.Lock()
        self._saved = False
        self.user_code = UserCode.from_environment()  # where a call's site may lie
        self.stopped = False  # saved, or in a forked child: notes nothing more
        self.forked = 0
        self.spawned = 0
        self.pythons = 0
        self.quiet = _quiet_calls()  # 0: never rest
        self._attentions: list[_Attention] = []  # each thread's, for the calls they rested on
        os.register_at_fork(before=self._count_fork, after_in_child=self._stop_in_child)

    def _count_fork(self) -> None:
        if not self.stopped:
            self.forked += 1

    def _stop_in_child(self) -> None:
        """A forked child shares the values file's position: it must not write to it."""
        self.stopped = True
        self._saved = True  # the parent saves; the child's copy of the file is not closed

    def note(
        self, level: str, name: str, site: Site, args: Any, kwargs: Any
    ) -> dict[str, Any] | None:
        """Count one call; one its group samples is encoded with its tensor arguments'
        values and returned, for its outcome to be added once it ran (None: counted only)."""
        if self.stopped:  # before the lock: a forked child may hold a copy of it, taken
            return None
        modes = context.capture()  # the same call under other modes is another call
        key = (site[0], site[1], name, kind_of((args, kwargs)), modes)
        with self.lock:
            self.total += 1
            group = self._groups.get(key)
            if group is None:
                group = self._groups[key] = _Group(len(self._groups))
            if group.closed():
                self._past_sample(name)
                return None
            group.seen += 1
            concrete = concrete_of((args, kwargs))
            samples = group.samples.get(concrete)
            if samples is None and len(group.samples) >= SHAPES:
                self._past_sample(name)
                return None
            if samples is not None and len(samples) >= VALUES:
                # no room for other values: counted without hashing its values, whatever
                # they are (a count is of the calls like its sample while it had room)
                self._past_sample(name)
                return None
            values = values_key([args, kwargs])
            known = samples.get(values) if samples else None
            if known is not None:
                known["count"] += 1
                return None
            why_not: list[str] = []
            keep = lambda tensor: self._values.keep(tensor, why_not)  # noqa: E731
            encoded = [describe(a, keep, why_not) for a in args]
            named = {k: describe(v, keep, why_not) for k, v in kwargs.items()}
            entry = {
                "id": len(self._calls),
                "level": level,
                "callable": name,
                "site": {"file": site[0], "line": site[1], "function": site[2]},
                "signature": signature_of(encoded + ([named] if named else [])),
                "context": context.described(modes),
                "group": group.number,
                "values_key": values,
                "count": 1,
                "args": encoded,
                "kwargs": named,
                "replayable": True,
                "why_not": None,
                "outcome": None,
            }
            if why_not:
                entry["replayable"] = False
                entry["why_not"] = "; ".join(dict.fromkeys(why_not))
            group.samples.setdefault(concrete, {})[values] = entry
            self._calls.append(entry)
            return entry

    def groups_met(self) -> int:
        """How many groups the recording has: a change says a new kind of call was met (a
        new sample of a known group, such as other values, does not)."""
        return len(self._groups)

    def attention(self) -> _Attention:
        """A new thread's resting state, counted in the recording's totals."""
        attention = _Attention(self)
        with self.lock:
            self._attentions.append(attention)
        return attention

    def _past_sample(self, name: str) -> None:
        """Count a call past its group's sample (the lock held)."""
        self.not_sampled += 1
        self.not_sampled_by[name] += 1

    def save(self) -> dict[str, Any]:
        """Write ``calls.jsonl`` and ``meta.json``; returns the meta."""
        with self.lock:
            if self.stopped and self._saved:  # a forked child's copy: the parent saves
                return {}
            if not self._saved:
                self._values_file.close()
                self._saved = True
            self.stopped = True
            calls = list(self._calls)
        with open(self.folder / "calls.jsonl", "w", encoding="utf-8") as out:
            for entry in calls:
                out.write(json.dumps(entry) + "\n")
        skipped = Counter(e["why_not"] for e in calls if not e["replayable"])
        unfollowed = ((FORKED, self.forked), (SPAWNED, self.spawned), (PYTHONS, self.pythons))
        meta = {
            "format": FORMAT_VERSION,
            "seed": SEED,
            "torch": torch.__version__,
            "calls": self.total,
            "distinct": len(calls),
            "groups": len(self._groups),
            "not_sampled": self.not_sampled,
            "not_sampled_by": dict(self.not_sampled_by.most_common()),
            "not_examined": sum(a.rested for a in self._attentions),
            "quiet": self.quiet,
            "not_replayable": dict(skipped),
            "values_bytes": self._values.used,
            "values_budget": self._values.budget,
            "not_followed": {why: n for why, n in unfollowed if n},
            "imports": registering_modules(calls, self.user_code),
        }
        (self.folder / "meta.json").write_text(json.dumps(meta, indent=1))
        return meta


def _quiet_calls() -> int:
    text = os.environ.get(CALLS_QUIET_VAR, "")
    return int(text) if text.strip().isdigit() else QUIET


def _glance(func: Any, args: Any) -> Hashable:
    """What a resting recorder can afford to look at (well under a microsecond): the
    callable, the instruction that called it, and the first argument's dtype and rank. A call
    unlike every call the thread examined before is examined, and wakes the recorder if it
    meets a new group. Only values whose hash is cached or cheap (a file name, not its code
    object, which hashes its whole body)."""
    frame = _caller(2)  # the caller of __torch_function__'s caller: the call's line
    code = frame.f_code
    if _file_kind(code.co_filename) == _THROUGH and frame.f_back is not None:
        frame = frame.f_back  # an operator's own wrapper (``Tensor.__add__``): its caller
        code = frame.f_code
    # the calling instruction (its offset, cheaper than its line), in its function
    where = code.co_filename, code.co_firstlineno, frame.f_lasti
    first = args[0] if args else None
    if isinstance(first, _Tensor):
        return func, where, first.dtype, first.ndim
    return func, where, type(first)


class _Attention:
    """One thread's resting state (see ``QUIET``): whether its next public call is examined,
    and how many it counted without examining."""

    def __init__(self, recording: Recording) -> None:
        self._recording = recording
        self.rested = 0  # calls counted while resting: only this thread writes it
        self.resting = 0  # calls still to pass unexamined
        self._quiet = 0  # examined calls in a row that met no new group
        self._next_rest = FIRST_REST
        self._groups_before = 0  # the recording's groups before the call being examined
        self._met: set[Hashable] = set()  # how the calls this thread examined looked

    def rests(self, glance: Hashable) -> bool:
        """Whether the call about to run passes unexamined (it is then counted): not when a
        glance shows it unlike every call this thread examined."""
        try:
            if glance in self._met:
                self.resting -= 1
                self.rested += 1
                return True
        except TypeError:  # an unhashable callable: examined
            pass
        return False

    def examining(self, glance: Hashable) -> None:
        """Before an examined call: how it looked, and the recording's groups so far."""
        with contextlib.suppress(TypeError):
            self._met.add(glance)
        self._groups_before = self._recording.groups_met()

    def examined(self) -> None:
        """After it: a call that met a new group wakes the recorder, from a rest too; one
        a glance picked out during a rest that met none lets the rest go on; after
        ``quiet`` calls in a row that met none, a rest starts."""
        if self._recording.groups_met() != self._groups_before:
            self.resting, self._quiet, self._next_rest = 0, 0, FIRST_REST
            return
        if self.resting:
            return
        self._quiet += 1
        quiet = self._recording.quiet
        if quiet and self._quiet >= quiet:
            self.resting, self._quiet = self._next_rest, 0
            self._next_rest = min(2 * self._next_rest, MAX_REST)


def _generator_states() -> list[torch.Tensor]:
    """The default generators' states: the CPU's, and the current GPU's once CUDA is up
    (not while a CUDA graph is captured, which reading it would break)."""
    states = [torch.random.get_rng_state()]
    if torch.cuda.is_initialized() and not torch.cuda.is_current_stream_capturing():
        states.append(torch.cuda.get_rng_state())
    return states


def _written_arguments(func: Any, args: Any, kwargs: Any) -> list[tuple[str, torch.Tensor]]:
    """The tensor arguments an ATen operator's schema says it writes (``Tensor(a!)``: an
    in-place op's self, ``out=``, a ``_foreach_*_``'s list), each with its place as the
    replay names it ("0", "0.1", "out")."""
    written: list[tuple[str, torch.Tensor]] = []
    for index, argument in enumerate(func._schema.arguments):
        alias = argument.alias_info
        if alias is None or not alias.is_write:
            continue
        if argument.kwarg_only or index >= len(args):
            place, value = argument.name, kwargs.get(argument.name)
        else:
            place, value = str(index), args[index]
        if isinstance(value, torch.Tensor):
            written.append((place, value))
        elif isinstance(value, (list, tuple)):
            items = enumerate(value)
            written += [(f"{place}.{i}", t) for i, t in items if isinstance(t, torch.Tensor)]
    return written


class _OutcomeOf:
    """Around a newly recorded call: keeps what it returned (metadata and fingerprints) or
    raised in its entry, the outcome its baseline replay must reproduce, and the arguments
    it writes (``written``), fingerprinted before and after. A call that drew from the
    random generator keeps no fingerprints: the replay reseeds, so its values are another
    draw."""

    def __init__(
        self, entry: dict[str, Any] | None, written: list[tuple[str, torch.Tensor]] | None = None
    ) -> None:
        self._entry = entry
        self._written = written
        self._before: list[dict[str, Any] | None] = []
        self._generators: list[torch.Tensor] = []

    def __enter__(self) -> _OutcomeOf:
        if self._entry is not None:
            self._generators = _generator_states()
            if self._written:
                with _busy():
                    self._before = [fingerprint(tensor) for _, tensor in self._written]
        return self

    def returned(self, value: Any) -> Any:
        """Keep ``value`` as the call's outcome; returns it."""
        if self._entry is None:
            return value
        now = _generator_states()
        drew = len(now) != len(self._generators) or not all(
            torch.equal(before, after) for before, after in zip(self._generators, now, strict=True)
        )
        keep = tensor_meta if drew else outcome_tensor
        if self._entry["callable"] in _PER_PROCESS:
            unchecked = {"t": "unchecked", "why": "a value of the recording process"}
            self._entry["outcome"] = {"status": "returned", "outputs": [unchecked]}
            return value
        items = value if isinstance(value, (tuple, list)) else [value]
        with _busy():
            outputs = [describe(item, keep, []) for item in items]
            outcome: dict[str, Any] = {"status": "returned", "outputs": outputs}
            if self._written is not None:  # an ATen operator: what it writes is known
                outcome["mutated"] = [
                    {"arg": place, "before": None if drew else before, **keep(tensor)}
                    for (place, tensor), before in zip(self._written, self._before, strict=True)
                ]
        self._entry["outcome"] = outcome
        return value

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        if self._entry is not None and isinstance(error, Exception):
            kind_name = f"{kind.__module__}.{kind.__qualname__}"
            raised = {"type": kind_name, "message": str(error)[:MAX_MESSAGE]}
            self._entry["outcome"] = {"status": "raised", "exception": raised}


@contextlib.contextmanager
def _busy() -> Iterator[None]:
    """The recorder's own torch calls (fingerprints) inside the block are not the user's."""
    was_busy = getattr(_guard, "busy", False)
    _guard.busy = True
    try:
        yield
    finally:
        _guard.busy = was_busy


_names: dict[Any, tuple[str, str]] = {}  # remembered: resolve_name costs a warnings filter


def _named(func: Any) -> tuple[str, str]:
    """A public callable's (name as recorded, name as its own frame has it); no name for an
    attribute read or write, which is not a call."""
    try:
        return _names[func]
    except KeyError:
        pass
    except TypeError:  # unhashable: asked every time
        return _resolved(func)
    named = _names[func] = _resolved(func)
    return named


def _resolved(func: Any) -> tuple[str, str]:
    name = resolve_name(func) or getattr(func, "__qualname__", repr(func))
    if name.endswith(("__get__", "__set__")):
        return "", ""
    return name, getattr(func, "__name__", "")


class _ApiMode(TorchFunctionMode):
    """Sees each public torch call; keeps those written in the user's own code."""

    def __init__(self, recording: Recording) -> None:
        super().__init__()
        self._recording = recording
        self._aten = _AtenMode(recording)
        self._attention = recording.attention()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if _is_compiling():  # Dynamo traces this: step aside, in one branch
            return func(*args, **kwargs)
        attention = self._attention
        glance = _glance(func, args)
        if attention.resting and attention.rests(glance):
            return func(*args, **kwargs)
        attention.examining(glance)
        entry = None
        if not getattr(_guard, "busy", False):
            name, called = _named(func)
            if name:
                site, direct = _user_site(sys._getframe(1), self._recording.user_code, called)
                if site is not None and direct:
                    _guard.busy = True
                    try:
                        entry = self._recording.note("api", name, site, args, kwargs)
                    finally:
                        _guard.busy = False
        # The ATen mode is on only inside a call: Dynamo refuses to trace a frame while a
        # dispatch mode of this kind is on the stack, so outside calls it must be off.
        _AtenMode.shield()
        with _OutcomeOf(entry) as outcome:
            try:
                with self._aten:
                    value = func(*args, **kwargs)
            finally:
                attention.examined()
            return outcome.returned(value)


class _AtenMode(TorchDispatchMode):
    """Sees each ATen operator, attributed to the user's call site.

    Torch wraps a dispatch mode's ``__torch_dispatch__`` so that Dynamo never traces it,
    and that wrapper imports Dynamo at its first call (seconds, in a suite that never
    compiles) and costs at every call. Nothing is traced before Dynamo is imported, so the
    wrapper is put on only once it is (``shield``, before each time the mode is pushed)."""

    _shielded = False

    def __init__(self, recording: Recording) -> None:
        super().__init__()
        self._recording = recording

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # not wrapped as the class is made: ``shield`` does it when needed

    @classmethod
    def shield(cls) -> None:
        """Keep Dynamo out of ``__torch_dispatch__`` once Dynamo is loaded."""
        if not cls._shielded and _DYNAMO in sys.modules:
            raw = cls.__dict__["__torch_dispatch__"]
            cls.__torch_dispatch__ = torch._disable_dynamo(raw, recursive=True)  # type: ignore[method-assign]
            cls._shielded = True

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if not getattr(_guard, "busy", False):
            site, _ = _user_site(sys._getframe(1), self._recording.user_code)
            if site is not None:
                name = f"torch.ops.{func.namespace}.{func._opname}.{func._overloadname}"
                _guard.busy = True
                try:
                    entry = self._recording.note("aten", name, site, args, kwargs)
                finally:
                    _guard.busy = False
                if entry is None:  # counted only
                    return func(*args, **kwargs)
                written = _written_arguments(func, args, kwargs)
                with _OutcomeOf(entry, written) as outcome:
                    return outcome.returned(func(*args, **kwargs))
        return func(*args, **kwargs)


def _follow_threads(recording: Recording) -> Any:
    """Modes are per thread: each thread started from now on gets its own recording modes
    on entry (a profile hook that steps aside once it ran; one set before is kept and
    called). Returns the hook that was set before, to set back."""
    before = threading.getprofile()

    def on_entry(frame: FrameType, event: Any, arg: Any) -> None:
        sys.setprofile(before)
        if not recording.stopped:
            _ApiMode(recording).__enter__()  # left on: it goes with the thread
        if before is not None:
            before(frame, event, arg)

    threading.setprofile(on_entry)
    return before


def _count_spawns(recording: Recording) -> Callable[[], None]:
    """A process multiprocessing starts by spawn or forkserver (a ``DataLoader`` worker
    under those start methods) runs torch calls no mode sees and no fork hook counts:
    counted as it starts. Returns what sets ``Process.start`` back."""
    start = multiprocessing.process.BaseProcess.start

    def counted_start(process: Any) -> None:
        start(process)
        started_by = type(getattr(process, "_popen", None)).__module__
        if not recording.stopped and not started_by.endswith("popen_fork"):
            with recording.lock:
                recording.spawned += 1

    setattr(multiprocessing.process.BaseProcess, "start", counted_start)  # noqa: B010
    return lambda: setattr(multiprocessing.process.BaseProcess, "start", start)


def _program(args: Any, executable: Any, shell: bool) -> str:
    """The name of the program a ``subprocess`` call runs."""
    if isinstance(args, (str, bytes, os.PathLike)):
        text = os.fsdecode(args)
        first = (text.split() or [""])[0] if shell else text
    else:
        first = os.fsdecode(args[0]) if args else ""
    if executable is not None and not shell:
        first = os.fsdecode(executable)
    return first


def _is_python(program: str) -> bool:
    name = os.path.basename(program)
    return bool(re.fullmatch(r"python[0-9.]*", name)) or program == sys.executable


def _count_pythons(recording: Recording) -> Callable[[], None]:
    """A Python the user's code starts through ``subprocess`` (``python -c``, a script) runs
    torch calls no mode sees: counted as it starts; one torch starts for itself (Inductor's
    compile workers: a torch frame on the stack) is not the user's. Returns what sets
    ``Popen._execute_child`` back."""
    execute = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def counted(popen: Any, args: Any, executable: Any, *rest: Any) -> Any:
        shell = bool(rest[7]) if len(rest) > 7 else False  # its parameters after executable
        if not recording.stopped and _is_python(_program(args, executable, shell)):
            frame: FrameType | None = sys._getframe(1)
            while frame is not None and not frame.f_code.co_filename.startswith(_TORCH_DIR):
                frame = frame.f_back
            if frame is None:
                with recording.lock:
                    recording.pythons += 1
        return execute(popen, args, executable, *rest)

    setattr(subprocess.Popen, "_execute_child", counted)  # noqa: B010
    return lambda: setattr(subprocess.Popen, "_execute_child", execute)


@contextlib.contextmanager
def record_calls(folder: str | os.PathLike[str]) -> Iterator[Recording]:
    """Record every torch call made inside the block into ``folder``: in this thread and in
    every thread started inside it. A process forked or spawned inside it (a ``DataLoader``
    worker), or a Python started through ``subprocess``, is not followed: counted, and its
    calls are not written."""
    recording = Recording(Path(folder))
    torch.manual_seed(SEED)
    before = _follow_threads(recording)
    restore_start = _count_spawns(recording)
    restore_execute = _count_pythons(recording)
    try:
        with _ApiMode(recording):
            yield recording
    finally:
        threading.setprofile(before)
        restore_start()
        restore_execute()
        recording.save()


def start_from_environment(xdist_worker: str | None = None) -> contextlib.ExitStack | None:
    """Start recording when ``TORCHCANARY_RECORD_CALLS`` names a folder (the pytest plugin's
    way in); the recording is also saved at exit, so a run that ends abruptly keeps it.
    A pytest-xdist worker (``xdist_worker``, its id as the plugin reads it from pytest's
    config, never from ``PYTEST_XDIST_WORKER``, which any process started under an xdist
    worker inherits) records into a folder of its own inside it (``worker-gw0``), as the
    workers run at once; the section merges them."""
    folder = os.environ.get(CALLS_RECORD_VAR)
    if not folder:
        return None
    worker = xdist_worker
    if worker:
        folder = os.path.join(folder, f"{CALLS_WORKER_FOLDER}{worker}")
    stack = contextlib.ExitStack()
    recording = stack.enter_context(record_calls(folder))
    atexit.register(recording.save)
    return stack
