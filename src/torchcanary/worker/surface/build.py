"""Build facts beyond the manifest: bundled and required library versions."""

from __future__ import annotations

import re
from typing import Any


def build_facts(torch: Any) -> dict[str, Any]:
    """Library versions bundled with or required by the build, beyond the manifest."""
    facts: dict[str, Any] = {}
    show = torch.__config__.show()
    settings = re.search(r"Build settings:(.*)", show, re.S)
    if settings:
        for item in re.split(r",\s*(?=[A-Z_]+=)", settings.group(1).strip()):
            key, _, value = item.partition("=")
            if key.strip() in ("CUDA_VERSION", "CUDNN_VERSION", "CXX_COMPILER"):
                facts[f"build.{key.strip()}"] = value.strip()
    for label, getter in (
        ("cudnn", lambda: torch.backends.cudnn.version()),
        ("nccl", lambda: ".".join(map(str, torch.cuda.nccl.version()))),
        ("cusparselt", lambda: torch.backends.cusparselt.version()),
    ):
        try:
            value = getter()
        except Exception:
            continue
        if value is not None:
            facts[f"library.{label}"] = str(value)
    facts.update(_required_distributions())
    return dict(sorted(facts.items()))


def _required_distributions() -> dict[str, str]:
    """Installed versions of what the torch distribution requires (CUDA libraries, triton)."""
    from importlib import metadata

    try:
        requirements = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return {}
    found = {}
    for requirement in requirements:
        if "extra ==" in requirement:
            continue
        name = re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0]
        try:
            found[f"requires.{name.lower()}"] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found
