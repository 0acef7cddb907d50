"""torch's object collectives in an environment without numpy.

Worker side (standard library and torch only). torch.distributed's ``*_object``
collectives (``gather_object``, ``scatter_object_list``, ``broadcast_object_list``,
``all_gather_object``) turn the bytes they received back into an object through
``tensor.numpy().tobytes()`` (torch 2.13 and 2.14 alike), and torch.distributed.checkpoint
plans every save and load with them: without numpy a checkpoint fails with
"RuntimeError: Numpy is not available". torchcanary's own jobs run in the user's
environment as it is (installing numpy would change what is qualified), so they route that
one step through the tensor's own bytes instead; everything else torch does is untouched.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch
import torch.distributed.distributed_c10d as c10d


class _BytesTensor(torch.Tensor):
    """A uint8 tensor whose ``numpy()`` hands over its bytes (as a ``memoryview``, whose
    ``tobytes()`` is what torch calls next) without numpy. A real tensor otherwise, so
    whatever else torch does with it (moving it to the CPU, hashing it) still works."""

    def numpy(self, *, force: bool = False) -> memoryview:
        flat = self.as_subclass(torch.Tensor).detach().cpu().contiguous()
        return memoryview(ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size()))


def numpy_usable() -> bool:
    """Whether torch can hand a tensor to numpy here (numpy installed and importable)."""
    try:
        torch.zeros(1, dtype=torch.uint8).numpy()
    except (RuntimeError, ImportError):
        return False
    return True


def route_object_collectives_around_numpy() -> bool:
    """Where numpy is unusable, make torch's object collectives read bytes without it;
    returns whether it did (an idempotent no-op where numpy works or torch has no
    ``_tensor_to_object`` to route)."""
    original = getattr(c10d, "_tensor_to_object", None)
    if original is None or getattr(original, "numpy_free", False) or numpy_usable():
        return False

    @functools.wraps(original)
    def tensor_to_object(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        return original(tensor.as_subclass(_BytesTensor), *args, **kwargs)

    tensor_to_object.numpy_free = True  # type: ignore[attr-defined]
    c10d._tensor_to_object = tensor_to_object
    return True
