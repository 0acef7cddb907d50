"""One pass over the installed package's ``.py`` files: which modules are config modules,
and which environment variables the Python code names.

Reading sources (rather than importing every module) keeps discovery cheap and safe.
"""

from __future__ import annotations

import re
from pathlib import Path

# Modules that use torch's config machinery say so in their source; these never ship to users.
_CONFIG_MARKER = "install_config_module("
_SKIPPED_SOURCE_DIRS = ("testing", "_vendor", "include", "share", "lib", "bin")
_ENV_VAR = re.compile(
    r"""["']((?:PY)?TORCH[A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]|NCCL_[A-Z0-9_]*[A-Z0-9])["']"""
)


def module_name(torch_dir: Path, path: Path) -> str:
    parts = path.relative_to(torch_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def scan_sources(torch_dir: Path) -> tuple[list[str], list[str], dict[str, str]]:
    """(config modules on torch's machinery, plain ``config.py`` modules, env var -> file)."""
    machinery: list[str] = []
    plain: list[str] = []
    env_vars: dict[str, str] = {}
    for path in sorted(torch_dir.rglob("*.py")):
        relative = path.relative_to(torch_dir)
        if relative.parts[0] in _SKIPPED_SOURCE_DIRS:
            continue
        try:
            source = path.read_text(errors="replace")
        except OSError:
            continue
        for match in _ENV_VAR.finditer(source):
            env_vars.setdefault(match.group(1), str(relative))
        name = module_name(torch_dir, path)
        if _CONFIG_MARKER in source and not name.endswith("_config_module"):
            machinery.append(name)
        elif path.name == "config.py":
            plain.append(name)
    return machinery, plain, dict(sorted(env_vars.items()))
