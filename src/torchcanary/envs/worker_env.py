"""The environment variables a worker starts with, whichever section starts it.

They are set before the worker's torch starts: thread pools and compile caches are read
once, at start-up, so setting them later changes nothing.
"""

from __future__ import annotations


def thread_env(threads: int) -> dict[str, str]:
    """Pin the thread pools before torch starts them, not only after."""
    value = str(threads)
    return {"OMP_NUM_THREADS": value, "MKL_NUM_THREADS": value, "OPENBLAS_NUM_THREADS": value}


def compile_env(scratch: str) -> dict[str, str]:
    """Every compile in a worker is cold: Inductor's on-disk caches off, in a scratch dir.

    Otherwise a workload's second group would load the first group's compiled code and
    its "cold compile" would time a cache hit.
    """
    return {
        "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
        "TORCHINDUCTOR_CACHE_DIR": f"{scratch}/inductor",
        "TRITON_CACHE_DIR": f"{scratch}/triton",
    }


def shared_compile_env(folder: str) -> dict[str, str]:
    """An untimed worker's compile caches in ``folder``, which the other workers of its
    environment in the run share.

    A worker's default cache sits in its own temporary folder, so each started cold: on
    its first compile Inductor builds and runs its CPU feature checks and headers again,
    10 s of g++ here, once per worker rather than once per environment. Nothing timed
    reads these caches, and a hit loads what the same graph and settings compiled to.
    """
    return {"TORCHINDUCTOR_CACHE_DIR": f"{folder}/inductor", "TRITON_CACHE_DIR": f"{folder}/triton"}
