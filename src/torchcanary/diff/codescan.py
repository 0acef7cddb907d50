"""Where the user's code touches a changed name: a static scan with ``ast``, never an import.

Names are resolved through the file's imports (``import torch.nn.functional as F``,
``from torch._inductor import config as inductor_config``, ``from torch.linalg import
polar``), so a hit is a real reference, not a word match: comments and string literals never
hit. Environment variables are the exception that proves the rule: they are strings, so they
hit only as the key of ``os.environ[...]``, ``os.environ.get/setdefault/pop(...)``,
``os.getenv(...)`` or ``os.putenv(...)``. Config keys also hit through ``<config>.patch(key=...)``
and ``patch({"key": ...})``. A method called on a tensor value (``x.qr()``) cannot be told
apart from any other object's method without types, so Tensor methods hit only when spelled
``torch.Tensor.name``.

Each hit says how the name is used: ``import``, ``call``, ``read`` or ``set``; a changed
default that the code reads but never sets is a default the code relies on.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_SKIPPED_DIRS = {
    ".git",
    ".hg",
    ".tox",
    ".nox",
    ".venv",
    "venv",
    "__pycache__",
    "node_modules",
    "site-packages",
    "build",
    "dist",
}
_ENV_READERS = {"os.getenv": "read", "os.environ.get": "read", "os.environ.pop": "set"}
_ENV_WRITERS = {"os.environ.setdefault": "set", "os.putenv": "set"}
_MAX_FILE_BYTES = 5 * 1024 * 1024


@dataclass(frozen=True)
class CodeHit:
    symbol: str
    path: str
    line: int
    use: str  # import, call, read, set
    code: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ScanResult:
    root: str
    files_scanned: int
    hits: tuple[CodeHit, ...]
    errors: tuple[tuple[str, str], ...] = field(default=())  # (path, why it was not scanned)

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "files_scanned": self.files_scanned,
            "hits": [hit.to_json() for hit in self.hits],
            "errors": [{"path": path, "error": error} for path, error in self.errors],
        }


@dataclass(frozen=True)
class ChangedNames:
    """What to look for: dotted names (functions, classes, config keys), env var names, and
    the config modules whose ``patch`` keywords name keys."""

    symbols: frozenset[str]
    env_vars: frozenset[str] = frozenset()
    config_modules: frozenset[str] = frozenset()


def python_files(root: Path) -> Iterator[Path]:
    """Every ``.py`` file under ``root``; links to directories are not followed, so a
    symlink loop cannot hang the walk."""
    if root.is_file():
        yield root
        return
    for directory, subdirs, files in os.walk(root, followlinks=False):
        subdirs[:] = sorted(d for d in subdirs if d not in _SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py"):
                yield Path(directory) / name


def _chain(node: ast.AST) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> the dotted name it stands for, from every import in the file."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    aliases[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


class _FileScanner(ast.NodeVisitor):
    def __init__(self, names: ChangedNames, path: str, lines: list[str], tree: ast.AST) -> None:
        self.names = names
        self.path = path
        self.lines = lines
        self.aliases = _aliases(tree)
        self.hits: list[CodeHit] = []

    def _hit(self, symbol: str, node: ast.AST, use: str) -> None:
        line = getattr(node, "lineno", 0)
        code = self.lines[line - 1].strip()[:200] if 0 < line <= len(self.lines) else ""
        self.hits.append(CodeHit(symbol, self.path, line, use, code))

    def _resolve(self, node: ast.AST) -> list[str] | None:
        parts = _chain(node)
        if not parts or parts[0] not in self.aliases:
            return None
        return [*self.aliases[parts[0]].split("."), *parts[1:]]

    def _match(self, full: list[str]) -> tuple[str, bool] | None:
        """The longest changed name that ``full`` starts with, and whether it is all of it."""
        for size in range(len(full), 0, -1):
            candidate = ".".join(full[:size])
            if candidate in self.names.symbols:
                return candidate, size == len(full)
        return None

    def _reference(self, node: ast.AST, use: str) -> bool:
        """Record a hit for a dotted reference; False when ``node`` is not one."""
        full = self._resolve(node)
        if full is None:
            return False
        found = self._match(full)
        if found is not None:
            symbol, whole = found
            self._hit(symbol, node, use if whole else "read")
        return True

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name in self.names.symbols:
                self._hit(alias.name, node, "import")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not node.module or node.level:
            return
        for alias in node.names:
            full = f"{node.module}.{alias.name}"
            if full in self.names.symbols:
                self._hit(full, node, "import")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        use = "read" if isinstance(node.ctx, ast.Load) else "set"
        if not self._reference(node, use):
            self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        self._reference(node, "read" if isinstance(node.ctx, ast.Load) else "set")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self._dotted(node.value) == "os.environ":
            key = node.slice
            if isinstance(key, ast.Constant) and key.value in self.names.env_vars:
                self._hit(str(key.value), node, "read" if isinstance(node.ctx, ast.Load) else "set")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        callee = self._dotted(node.func)
        if callee is not None:
            self._env_call(callee, node)
            self._config_patch(callee, node)
        if not self._reference(node.func, "call"):
            self.visit(node.func)
        for argument in (*node.args, *node.keywords):
            self.visit(argument)

    def _dotted(self, node: ast.AST) -> str | None:
        full = self._resolve(node)
        return ".".join(full) if full else None

    def _env_call(self, callee: str, node: ast.Call) -> None:
        use = _ENV_READERS.get(callee) or _ENV_WRITERS.get(callee)
        if use and node.args:
            key = node.args[0]
            if isinstance(key, ast.Constant) and key.value in self.names.env_vars:
                self._hit(str(key.value), node, use)

    def _config_patch(self, callee: str, node: ast.Call) -> None:
        module, _, method = callee.rpartition(".")
        if method != "patch" or module not in self.names.config_modules:
            return
        keys = [k.arg for k in node.keywords if k.arg]
        if node.args:
            first = node.args[0]
            if isinstance(first, ast.Dict):
                keys += [
                    k.value
                    for k in first.keys
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)
                ]
            elif isinstance(first, ast.Constant) and isinstance(first.value, str):
                keys.append(first.value)
        for key in keys:
            symbol = f"{module}.{key}"
            if symbol in self.names.symbols:
                self._hit(symbol, node, "set")


def scan_file(path: Path, names: ChangedNames, shown_as: str) -> list[CodeHit]:
    """Hits in one file; raises SyntaxError, ValueError or OSError when it cannot be read."""
    if path.stat().st_size > _MAX_FILE_BYTES:
        raise ValueError(f"larger than {_MAX_FILE_BYTES // (1024 * 1024)} MiB")
    source = path.read_text(encoding="utf-8", errors="replace")
    tree = ast.parse(source, filename=str(path))
    scanner = _FileScanner(names, shown_as, source.splitlines(), tree)
    scanner.visit(tree)
    return sorted(scanner.hits, key=lambda hit: (hit.line, hit.symbol, hit.use))


def scan_code(root: Path, names: ChangedNames) -> ScanResult:
    """Every hit under ``root``; a file that cannot be parsed is reported and skipped."""
    base = root if root.is_dir() else root.parent
    hits: list[CodeHit] = []
    errors: list[tuple[str, str]] = []
    count = 0
    for path in python_files(root):
        shown_as = str(path.relative_to(base))
        try:
            hits += scan_file(path, names, shown_as)
            count += 1
        except SyntaxError as exc:
            errors.append((shown_as, f"does not parse: line {exc.lineno}: {exc.msg}"))
        except (OSError, ValueError) as exc:
            errors.append((shown_as, f"cannot be read: {exc}"))
    return ScanResult(str(root), count, tuple(hits), tuple(errors))
