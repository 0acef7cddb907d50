"""Writes every output of a run into one directory, each file replaced atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from torchcanary.report.evidence import EVIDENCE_KEY, Evidence, citation, evidence_of
from torchcanary.report.json_out import render_json, strict_json
from torchcanary.report.junit import render_junit
from torchcanary.report.markdown import render_markdown
from torchcanary.report.page import render_html
from torchcanary.section_types import RunView


def _write(path: Path, text: str) -> Path:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)
    return path


def write_outputs(view: RunView, output_dir: Path) -> dict[str, Path]:
    output_dir = output_dir / view.run.run_id
    outputs = write_run_files(view, output_dir)
    latest = output_dir.parent / "latest"
    if latest.is_symlink() or not latest.exists():
        latest.unlink(missing_ok=True)
        latest.symlink_to(output_dir.name)
    return outputs


def write_run_files(view: RunView, output_dir: Path) -> dict[str, Path]:
    """The run's four files in ``output_dir`` itself (a published site links no ``latest``)."""
    sections = tuple(view.run.plan.get("sections", ()))
    output_dir.mkdir(parents=True, exist_ok=True)
    if view.profiles:  # a fleet run: the same four files, with a profile axis
        return _fleet_outputs(view, sections, output_dir)
    return _outputs(view, sections, output_dir)


def _fleet_outputs(view: RunView, sections: tuple[str, ...], output_dir: Path) -> dict[str, Path]:
    from torchcanary.report import fleet

    cases = fleet.fleet_junit_cases(view, sections)
    results, evidence = with_evidence(fleet.render_fleet_json(view, sections))
    markdown = fleet.render_fleet_markdown(view, sections)
    return {
        "html": _write(output_dir / "report.html", fleet.render_fleet_html(view, sections)),
        "json": _write(output_dir / "results.json", results),
        "junit": _write(output_dir / "junit.xml", render_junit(view, (), extra_cases=cases)),
        "markdown": _write(output_dir / "summary.md", _cited(markdown, view, evidence)),
    }


def _outputs(view: RunView, sections: tuple[str, ...], output_dir: Path) -> dict[str, Path]:
    results, evidence = with_evidence(render_json(view))
    markdown = render_markdown(view, sections)
    return {
        "html": _write(output_dir / "report.html", render_html(view, sections)),
        "json": _write(output_dir / "results.json", results),
        "junit": _write(output_dir / "junit.xml", render_junit(view, sections)),
        "markdown": _write(output_dir / "summary.md", _cited(markdown, view, evidence)),
    }


def with_evidence(data: dict[str, Any]) -> tuple[str, Evidence]:
    """``results.json``'s text with its ``evidence`` entry, and that evidence. It is
    computed from the text as written and read back, as ``torchcanary verify`` will."""
    evidence = evidence_of(json.loads(strict_json(data)))
    return strict_json(data | {EVIDENCE_KEY: evidence.to_json()}), evidence


def _cited(markdown: str, view: RunView, evidence: Evidence) -> str:
    """summary.md ends with the line to cite and how to check it."""
    line = citation(view.run.run_id, evidence)
    ending = "" if markdown.endswith("\n") else "\n"
    return markdown + ending + f"\nEvidence: {line} (check: `torchcanary verify DIR`).\n"
