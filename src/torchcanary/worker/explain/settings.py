"""The runtime settings of this environment that can change how fast the same code runs,
and the hook that sets some of them back (stdlib + torch).

``snapshot`` reads each setting as ``{"value", "how"}``: ``how`` says how the counterfactual
sets it back: ``env`` (an environment variable, set or unset before torch is imported),
``python`` (a call into torch, made before the benchmark is built), or ``fixed`` (a
property of the build that nothing sets back: the threading layer).
"""

from __future__ import annotations

import os
from typing import Any

# Environment variables torch, its threading and math libraries, and its compilers read
# (torchcanary's own, TORCHCANARY_*, differ per worker and are left out).
ENV_PREFIXES = (
    "OMP_",
    "MKL_",
    "KMP_",
    "GOMP_",
    "ATEN_",
    "TORCH",
    "PYTORCH_",
    "CUDA_",
    "CUBLAS",
    "CUDNN",
    "NCCL_",
    "DNNL_",
    "ONEDNN_",
    "TRITON_",
    "OPENBLAS_",
    "LD_PRELOAD",
)
# torch.backends flags: name -> (module path, attribute)
_BACKEND_FLAGS = {
    "cuda.matmul.allow_tf32": ("torch.backends.cuda.matmul", "allow_tf32"),
    "cuda.matmul.allow_fp16_reduced_precision_reduction": (
        "torch.backends.cuda.matmul",
        "allow_fp16_reduced_precision_reduction",
    ),
    "cuda.matmul.allow_bf16_reduced_precision_reduction": (
        "torch.backends.cuda.matmul",
        "allow_bf16_reduced_precision_reduction",
    ),
    "cudnn.enabled": ("torch.backends.cudnn", "enabled"),
    "cudnn.allow_tf32": ("torch.backends.cudnn", "allow_tf32"),
    "cudnn.benchmark": ("torch.backends.cudnn", "benchmark"),
    "cudnn.deterministic": ("torch.backends.cudnn", "deterministic"),
    "mkldnn.enabled": ("torch.backends.mkldnn", "enabled"),
}


def _object(path: str) -> Any:
    import importlib

    module, _, rest = path.partition(".backends.")
    found: Any = importlib.import_module(f"{module}.backends")
    for part in rest.split("."):
        found = getattr(found, part)
    return found


def _threading_layer(parallel_info: str) -> str:
    for line in parallel_info.splitlines():
        if line.startswith("ATen parallel backend:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def snapshot() -> dict[str, dict[str, Any]]:
    """Every setting read here, by name: ``{"value": ..., "how": env|python|fixed}``."""
    import torch

    found: dict[str, dict[str, Any]] = {
        f"env:{name}": {"value": value, "how": "env"}
        for name, value in sorted(os.environ.items())
        if name.startswith(ENV_PREFIXES) and not name.startswith("TORCHCANARY")
    }

    def python(name: str, value: Any) -> None:
        found[name] = {"value": value, "how": "python"}

    python("num_threads", torch.get_num_threads())
    python("num_interop_threads", torch.get_num_interop_threads())
    python("float32_matmul_precision", torch.get_float32_matmul_precision())
    python("deterministic_algorithms", torch.are_deterministic_algorithms_enabled())
    for name, (path, attribute) in _BACKEND_FLAGS.items():
        try:
            python(name, getattr(_object(path), attribute))
        except (AttributeError, ImportError):
            continue
    # Read at start-up from ATEN_CPU_CAPABILITY: set back through that variable.
    found["cpu_capability"] = {
        "value": torch.backends.cpu.get_cpu_capability(),
        "how": "env",
        "variable": "ATEN_CPU_CAPABILITY",
    }
    found["threading_layer"] = {
        "value": _threading_layer(torch.__config__.parallel_info()),
        "how": "fixed",
    }
    return found


def apply_environment(env: dict[str, str | None]) -> None:
    """Set (or, for None, unset) environment variables; before torch is imported."""
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def apply_python(settings: dict[str, Any]) -> None:
    """Set python-level settings (names as :func:`snapshot` gives them) to ``settings``."""
    import torch

    for name, value in settings.items():
        if name == "num_threads":
            torch.set_num_threads(int(value))
        elif name == "num_interop_threads":
            torch.set_num_interop_threads(int(value))
        elif name == "float32_matmul_precision":
            torch.set_float32_matmul_precision(str(value))
        elif name == "deterministic_algorithms":
            torch.use_deterministic_algorithms(bool(value))
        elif name in _BACKEND_FLAGS:
            path, attribute = _BACKEND_FLAGS[name]
            setattr(_object(path), attribute, value)
        elif name.startswith("config:"):  # a torch config value: config:torch._inductor.config.x
            _set_config(name[len("config:") :], value)
        else:
            raise ValueError(f"no way to set {name!r} back")


def _set_config(path: str, value: Any) -> None:
    """Set a dotted config name, nested keys included (``torch._inductor.config.triton.x``):
    the longest importable prefix is the module, the rest attributes."""
    import importlib

    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:-1]:
            owner = getattr(owner, attribute)
        setattr(owner, parts[-1], value)
        return
    raise ValueError(f"no module in {path!r}")
