"""Parses what a user means by an environment: requirements, an interpreter, or ``current``."""

from __future__ import annotations

import hashlib
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from torchcanary.errors import EnvSpecError

# A pip requirement as users type it: a name with optional extras, marker-free version clause,
# or a path/URL; we let pip judge the details and only reject what is clearly not one.
_REQUIREMENT = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?"
    r"((==|>=|<=|~=|!=|<|>|===)[A-Za-z0-9.*+!_-]+(,\s*(==|>=|<=|~=|!=|<|>)"
    r"[A-Za-z0-9.*+!_-]+)*)?|-e|--?[a-z-]+(=\S+)?|\S*[/.]\S*)$"
)


@dataclass(frozen=True)
class EnvSpec:
    """An environment the user asked for: ``requirements``, ``python`` or ``current``."""

    kind: str
    requirements: tuple[str, ...] = ()
    python: str = ""

    @property
    def text(self) -> str:
        if self.kind == "requirements":
            return " ".join(self.requirements)
        if self.kind == "python":
            return f"python:{self.python}"
        return "current"

    def cache_key(self, python_version: str) -> str:
        """Same requirements (in any order) and Python give the same venv."""
        canonical = "\n".join(sorted(self.requirements)) + f"\npython={python_version}"
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def parse_env_spec(text: str) -> EnvSpec:
    text = text.strip()
    if not text:
        raise EnvSpecError(
            "empty environment spec: give requirements such as "
            "'torch==2.13.0', 'python:/path/to/python' or 'current'"
        )
    if text == "current":
        return EnvSpec("current", python=sys.executable)
    if text.startswith("python:"):
        path = Path(text.removeprefix("python:")).expanduser()
        if not path.is_file():
            raise EnvSpecError(
                f"interpreter {path} does not exist: give the full path of a "
                "python executable, e.g. python:/opt/venv/bin/python"
            )
        return EnvSpec("python", python=str(path))
    try:
        parts = tuple(shlex.split(text))
    except ValueError as exc:
        raise EnvSpecError(f"cannot split environment spec {text!r}: {exc}") from exc
    bad = [p for p in parts if not _REQUIREMENT.match(p)]
    if bad:
        raise EnvSpecError(
            f"{bad[0]!r} in environment spec {text!r} is not a pip requirement; "
            "write e.g. 'torch==2.14.1 numpy'"
        )
    if not any(re.match(r"^torch($|[\[=<>~!])", p) for p in parts):
        raise EnvSpecError(
            f"environment spec {text!r} does not name torch; add a pin such as 'torch==2.14.1'"
        )
    return EnvSpec("requirements", requirements=parts)
