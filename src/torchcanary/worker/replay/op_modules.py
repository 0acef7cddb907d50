"""The modules that register the operators a recording calls, imported again at replay.

An operator a project registers (``torch.library``, a C++ extension) exists only once the
module that registers it is imported; the replay child imports no user code, so such a call
was "missing" in every role. The recording names, when it calls an operator outside torch's
own namespaces, the modules loaded from the user's code (test modules left out: importing
them runs no registration worth the side effects) and the loaded packages named like each
operator's namespace (``torchvision``); the replay child imports them before its first call.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from typing import Any

from torchcanary.worker.replay.user_code import UserCode

TORCH_NAMESPACES = frozenset(("aten", "prims", "prim"))  # torch's own operators
_OPS = "torch.ops."
_NOT_USERS = frozenset(("torch", "torchcanary"))  # wherever they lie, not the user's code


def _is_test(filename: str) -> bool:
    name = os.path.basename(filename)
    return name == "conftest.py" or name.startswith("test_") or name.endswith("_test.py")


def registering_modules(calls: Iterable[dict[str, Any]], user_code: UserCode) -> list[str]:
    """The modules to import before replaying ``calls`` (none when every operator is
    torch's own)."""
    namespaces = {
        str(call["callable"])[len(_OPS) :].split(".")[0]
        for call in calls
        if str(call["callable"]).startswith(_OPS)
    } - TORCH_NAMESPACES
    if not namespaces:
        return []
    names = {namespace for namespace in namespaces if namespace in sys.modules}
    for name, module in list(sys.modules.items()):
        filename = str(getattr(module, "__file__", None) or "")
        if name == "__main__" or name.split(".")[0] in _NOT_USERS:
            continue
        importable = os.path.isabs(filename) and not _is_test(filename)
        if importable and user_code.owns(filename):
            names.add(name)
    return sorted(names)


def import_all(names: Iterable[str]) -> list[str]:
    """Import each module, and what a registered operator's first call imports (Dynamo:
    seconds, which would count against that call's timeout); returns what could not be
    imported, with why."""
    failed = []
    names = list(names)
    for name in [*names, *(["torch._dynamo"] if names else [])]:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the user's module failing to import is reported, not ours
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    return failed
