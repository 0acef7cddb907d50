"""The worker's normalisation: what differs per environment but means the same is equal;
and each side imports only what its process may.

These parts of ``torchcanary.worker.surface`` need no torch, so they run here directly.
"""

from __future__ import annotations

import ast
import enum
import sys
from pathlib import Path

from torchcanary.worker.surface.imports import guarded_import
from torchcanary.worker.surface.normalise import Normaliser

SITE = Path(sys.prefix) / "lib" / "python3.11" / "site-packages"
SOURCE = Path(__file__).parents[1] / "src" / "torchcanary"


class _Mode(enum.Enum):
    FAST = 1


def _normaliser() -> Normaliser:
    return Normaliser(SITE / "torch", "2.14.1+cu130")


def test_environment_paths_become_placeholders():
    value = _normaliser().value(str(SITE / "torch" / "lib" / "libtorch.so"))
    assert value == "<site>/torch/lib/libtorch.so"


def test_addresses_are_dropped_from_reprs():
    class Thing:
        pass

    text = _normaliser().value(Thing())
    assert " at 0x" not in text and text.endswith("Thing object>")


def test_sets_and_dict_keys_are_sorted_and_enums_named():
    norm = _normaliser()
    assert norm.value({"b", "a", "c"}) == ["a", "b", "c"]
    assert list(norm.value({"z": 1, "a": {3, 1}})) == ["a", "z"]
    assert norm.value(_Mode.FAST) == "_Mode.FAST"
    assert norm.value(float("inf")) == "inf"


def test_torch_own_version_is_not_a_value_that_changes():
    norm = _normaliser()
    assert norm.value("2.14.1+cu130") == norm.value("2.14.1") == "<torch-version>"
    assert norm.value("2.13.0") == "2.13.0"  # another version is still a value


def test_functions_are_named_by_module_and_qualified_name():
    assert _normaliser().value(_normaliser) == ("<function test_diff_worker._normaliser>")


def test_module_that_fails_to_import_is_recorded_not_raised():
    failures: dict[str, str] = {}
    assert guarded_import("torchcanary_no_such_module", failures) is None
    assert failures["torchcanary_no_such_module"].startswith("ModuleNotFoundError")


def _imported_modules(package: Path) -> set[str]:
    names = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
    return names


def test_worker_side_imports_only_the_standard_library_torch_and_itself():
    for name in _imported_modules(SOURCE / "worker" / "surface"):
        top = name.split(".")[0]
        assert (
            top in sys.stdlib_module_names
            or top == "torch"
            or name.startswith("torchcanary.worker.")
        ), name


def test_orchestrator_side_never_imports_torch():
    assert not {
        name for name in _imported_modules(SOURCE / "surface") if name.split(".")[0] == "torch"
    }
