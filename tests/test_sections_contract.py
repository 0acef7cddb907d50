"""The section contract: every registered section provides it, and a third party plugs in alone.

The third-party section lives in ``tests/fixtures/third_party_section``: a package and its
``*.dist-info`` with an ``entry_points.txt``, as pip would leave them. Putting that folder
on the path is all it takes for it to appear in ``--help``, the config, the policy, ``run``
and every report.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from cli_helpers import run_canary
from torchcanary.claims.records import save_probe_result
from torchcanary.cli import build_parser
from torchcanary.config import load_settings
from torchcanary.config_toml import tomllib
from torchcanary.contract import Section
from torchcanary.errors import ConfigError
from torchcanary.policy import policy_defaults
from torchcanary.sections import (
    ENTRY_POINT_GROUP,
    SectionDiscoveryError,
    contract_gaps,
    registered,
    section_names,
)

THIRD_PARTY = Path(__file__).parent / "fixtures" / "third_party_section"
PYPROJECT = Path(__file__).parents[1] / "pyproject.toml"
BUILTIN = ("claims", "bench", "drill", "stack", "calls", "diff", "explain")


@pytest.fixture(autouse=True)
def fresh_registry() -> Iterator[None]:
    """The registry is read once per process; each test here changes what is installed."""
    registered.cache_clear()
    yield
    registered.cache_clear()


@pytest.fixture
def third_party(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(THIRD_PARTY))


def test_every_registered_section_provides_the_whole_contract(third_party: None) -> None:
    sections = registered()
    assert "footprint" in sections
    for name, section in sections.items():
        assert isinstance(section, Section), name
        assert contract_gaps(section) == [], name
        assert section.name == name


def test_builtin_sections_are_registered_only_through_the_entry_point_group() -> None:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"][ENTRY_POINT_GROUP]
    assert tuple(declared) == BUILTIN
    assert section_names() == BUILTIN  # in run order, nothing else registered here
    installed = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert installed in ({}, declared), "reinstall (pip install -e .) to refresh the metadata"


def _install(folder: Path, module: str, source: str) -> None:
    """A plugin distribution in ``folder``: its module, and the entry point naming it."""
    (folder / f"{module}.py").write_text(source)
    info = folder / f"{module}-0.1.dist-info"
    info.mkdir()
    dist = module.replace("_", "-")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    name = module.removesuffix("_section")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {module}:SECTION\n")


# A complete section, bar what a test takes out or adds, for the refusals below.
_WHOLE = """
from torchcanary.contract import Section

class Whole(Section):
    name = "whole"
    order = 5
    help = None
    policy_defaults = {}
    checked_verdicts = frozenset({"done"})

    def planned_units(self, plan): return []
    def parse_settings(self, raw): return {}
    def run(self, ctx): pass
    def blocking_reasons(self, view, policy): return []
    def html(self, view): return ""
    def markdown(self, view): return ""
    def junit_cases(self, view): return []
