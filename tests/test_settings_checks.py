"""The shared settings checks: one error style for every section's table."""

from __future__ import annotations

import pytest

from torchcanary import settings_checks
from torchcanary.errors import ConfigError


@pytest.mark.parametrize(
    ("value", "options", "expected"),
    [
        (True, {}, "expected a number, got True"),
        ("3", {}, "expected a number, got '3'"),
        (1.5, {"integer": True}, "expected an integer, got 1.5"),
        (-1, {"integer": True, "low": 0}, "expected an integer at least 0, got -1"),
        (200, {"low": 1, "high": 100}, "expected a number from 1 to 100, got 200"),
        (0, {"above": 0}, "expected a number above 0, got 0"),
    ],
)
def test_a_bad_number_is_one_line_naming_table_key_expectation_value_and_fix(
    value: object, options: dict, expected: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        settings_checks.number("stack", "reruns", value, **options)
    message = str(refused.value)
    assert message.startswith(f"[tool.torchcanary.stack] reruns: {expected}; fix: ")
    assert "\n" not in message


def test_a_good_number_comes_back_as_its_kind() -> None:
    assert settings_checks.number("bench", "threads", 8.0, integer=True, low=1) == 8
    assert isinstance(settings_checks.number("bench", "threads", 8.0, integer=True), int)
    assert settings_checks.number("diff", "timeout_s", 3, above=0) == 3.0


def test_strings_are_stripped_and_a_lone_string_is_a_list_only_where_allowed() -> None:
    assert settings_checks.strings("stack", "with", [" -e . "], example="[]") == ("-e .",)
    assert settings_checks.strings("stack", "with", "-e .", example="[]", one_is_a_list=True) == (
        "-e .",
    )
    with pytest.raises(ConfigError, match=r"expected a list of strings, got '-e \.'"):
        settings_checks.strings("bench", "with", "-e .", example='["-e ."]')
    with pytest.raises(ConfigError, match=r"fix: write with = \[\"-e \.\"\]"):
        settings_checks.strings("bench", "with", ["", "x"], example='["-e ."]')
