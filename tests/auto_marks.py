"""Markers set from the fixtures a test uses, so a test cannot forget the real part it needs.

A test that asks (directly or through another fixture) for a fixture below gets that
fixture's marker: ``-m "not torch_envs"`` then leaves out every test that starts real torch
workers, whether or not its author wrote the marker. ``make test-fast`` selects on them.
Registered by ``tests/conftest.py`` (``pytest_plugins``).
"""

from __future__ import annotations

import pytest

# The fixture that brings each real part, and the marker its tests get. Module fixtures
# that start a cluster of their own are named here too (their names are unique).
FIXTURE_MARKS = {
    "baseline_env": "torch_envs",
    "candidate_env": "torch_envs",
    "bare_baseline_env": "torch_envs",
    "make_context": "torch_envs",
    "ray_cluster": "ray",
    "fleet": "ray",
    "ray_executor": "ray",
    "drill_cluster": "ray",
    "gpu_cluster": "ray",
    "bridged_cluster": "ray",
    "slurm_cluster": "slurm",
    "slurm_executor": "slurm",
    "postgres_cluster": "postgres",
    "postgres_url": "postgres",
}

# A store test runs once per engine; its PostgreSQL case starts the session's server.
POSTGRES_PARAMS = {"store_location": "postgres"}


def fixture_marks(item: pytest.Item) -> set[str]:
    """The markers ``item`` gets from the fixtures (and fixture parameters) it uses."""
    names = set(getattr(item, "fixturenames", ())) - direct_parameters(item)
    marks = {FIXTURE_MARKS[name] for name in names if name in FIXTURE_MARKS}
    params = getattr(getattr(item, "callspec", None), "params", {})
    if any(params.get(name) == value for name, value in POSTGRES_PARAMS.items()):
        marks.add("postgres")
    return marks


def direct_parameters(item: pytest.Item) -> set[str]:
    """The names ``item`` is parametrized over that are plain values, not fixtures (a
    parameter called ``fleet`` is not the Ray fleet)."""
    direct: set[str] = set()
    for mark in item.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        if isinstance(names, str):
            names = [name.strip() for name in names.split(",") if name.strip()]
        indirect = mark.kwargs.get("indirect", False)
        direct |= {
            name
            for name in names
            if not (indirect is True or (isinstance(indirect, list | tuple) and name in indirect))
        }
    return direct


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        have = {mark.name for mark in item.iter_markers()}
        for name in sorted(fixture_marks(item) - have):
            item.add_marker(name)