"""


def test_a_section_missing_a_required_part_is_refused_naming_the_plugin_and_the_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _WHOLE.replace("    def run(self, ctx): pass\n", "") + "\nSECTION = Whole()\n"
    _install(tmp_path, "whole_section", source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SectionDiscoveryError) as refused:
        registered()
    assert str(refused.value) == (
        "section plugin 'whole' (whole_section:SECTION, from whole-section) failed to load: "
        "TypeError: Can't instantiate abstract class Whole with abstract method run"
    )


def test_a_section_that_declares_no_plan_is_refused_at_load_in_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 38: without its planned units and checked verdicts nobody could tell what a
    section left undone, so such a section is not loaded at all."""
    source = _WHOLE.replace("    def planned_units(self, plan): return []\n", "").replace(
        '    checked_verdicts = frozenset({"done"})\n', ""
    )
    _install(tmp_path, "whole_section", source + "\nSECTION = Whole()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SectionDiscoveryError) as refused:
        registered()
    assert str(refused.value).endswith(
        "TypeError: Can't instantiate abstract class Whole with abstract methods "
        "checked_verdicts, planned_units"
    )


def test_an_object_that_is_not_a_contract_section_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(tmp_path, "loose_section", "class Loose:\n    name = 'loose'\n\nSECTION = Loose()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SectionDiscoveryError, match=r"'loose'.*not a torchcanary.contract.Section"):
        registered()


def test_a_part_under_another_name_or_with_other_arguments_is_refused_not_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40: ``input_elsewhere`` for ``fed_by`` would silently never be called, and a
    ``findings`` that takes two arguments would fail only in the middle of a run."""
    extra = (
        "    def input_elsewhere(self, outputs): return True\n"
        "    def findings(self, view, policy): return []\n"
    )
    _install(tmp_path, "whole_section", _WHOLE + extra + "\nSECTION = Whole()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SectionDiscoveryError) as refused:
        registered()
    assert str(refused.value) == (
        "section plugin 'whole' (whole_section:SECTION, from whole-section) breaks the contract: "
        "input_elsewhere is not a part of the contract (torchcanary.contract.Section declares "
        "each); findings() takes 2 arguments; the contract's takes 1"
    )


def test_third_party_section_gets_a_subcommand_a_config_table_and_policy_keys(
    third_party: None, tmp_path: Path
) -> None:
    help_text = build_parser().format_help()
    assert "footprint" in help_text and "how much disk each package takes" in help_text
    assert section_names()[-1] == "footprint"  # a run does it by default, after the built-ins
    assert policy_defaults(("footprint",)) == {"max_footprint_growth": 0.5}
    (tmp_path / "canary.toml").write_text(
        '[footprint]\npackages = ["torch", "numpy"]\n[policy]\nmax_footprint_growth = 0.1\n'
    )
    flags = {"sections": ["footprint"], "named_sections": ["footprint"]}
    plan = load_settings(None, flags, tmp_path).plan
    assert plan.settings["footprint"] == {"packages": ["torch", "numpy"]}
    assert plan.policy["max_footprint_growth"] == 0.1


def test_without_the_plugin_its_policy_key_and_table_are_unknown(tmp_path: Path) -> None:
    (tmp_path / "canary.toml").write_text("[policy]\nmax_footprint_growth = 0.1\n")
    with pytest.raises(ConfigError, match="unknown policy key 'max_footprint_growth'"):
        load_settings(None, {"sections": ["claims"]}, tmp_path)


@pytest.mark.torch_envs
def test_third_party_section_runs_and_judges_in_every_report(tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text("max_footprint_growth = -1.0\n")  # any size is too big
    result = run_canary(
        "footprint",
        "--policy",
        "policy.toml",
        "--quiet",
        cwd=tmp_path,
        PYTHONPATH=str(THIRD_PARTY),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    out = tmp_path / "canary-results" / "latest"
    report = json.loads((out / "results.json").read_text())
    (row,) = report["sections"]["footprint"]
    assert row["key"] == "torch" and row["payload"]["baseline"] > 0
    assert any("torch takes" in r for r in report["decision_detail"]["reasons"])
    assert "## Footprint" in (out / "summary.md").read_text()
    assert '<section id="footprint">' in (out / "report.html").read_text()
    assert 'name="footprint: torch"' in (out / "junit.xml").read_text()


def test_each_section_says_how_the_history_command_draws_its_items(third_party: None) -> None:
    from torchcanary.history.render import plot
    from torchcanary.store.history import HistoryEntry

    def entry(verdict: str, ratio: float | None = None) -> HistoryEntry:
        bounds = (ratio * 0.98, ratio * 1.02) if ratio else (None, None)
        return HistoryEntry("r1", 0.0, "2.13.0", "2.14.1", verdict, {}, ratio, *bounds)

    # the third party's own plot, found through the registry like every other part
    assert 'id="footprint-history"' in plot("torch", "footprint", [entry("measured")])
    # the bench draws its forest of ratios; a drill, with no plot of its own, its verdicts
    forest = plot("matmul", "bench", [entry("slower", 1.2)])
    strip = plot("kill:restart", "drill", [entry("baseline: passed, candidate: failed")])
    assert "<line" in forest and "1.2" in forest and "candidate: failed" not in forest
    assert "candidate: failed" in strip and "footprint-history" not in strip


def test_each_compared_section_names_its_changes_for_the_worse_in_its_own_words() -> None:
    from torchcanary.bench.result import BenchVerdict
    from torchcanary.claims.view import ClaimComparison
    from torchcanary.drill.result import DrillVerdict

    words = {"bench": BenchVerdict, "claims": ClaimComparison, "drill": DrillVerdict}
    sections = registered()
    for name, vocabulary in words.items():
        worse = sections[name].worse_verdicts
        assert worse and worse <= {verdict.value for verdict in vocabulary}, name
    assert sections["bench"].worse_verdicts == {"slower"}  # faster is no regression
    assert "new in candidate" not in sections["claims"].worse_verdicts
    assert sections["diff"].worse_verdicts == frozenset()  # not compared: declares none


def test_the_summary_after_a_run_prints_each_sections_own_terminal_part(
    third_party: None, tmp_path: Path
) -> None:
    from rich.console import Console

    from torchcanary.commands.summary import print_summary
    from torchcanary.probe_result import Outcome, ProbeResult, Verdict
    from torchcanary.store.rows import SectionResult
    from torchcanary.store.sqlite import SqliteStore

    with SqliteStore(tmp_path / "canary.db") as store:
        run_id = store.create_run({"sections": ["claims", "drill", "footprint"]})
        for role, verdict in (("baseline", Verdict.REFUTED), ("candidate", Verdict.CONFIRMED)):
            outcome = Outcome(verdict, "why")
            save_probe_result(store, ProbeResult(run_id, role, "c10d.new_thing", outcome, 1.0, 0.0))
        store.save_section_result(
            run_id, SectionResult("drill", "kill:restart", "candidate", "passed", {"reason": ""})
        )
        store.save_section_result(
            run_id, SectionResult("footprint", "torch", "both", "measured", {"growth": 0.1})
        )
        console = Console(record=True, width=100)
        print_summary(console, store, run_id)
    printed = console.export_text()
    # the claims' table, the drill's Markdown, the third party's own lines, in run order
    assert "claims, run" in printed and "refuted -> confirmed" in printed
    assert "claims: 1 new in candidate" in printed
    assert printed.index("claims: 1") < printed.index("Fault drills")
    assert printed.index("Fault drills") < printed.index("footprint: 1 packages weighed")
    assert "Footprint" not in printed  # its Markdown is replaced by its own terminal part


def test_every_part_a_builtin_section_imports_on_first_use_exists_with_the_parts_arguments() -> (
    None
):
    """``FromModule`` parts are not resolved at load (that would import the sections' work
    on ``--help``), so here each is: it names something that exists, and a method part
    names a function taking the part's arguments."""
    import inspect

    from torchcanary.contract import FromModule
    from torchcanary.sections import _positional

    checked = 0
    for name, section in registered().items():
        for attr in dir(Section):
            part = inspect.getattr_static(type(section), attr, None)
            if not isinstance(part, FromModule):
                continue
            value = getattr(section, attr)  # imports the module: fails if the name is wrong
            declared = inspect.getattr_static(Section, attr)
            if inspect.isfunction(declared):
                assert callable(value), f"{name}.{attr}"
                want = _positional(declared)
                assert _positional(value, takes_self=False) == want, f"{name}.{attr}"
            checked += 1
    assert checked >= 7 * 10  # every built-in section declares most of its parts so
