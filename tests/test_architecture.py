"""The shape of the code, checked: two sides, named entry points, no cycles, no dead code.

Imports are read from the source with ``ast`` (imports under ``if TYPE_CHECKING:`` do not
count: they never run), so these tests need no torch and see every module, not only the
ones a test happens to import.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from torchcanary.bench.specs import ONESHOT_KINDS
from torchcanary.worker import calls

SRC = Path(__file__).parents[1] / "src"
PACKAGE = SRC / "torchcanary"
REPO = SRC.parent
# Functions that a framework calls by their name, never our own code.
CALLED_BY_NAME = ("pytest_", "visit_")


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@cache
def tree(name: str) -> ast.Module:
    return ast.parse(modules()[name].read_text())


def _runtime_nodes(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node that can run: the bodies of ``if TYPE_CHECKING:`` are left out."""
    for node in body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _runtime_nodes(node.orelse)
            continue
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                yield from _runtime_nodes([child])
            else:
                yield from ast.walk(child)


@cache
def imports(name: str, top_level_only: bool = False) -> frozenset[str]:
    """The modules ``name`` imports (at module level only, or anywhere)."""
    body = tree(name).body
    nodes = body if top_level_only else list(_runtime_nodes(body))
    package = name if modules()[name].name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(max(node.level - 1, 0)):
                base = base.rpartition(".")[0]
            if node.level:
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in modules()}
    return frozenset(found)


def _own(module: str) -> str | None:
    """The torchcanary module that an import of ``module`` loads (a name in it, or itself)."""
    while module not in modules() and "." in module:
        module = module.rpartition(".")[0]
    return module if module in modules() else None


def _with_parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts) + 1)]


@cache
def in_environment() -> frozenset[str]:
    """Everything the in-environment side reaches from its named entry points."""
    todo = [m for root in calls.in_environment_roots() for m in _with_parents(root)]
    todo += [m for m in modules() if m.startswith("torchcanary.probes.")]  # found, not named
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        if module in seen or module not in modules():
            continue
        seen.add(module)
        for imported in imports(module):
            own = _own(imported) if imported.startswith("torchcanary") else None
            if own:
                todo += _with_parents(own)
    return frozenset(seen)


def _string_literals(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def test_every_worker_entry_point_names_a_function_that_exists() -> None:
    for call in calls.WORKER_CALLS:
        module, _, function = call.partition(":")
        assert module in modules(), call
        defined = {n.name for n in tree(module).body if isinstance(n, ast.FunctionDef)}
        assert function in defined, call
    for module in (*calls.MODULE_MAINS, calls.STACK_PYTEST_PLUGIN):
        assert module in modules(), module
    assert tuple(calls.BENCH_ONESHOT) == ONESHOT_KINDS


def test_worker_entry_points_are_spelled_only_in_the_one_table() -> None:
    named = {*calls.MODULE_MAINS, calls.STACK_PYTEST_PLUGIN}
    spelled = []
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE).as_posix()
        if where == "worker/calls.py":
            continue
        for line, text in _string_literals(path):
            if text == _module_name(path):
                continue  # a module may name itself (its own argparse prog, its own re-exec)
            if text in named or (text.startswith("torchcanary.") and ":" in text):
                spelled.append(f"{where}:{line}: {text}")
    assert spelled == [], "name these in torchcanary/worker/calls.py"


def test_in_environment_side_imports_only_the_stdlib_and_torch() -> None:
    # numpy is read only where present (the manifest records its version)
    allowed = {*sys.stdlib_module_names, "torch", "numpy", "torchcanary", "__future__"}
    strays = {}
    for module in in_environment():
        others = {i.split(".")[0] for i in imports(module)} - allowed
        if module == calls.STACK_PYTEST_PLUGIN:
            others -= {"pytest"}  # it is loaded by the user's own pytest
        if others:
            strays[module] = sorted(others)
    assert strays == {}
    assert "torchcanary.worker.run_probe" in in_environment()
    assert "torchcanary.cli" not in in_environment()


def test_orchestrator_side_never_imports_torch() -> None:
    """Import every module the in-environment side does not need, and list the probes,
    as ``torchcanary probes`` does: torch must not be loaded by any of it."""
    orchestrator = sorted(set(modules()) - in_environment() - {"torchcanary.cli"})
    script = (
        "import importlib, sys\n"
        f"for name in {orchestrator!r}:\n"
        "    importlib.import_module(name)\n"
        "import torchcanary.cli\n"
        "from torchcanary.probe_registry import discover\n"
        "from torchcanary.sections import registered\n"
        "discover(); registered()\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_packages_import_each_other_without_cycles() -> None:
    edges: dict[str, set[str]] = {}
    for module in modules():
        for imported in imports(module):
            own = _own(imported) if imported.startswith("torchcanary.") else None
            if own and _package_of(own) != _package_of(module):
                edges.setdefault(_package_of(module), set()).add(_package_of(own))

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo += edges.get(node, ())
        return False

    cycles = sorted(
        f"{a} <-> {b}" for a, targets in edges.items() for b in targets if a < b and reaches(b, a)
    )
    assert cycles == []


@pytest.mark.parametrize("tolerated", [CALLED_BY_NAME])
def test_every_function_and_class_is_used_somewhere(tolerated: tuple[str, ...]) -> None:
    texts = {
        p: p.read_text()
        for p in [
            *SRC.rglob("*.py"),
            *REPO.joinpath("tests").rglob("*.py"),
            *REPO.joinpath("benchmarks").rglob("*.py"),
            REPO / "pyproject.toml",
        ]
    }
    unused = []
    for name, path in modules().items():
        lines = texts[path].splitlines()
        nodes = [n for n in tree(name).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        nodes += [
            m
            for c in nodes
            if isinstance(c, ast.ClassDef)
            for m in c.body
            if isinstance(m, ast.FunctionDef) and not m.name.startswith("_")
        ]
        for node in nodes:
            if node.name.startswith(("__", *tolerated)):
                continue
            word = re.compile(rf"\b{node.name}\b")
            rest = "\n".join(lines[: node.lineno - 1] + lines[node.end_lineno or 0 :])
            uses = len(word.findall(rest))
            uses += sum(len(word.findall(text)) for other, text in texts.items() if other != path)
            if uses == 0:
                unused.append(f"{name}.{node.name}")
    assert unused == []
