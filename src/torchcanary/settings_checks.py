"""The value checks every section's settings reader shares, so a bad value reads the same
whichever table it is in: ``[tool.torchcanary.<section>] <key>: expected <what>, got
<value>; fix: <how>`` (one line, raised as ConfigError and printed by the CLI).

Standard library only; each section's ``settings.py`` keeps what is its own (paths,
choices, the shape of its tables) and calls these for numbers and lists of strings.
"""

from __future__ import annotations

from typing import Any

from torchcanary.errors import ConfigError


def refusal(section: str, key: str, problem: str, fix: str) -> ConfigError:
    """The one-line refusal of ``key`` in ``section``'s table: what is wrong, then the fix."""
    return ConfigError(f"[tool.torchcanary.{section}] {key}: {problem}; fix: {fix}")


def unexpected(section: str, key: str, expected: str, got: Any, fix: str) -> ConfigError:
    """The refusal of a value of the wrong kind: what was expected and what came."""
    return refusal(section, key, f"expected {expected}, got {got!r}", fix)


def _bounds(low: float | None, high: float | None, above: float | None) -> str:
    if above is not None:
        return f" above {above:g}" + (f" and at most {high:g}" if high is not None else "")
    if low is not None and high is not None:
        return f" from {low:g} to {high:g}"
    if low is not None:
        return f" at least {low:g}"
    return f" at most {high:g}" if high is not None else ""


def number(
    section: str,
    key: str,
    value: Any,
    *,
    integer: bool = False,
    low: float | None = None,
    high: float | None = None,
    above: float | None = None,
    fix: str = "",
) -> Any:
    """``value`` as an int (``integer``) or a float, inside ``[low, high]`` and above
    ``above`` where given; booleans are refused (TOML's true is no number)."""
    expected = ("an integer" if integer else "a number") + _bounds(low, high, above)
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (integer and not whole)
        or (low is not None and value < low)
        or (high is not None and value > high)
        or (above is not None and value <= above)
    ):
        raise unexpected(section, key, expected, value, fix or f"write {key} = <{expected}>")
    return int(value) if integer else float(value)


def flag(section: str, key: str, value: Any) -> bool:
    """``true`` or ``false``, nothing that merely reads as one (1, "yes")."""
    if not isinstance(value, bool):
        raise unexpected(section, key, "true or false", value, f"write {key} = true")
    return value


def strings(
    section: str, key: str, value: Any, *, example: str, one_is_a_list: bool = False
) -> tuple[str, ...]:
    """A list of non-blank strings, stripped; ``one_is_a_list`` takes a lone string as a
    list of one (the CLI's flags give one)."""
    if one_is_a_list and isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(
        isinstance(item, str) and item.strip() for item in value
    ):
        raise unexpected(section, key, "a list of strings", value, f"write {key} = {example}")
    return tuple(item.strip() for item in value)
