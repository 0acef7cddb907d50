"""Console scripts of a venv: which interpreter each one starts, and pointing them at their own.

pip and uv write the absolute path of the installing interpreter into every console script
(``#!/venv/bin/python``, or a ``/bin/sh`` trampoline when that path is too long or has a
space). A venv whose directory moved after its installs, or a copy of one, keeps scripts that
start an interpreter which is gone (the shell says "required file not found") or that belongs
to another venv. ``stale_scripts`` finds them; ``relocate`` rewrites their first lines, one
file at a time through a rename, so a process running a script meanwhile reads the old file
or the new one, never half of one, and a hard-linked copy never writes through to its source.
The activation scripts (``bin/activate`` and its csh, fish and PowerShell siblings) name the
venv's directory too, so someone who sources one to debug a worker gets the venv they meant.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)*)?$")
# distlib's and uv's long-path form: the shell runs the line as `exec "<python>" "$0" "$@"`.
_TRAMPOLINE = re.compile(r"""^'''exec' (["'])(?P<python>[^"']+)\1 "\$0" "\$@"$""")
_TRAMPOLINE_END = "' '''"
_SHEBANG_LIMIT = 127  # the kernel's limit on older Linux; distlib switches form above it
_MAX_SCRIPT_BYTES = 1 << 20
_ACTIVATE_NAMES = ("activate", "activate.csh", "activate.fish", "Activate.ps1")
_ACTIVATE_HOME = re.compile(r'^VIRTUAL_ENV=(["\'])(?P<home>[^"\']+)\1\s*$', re.MULTILINE)


@dataclass(frozen=True)
class ConsoleScript:
    """A script in ``bin/`` that starts a Python interpreter named by absolute path."""

    path: Path
    interpreter: str
    body: bytes  # everything after the lines that name the interpreter

    def runs_under(self, bin_dir: Path) -> bool:
        """Whether the interpreter it starts exists and lies in ``bin_dir``."""
        interpreter = Path(self.interpreter)
        try:
            return interpreter.exists() and os.path.samefile(interpreter.parent, bin_dir)
        except OSError:
            return False


def read_script(path: Path) -> ConsoleScript | None:
    """The script at ``path`` if it starts a Python by absolute path; None for anything else."""
    if path.is_symlink() or not path.is_file() or path.stat().st_size > _MAX_SCRIPT_BYTES:
        return None
    data = path.read_bytes()
    if not data.startswith(b"#!"):
        return None  # a binary, or a file that is not a script
    lines = data.split(b"\n", 3)
    try:
        first = lines[0][2:].decode().strip()
        second = lines[1].decode().strip() if len(lines) > 1 else ""
        third = lines[2].decode().strip() if len(lines) > 2 else ""
    except UnicodeDecodeError:
        return None
    words = first.split()
    if not words:
        return None
    if _PYTHON_NAME.match(os.path.basename(words[0])) and os.path.isabs(words[0]):
        return ConsoleScript(path, words[0], data.split(b"\n", 1)[1] if b"\n" in data else b"")
    trampoline = _TRAMPOLINE.match(second)
    if words == ["/bin/sh"] and trampoline and third == _TRAMPOLINE_END:
        python = trampoline.group("python")
        if os.path.isabs(python) and _PYTHON_NAME.match(os.path.basename(python)):
            return ConsoleScript(path, python, lines[3] if len(lines) > 3 else b"")
    return None  # `#!/usr/bin/env python`, shell scripts, relocatable uv scripts


def header(python: str) -> bytes:
    """The first line(s) of a script that runs under ``python``, as pip would write them."""
    if len(python) + 2 <= _SHEBANG_LIMIT and " " not in python:
        return f"#!{python}\n".encode()
    return f'#!/bin/sh\n\'\'\'exec\' "{python}" "$0" "$@"\n{_TRAMPOLINE_END}\n'.encode()


def console_scripts(bin_dir: Path) -> list[ConsoleScript]:
    """Every Python console script in ``bin_dir``, by name."""
    if not bin_dir.is_dir():
        return []
    found = (read_script(path) for path in sorted(bin_dir.iterdir()))
    return [script for script in found if script is not None]


def stale_scripts(venv: Path) -> list[ConsoleScript]:
    """Console scripts of ``venv`` that would not run under the venv's own interpreter."""
    bin_dir = venv / "bin"
    return [script for script in console_scripts(bin_dir) if not script.runs_under(bin_dir)]


def own_interpreter(venv: Path, interpreter: str) -> Path:
    """The venv's interpreter of the same name (python3.11 stays python3.11), else python."""
    same_name = venv / "bin" / os.path.basename(interpreter)
    return same_name if same_name.exists() else venv / "bin" / "python"


def write_atomically(path: Path, data: bytes, mode: int) -> None:
    """Replace ``path`` by a new file: readers see old or new, hard links are left alone."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_bytes(data)
    os.chmod(partial, mode)
    os.replace(partial, path)


def activation_home(venv: Path) -> str | None:
    """The directory ``bin/activate`` would make the active venv (None without one)."""
    activate = venv / "bin" / "activate"
    found = _ACTIVATE_HOME.search(activate.read_text()) if activate.is_file() else None
    return found.group("home") if found else None


def relocate(venv: Path) -> list[str]:
    """Point every stale console and activation script of ``venv`` at it; the names fixed."""
    fixed: list[str] = []
    for script in stale_scripts(venv):
        python = own_interpreter(venv, script.interpreter)
        mode = script.path.stat().st_mode & 0o7777
        write_atomically(script.path, header(str(python)) + script.body, mode)
        fixed.append(script.path.name)
    old_home = activation_home(venv)
    if old_home is not None and old_home != str(venv):
        old_prompt, new_prompt = f"({Path(old_home).name})", f"({venv.name})"
        for name in _ACTIVATE_NAMES:
            path = venv / "bin" / name
            if path.is_file():
                text = path.read_text()
                moved = text.replace(old_home, str(venv)).replace(old_prompt, new_prompt)
                write_atomically(path, moved.encode(), path.stat().st_mode & 0o7777)
                fixed.append(name)
    return fixed
