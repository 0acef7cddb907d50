"""The shape of the code, checked: two sides in their places, named entry points, no cycles
(counting the modules named in strings), no dead code.

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

from torchcanary.worker import calls
from torchcanary.worker.bench.specs import ONESHOT_KINDS

SRC = Path(__file__).parents[1] / "src"
PACKAGE = SRC / "torchcanary"
REPO = SRC.parent
# Functions that a framework calls by their name, never our own code.
CALLED_BY_NAME = ("pytest_", "visit_")
# Where the in-environment side lives: the worker (``worker/<section>/`` is a section's
# in-environment half), the probes and the packs' probes. Nothing else runs inside a target
# environment but the few modules both sides import, named here with why.
IN_ENVIRONMENT_PLACES = ("torchcanary.worker", "torchcanary.probes", "torchcanary.packs.builtin")
SHARED = {
    "torchcanary": "the package itself (its version)",
    "torchcanary.packs": "the package above packs/builtin (a docstring)",
    "torchcanary.probe": "what a probe is: the worker runs one, the orchestrator lists them",
    "torchcanary.probe_result": "the outcome a probe returns, as the orchestrator stores it",
    "torchcanary.results": "the records' shared schema keys and the environment manifest",
    "torchcanary.numerics": "record(), called by the user's own tests in a stack run",
    "torchcanary.drill": "report_step and in_place_drill, called by the user's own job",
}


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
    roots = set(calls.in_environment_roots())
    todo = [m for root in roots for m in _with_parents(root)]
    found = ("torchcanary.probes.", "torchcanary.packs.builtin.")  # found, not named
    todo += [m for m in modules() if m.startswith(found)]
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


def in_place(module: str) -> bool:
    """Whether ``module`` is where in-environment code belongs."""
    return module in SHARED or any(
        module == place or module.startswith(f"{place}.") for place in IN_ENVIRONMENT_PLACES
    )


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


def _section_parts_named(path: Path) -> set[str]:
    """The ``"module:name"`` targets of a section's ``FromModule`` parts in ``path``: the
    orchestrator's own modules, imported on first use, not ways into a worker."""
    return {
        str(node.args[0].value)
        for node in ast.walk(ast.parse(path.read_text()))
        if _called(node, ("FromModule",)) and isinstance(node.args[0], ast.Constant)
    }


def test_worker_entry_points_are_spelled_only_in_the_one_table() -> None:
    named = {*calls.MODULE_MAINS, calls.STACK_PYTEST_PLUGIN}
    spelled = []
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE).as_posix()
        if where == "worker/calls.py":
            continue
        parts = _section_parts_named(path)
        for line, text in _string_literals(path):
            if text == _module_name(path) or text in parts:
                continue  # a module may name itself (its own argparse prog, its own re-exec)
            if text in named or (text.startswith("torchcanary.") and ":" in text):
                spelled.append(f"{where}:{line}: {text}")
    assert spelled == [], "name these in torchcanary/worker/calls.py"


def test_in_environment_side_lives_in_its_place() -> None:
    """Issue 29 item 4: what the entry points reach is under worker/, probes/, packs/builtin/
    or in ``SHARED``; a new in-environment module is visibly so by where it is."""
    strays = sorted(m for m in in_environment() if not in_place(m))
    assert strays == [], "move these under worker/ (or name them in SHARED, with why)"
    assert "torchcanary.worker.run_probe" in in_environment()
    assert "torchcanary.cli" not in in_environment()


def test_in_environment_side_imports_only_the_stdlib_and_torch() -> None:
    """All of the place is checked, reached from an entry point or not (a module not yet
    named anywhere must not be the one that drags the orchestrator in)."""
    # numpy is read only where present (the manifest records its version)
    allowed = {*sys.stdlib_module_names, "torch", "numpy", "torchcanary", "__future__"}
    strays = {}
    for module in in_environment() | {m for m in modules() if in_place(m)}:
        others = {i.split(".")[0] for i in imports(module)} - allowed
        if module == calls.STACK_PYTEST_PLUGIN:
            others -= {"pytest"}  # it is loaded by the user's own pytest
        ours = {_own(i) for i in imports(module) if i.startswith("torchcanary.")}
        others |= {str(own) for own in ours if not own or not in_place(own)}
        if others:
            strays[module] = sorted(others)
    assert strays == {}


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


_NAMED = re.compile(r"^torchcanary(?:\.\w+)+")


