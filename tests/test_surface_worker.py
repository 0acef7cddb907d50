"""The worker's normalisation: what differs per environment but means the same is equal.

These parts of ``torchcanary.worker.surface`` need no torch, so they run here directly.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path

from torchcanary.worker.surface import _import, _Normaliser

SITE = Path(sys.prefix) / "lib" / "python3.11" / "site-packages"


class _Mode(enum.Enum):
    FAST = 1


def _normaliser() -> _Normaliser:
    return _Normaliser(SITE / "torch", "2.14.1+cu130")


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
    assert _normaliser().value(_normaliser) == ("<function test_surface_worker._normaliser>")


def test_module_that_fails_to_import_is_recorded_not_raised():
    failures: dict[str, str] = {}
    assert _import("torchcanary_no_such_module", failures) is None
    assert failures["torchcanary_no_such_module"].startswith("ModuleNotFoundError")
