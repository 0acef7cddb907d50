"""Collects what an environment is, from inside it: the facts a skeptic compares first."""

from __future__ import annotations

import os
import platform
import re
import sys
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _config_value(config: str, pattern: str) -> str | None:
    match = re.search(pattern, config)
    return match.group(1).strip() if match else None


def collect() -> dict[str, Any]:
    import torch

    config = torch.__config__.show()
    version = torch.__version__
    facts: dict[str, Any] = {
        "torch_version": version,
        "torch_base_version": version.split("+")[0],
        "torch_build_variant": version.split("+")[1] if "+" in version else "default",
        "torch_git_version": getattr(torch.version, "git_version", None),
        "cuda_version": torch.version.cuda,
        "hip_version": getattr(torch.version, "hip", None),
        "cuda_arch_list": torch.cuda.get_arch_list()
        if hasattr(torch.cuda, "get_arch_list")
        else [],
        "torch_config": config,
        "blas": _config_value(config, r"BLAS_INFO=([^,\n]+)"),
        "lapack": _config_value(config, r"LAPACK_INFO=([^,\n]+)"),
        "cpu_capability": _config_value(config, r"CPU capability usage: (\S+)"),
        "compiler": _config_value(config, r"- (GCC [^\n]+|clang [^\n]+)"),
        "mkldnn_version": _config_value(config, r"Intel\(R\) MKL-DNN (v[^\s(]+)")
        or _config_value(config, r"oneDNN[^\n]*?(v[\d.]+)"),
        "openmp": _config_value(config, r"OpenMP (\d+)"),
        "torch_parallel_info": torch.__config__.parallel_info(),
        "torch_num_threads": torch.get_num_threads(),
        "python_version": platform.python_version(),
        "python_executable": sys.executable,
        "os": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "gpus": [],
    }
    try:
        import numpy

        facts["numpy_version"] = numpy.__version__
    except ImportError:
        facts["numpy_version"] = None
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            facts["gpus"].append(
                {
                    "name": props.name,
                    "memory_bytes": props.total_memory,
                    "capability": f"{props.major}.{props.minor}",
                }
            )
    return facts
