"""The shape of the source tree, in figures: what issue 29 asks to bring down.

Prints the number of modules and lines under ``src/torchcanary``, the modules over 400
and 500 lines, the functions over 60 lines, and the package cycles, counted two ways:
static imports only, and static imports plus modules named in strings
(``"torchcanary.worker.drill.builtin_job"``), which is how the worker side is reached.

    python benchmarks/house_figures.py [--top N]
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "src" / "torchcanary"
NAMED = re.compile(r"^torchcanary(?:\.\w+)+")


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring nodes (prose, not names a program loads)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _edges(trees: dict[str, ast.Module], by_name: bool) -> dict[str, set[str]]:
    """Package -> the packages it imports (statically, ``if TYPE_CHECKING:`` included;
    with ``by_name`` also the modules named in string literals other than docstrings)."""
    edges: dict[str, set[str]] = {}
    for module, tree in trees.items():
        targets: set[str] = set()
        prose = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.add(node.module)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif (
                by_name
                and isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in prose
            ):
                found = NAMED.match(node.value)
                if found and found.group(0) in trees:  # a module's name, not a label
                    targets.add(found.group(0))
        for target in targets:
            if target.startswith("torchcanary.") and _package(target) != _package(module):
                edges.setdefault(_package(module), set()).add(_package(target))
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[str]:
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

    return sorted(
        f"{a} <-> {b}" for a, targets in edges.items() for b in targets if a < b and reaches(b, a)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="largest modules to list")
    args = parser.parse_args()
    paths = sorted(PACKAGE.rglob("*.py"))
    sizes = {_module(p): len(p.read_text().splitlines()) for p in paths}
    trees = {_module(p): ast.parse(p.read_text()) for p in paths}
    long_functions = sorted(
        (
            (node.end_lineno or node.lineno) - node.lineno + 1,
            f"{module}.{node.name}",
        )
        for module, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (node.end_lineno or node.lineno) - node.lineno + 1 > 60
    )
    print(f"modules: {len(sizes)}  lines: {sum(sizes.values())}")
    print(f"modules over 400 lines: {sum(n > 400 for n in sizes.values())}")
    print(f"modules over 500 lines: {sum(n > 500 for n in sizes.values())}")
    for module, lines in sorted(sizes.items(), key=lambda item: -item[1])[: args.top]:
        print(f"  {lines:5d}  {module}")
    print(f"functions over 60 lines: {len(long_functions)}")
    for lines, name in reversed(long_functions):
        print(f"  {lines:5d}  {name}")
    for label, by_name in (("static imports", False), ("imports and names in strings", True)):
        cycles = _cycles(_edges(trees, by_name))
        print(f"package cycles ({label}): {len(cycles)}")
        for cycle in cycles:
            print(f"  {cycle}")


if __name__ == "__main__":
    main()
