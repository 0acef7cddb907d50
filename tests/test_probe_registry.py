"""Probes are found through the entry-point group, third-party ones included."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import run_canary
from torchcanary.probe_registry import discover

PLUGIN = '''
from torchcanary.probe import Probe, confirmed

def _always(ctx):
    """A plugin probe: exists only to be discovered."""
    return confirmed("plugin ran")

PROBES = (Probe("{probe_id}", "a third-party claim", "any", _always),)
'''


def _install_plugin(site: Path, name: str, probe_id: str) -> None:
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text(PLUGIN.format(probe_id=probe_id))
    dist_info = site / f"{name}-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(f"[torchcanary.probes]\n{name} = {name}\n")


def test_builtin_probes_have_unique_ids_claims_and_docstrings():
    found = discover()
    assert found, "the built-in catalog must not be empty"
    for probe_id, (probe, source) in found.items():
        assert probe.id == probe_id and probe.claim and probe.scope
        assert source.plugin == "builtin"
        assert (probe.run.__doc__ or "").strip(), f"{probe_id} needs a docstring"


def test_third_party_plugin_is_listed_by_the_probes_command(tmp_path):
    site = tmp_path / "site"
    _install_plugin(site, "canary_plugin_demo", "demo.always")
    result = run_canary("probes", "--json", cwd=tmp_path, PYTHONPATH=str(site))
    assert result.returncode == 0, result.stderr
    listed = {p["id"]: p for p in json.loads(result.stdout)}
    assert listed["demo.always"]["plugin"] == "canary_plugin_demo"
    assert listed["demo.always"]["claim"] == "a third-party claim"


def test_plugin_reusing_an_id_is_a_clear_error(tmp_path):
    site = tmp_path / "site"
    _install_plugin(site, "canary_plugin_one", "demo.same")
    _install_plugin(site, "canary_plugin_two", "demo.same")
    result = run_canary("probes", cwd=tmp_path, PYTHONPATH=str(site))
    assert result.returncode == 2
    assert "defined twice" in result.stderr