@cache
def named(module: str) -> frozenset[str]:
    """The modules ``module`` names in its strings (``"torchcanary.worker.bench.timing"``,
    ``"module:function"``): loaded by that name, so a dependency as real as an import.
    Docstrings are prose, not names, and do not count."""
    prose = {
        id(node.body[0].value)
        for node in ast.walk(tree(module))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = set()
    for node in _runtime_nodes(tree(module).body):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            match = _NAMED.match(node.value)
            if match and match.group(0) in modules():
                found.add(match.group(0))
    return frozenset(found)


SECTION_PACKAGES = ("claims", "bench", "drill", "stack", "diff", "explain", "calls")
# Not the core: the sections themselves and the in-environment side (which has a part
# per section, ``worker/<section>/``).
NOT_CORE = (*SECTION_PACKAGES, "worker", "probes", "packs")


def _is_core(module: str) -> bool:
    parts = module.split(".")
    return len(parts) > 1 and parts[1] not in NOT_CORE


def _section_names_in(module: str) -> list[str]:
    """Where ``module`` names a section: a string that is a section's name, or an import
    (under ``TYPE_CHECKING`` too) from a section's package."""
    found = []
    for node in ast.walk(tree(module)):
        if isinstance(node, ast.Constant) and node.value in SECTION_PACKAGES:
            found.append(f"line {node.lineno}: {node.value!r}")
        imported = []
        if isinstance(node, ast.Import):
            imported = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            imported = [node.module or ""]
            if node.module == "torchcanary":
                imported = [f"torchcanary.{alias.name}" for alias in node.names]
        found += [
            f"line {node.lineno}: imports {name}"
            for name in imported
            if name.split(".")[0] == "torchcanary"
            and len(name.split(".")) > 1
            and name.split(".")[1] in SECTION_PACKAGES
        ]
    return found


def test_the_core_names_no_section() -> None:
    """Outside the sections' packages and the in-environment side, a section is reached
    through the registry and the contract, never by its name."""
    named_here = {
        module: found
        for module in modules()
        if _is_core(module)
        for found in [_section_names_in(module)]
        if found
    }
    assert named_here == {}, "reach the section through the contract (sections.py)"


def _entry_points(group: str) -> str:
    text = (REPO / "pyproject.toml").read_text()
    return text.split(f'[project.entry-points."{group}"]', 1)[1].split("\n[", 1)[0]


def _section_packages() -> tuple[str, ...]:
    """Every section's package, as the ``torchcanary.sections`` entry points name them."""
    values = re.findall(r'^\w+ = "([\w.:]+)"', _entry_points("torchcanary.sections"), re.M)
    return tuple(sorted({value.split(":")[0].rpartition(".")[0] for value in values}))


def _imports_with_lines(module: str) -> Iterator[tuple[int, str]]:
    """(line, module) of every import in ``module``, under ``TYPE_CHECKING`` and inside
    functions too; ``from package import name`` also names ``package.name``."""
    package = module if modules()[module].name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree(module)):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(max(node.level - 1, 0)):
                base = base.rpartition(".")[0]
            if node.level:
                imported = f"{base}.{node.module}" if node.module else base
            else:
                imported = node.module or ""
            yield node.lineno, imported
            yield from ((node.lineno, f"{imported}.{alias.name}") for alias in node.names)


def test_no_section_package_imports_another() -> None:
    """Sections are siblings: each uses the shared layer and the contract, never another
    section's package (a function-level or ``TYPE_CHECKING`` import counts too)."""
    sections = _section_packages()
    assert {"torchcanary.stack", "torchcanary.calls", "torchcanary.bench"} <= set(sections)
    found: dict[tuple[str, str], str] = {}
    for module in modules():
        own = next((s for s in sections if module == s or module.startswith(f"{s}.")), None)
        if own is None:
            continue
        for line, imported in _imports_with_lines(module):
            other = next(
                (s for s in sections if imported == s or imported.startswith(f"{s}.")), None
            )
            if other is not None and other != own:
                found.setdefault((module, _own(imported) or imported), f"line {line}")
    offending = {
        f"{module} imports {imported} ({line})" for (module, imported), line in found.items()
    }
    assert offending == set(), (
        "move what both need to the shared layer, or take it through the contract"
    )


def test_packages_import_each_other_without_cycles() -> None:
    """Counting imports and modules named in strings (the way in to the worker side)."""
    edges: dict[str, set[str]] = {}
    for module in modules():
        for imported in imports(module) | named(module):
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


# Where code outside ``src`` and ``benchmarks`` is the only user, on purpose (reviewed):
# the name, and why it ships.
USED_OUTSIDE = {
    "torchcanary.worker.calls.in_environment_roots": "the entry points of the worker side, "
    "beside the table they are read from; this test checks that side from them",
    "torchcanary.fleet.slurm_executor.connect": "fleet/connect.py calls it on the module "
    "it imports by name, so that only --fleet slurm imports the Slurm executor",
}
_DOTTED_NAME = re.compile(r"\b(torchcanary(?:\.\w+)+):(\w+)")


def _resolve_from(module: str, node: ast.ImportFrom) -> str:
    """The absolute module of a ``from ... import`` in ``module``."""
    if not node.level:
        return node.module or ""
    base = module if modules()[module].name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{node.module}" if node.module else base


def _dotted(node: ast.AST) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _references(path: Path, module: str | None) -> tuple[set[tuple[str, str]], set[str]]:
    """What the code of ``path`` refers to: (module, name) pairs of torchcanary definitions
    (through imports, module attributes, its own names and ``"module:function"`` strings),
    and every attribute name it reads (a method's callers name only the method)."""
    names: set[tuple[str, str]] = set()
    attributes: set[str] = set()
    bound: dict[str, str] = {}  # local name -> the torchcanary module it is
    syntax = ast.parse(path.read_text())
    for node in ast.walk(syntax):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            origin = _resolve_from(module, node) if module else (node.module or "")
            for alias in node.names:
                if f"{origin}.{alias.name}" in modules():
                    bound[alias.asname or alias.name] = f"{origin}.{alias.name}"
                else:
                    names.add((origin, alias.name))
    for node in ast.walk(syntax):
        if isinstance(node, ast.Attribute):
            attributes.add(node.attr)
            chain = _dotted(node)
            if chain and chain[0] in bound:
                dotted = ".".join([bound[chain[0]], *chain[1:]])
                head, _, tail = dotted.rpartition(".")
                names.add((head, tail))
        elif isinstance(node, ast.Name) and module:
            names.add((module, node.id))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names |= set(_DOTTED_NAME.findall(node.value))
        elif isinstance(node, ast.Call):
            # A name handed over as a string is looked up by it: getattr(x, "name"), an
            # actor's group.call(node, "method"), a worker asked to run "function".
            attributes |= {
                str(arg.value)
                for arg in node.args
                if isinstance(arg, ast.Constant) and str(arg.value).isidentifier()
            }
        elif isinstance(node, (ast.Tuple, ast.List)):  # a table of names looked up by them
            attributes |= {
                str(item.value)
                for item in node.elts
                if isinstance(item, ast.Constant) and str(item.value).isidentifier()
            }
        elif isinstance(node, ast.JoinedStr) and module:  # f"{__name__}:function"
            text = "".join(
                "__name__" if isinstance(v, ast.FormattedValue) else str(getattr(v, "value", ""))
                for v in node.values
            )
            if text.startswith("__name__:"):
                names.add((module, text.removeprefix("__name__:")))
    return names, attributes


def _called(node: ast.AST, functions: tuple[str, ...]) -> bool:
    if not isinstance(node, ast.Call):
        return False
    callee = node.func
    name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", None)
    return name in functions


def _reached_by_name() -> set[str]:
    """The worker modules ``worker/calls.py`` names: their functions are called as
    attributes of a module object loaded by name."""
    return {
        value
        for _line, value in _string_literals(modules()["torchcanary.worker.calls"])
        if value in modules()
    }


def _definitions(module: str) -> Iterator[tuple[str, str | None, ast.AST]]:
    """(name, its class or None, node) of every function and class, public methods too."""
    for node in tree(module).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            yield node.name, None, node
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef) and not member.name.startswith("_"):
                    yield member.name, node.name, member


@pytest.mark.parametrize("tolerated", [CALLED_BY_NAME])
def test_every_function_and_class_is_used_by_the_product(tolerated: tuple[str, ...]) -> None:
    """Issue 29 item 9: a definition counts as used only where code of the product or its
    benchmarks refers to it (read with ``ast``: comments, docstrings and tests do not
    count), or where ``USED_OUTSIDE`` says who else uses it and why."""
    names: set[tuple[str, str]] = set()
    attributes: set[str] = set()
    users = [(p, m) for m, p in modules().items()]
    users += [(p, None) for p in REPO.joinpath("benchmarks").rglob("*.py")]
    for path, module in users:
        found, read = _references(path, module)
        names |= found
        attributes |= read
    names |= set(_DOTTED_NAME.findall((REPO / "pyproject.toml").read_text()))
    by_name = _reached_by_name()
    unused = []
    for module in modules():
        for name, owner, _node in _definitions(module):
            if name.startswith(("__", *tolerated)):
                continue
            if owner or module in by_name:
                used = name in attributes or (module, name) in names
            else:
                used = (module, name) in names
            qualified = f"{module}.{owner}.{name}" if owner else f"{module}.{name}"
            if not used and qualified not in USED_OUTSIDE:
                unused.append(qualified)
    assert unused == []
    stale = [name for name in USED_OUTSIDE if name.rpartition(".")[0] not in modules()]
    assert stale == []
