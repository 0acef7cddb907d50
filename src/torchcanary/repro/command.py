"""``torchcanary repro RUN [FINDING ...]``: a verified reproducer folder per finding of a
stored run, and the report rendered again with a "Reproduce" link beside each one that
reproduces."""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from torchcanary.command_line import Handler
from torchcanary.commands.stored import add_result_flags, existing_paths, resolve_run_id
from torchcanary.errors import EXIT_GO, EXIT_NO_GO, CanaryError
from torchcanary.repro.folder import RunFacts, folder_name, write_folder, write_verification
from torchcanary.repro.literals import NotWritable
from torchcanary.repro.reduce import REDUCIBLE_KINDS, Reduction, reduce
from torchcanary.repro.reproducer import ROLES, Reproducer, Reproduces
from torchcanary.repro.verify import TIMEOUT_S, verify
from torchcanary.repro.writers import writer_for
from torchcanary.section_types import Finding, RunView

FOLDER = "repro"  # under the run's output folder
REDUCE_BUDGET_S = 60.0

DESCRIPTION = """\
Write, for each finding of a stored run (a changed call, ...), a folder with a standalone
repro.py (torch only, its inputs embedded), requirements-baseline.txt and
requirements-candidate.txt (exact pins), expected.txt (what each version did in the run)
and ISSUE.md (a draft upstream report). Each repro.py is then run in both of the run's
environments (reused from the cache) and marked 'reproduces' (each version prints what it
did in the run, and the two differ) or 'does not reproduce', with both outputs; only those
that reproduce get a "Reproduce" link in report.html and summary.md, rendered again.

Exit 0 when every reproducer written reproduces, 1 when one does not (or could not be
checked), 2 on a usage error.
"""

EXAMPLES = """\
examples:
  torchcanary repro latest                       # every finding of the latest run
  torchcanary repro latest torch.cholesky        # the findings whose id contains it
  torchcanary repro 20261205-191905-d9d303 --store runs/canary.db
"""


def add_commands(commands: Any) -> dict[str, Handler]:
    """Add ``repro``; its handler."""
    repro = commands.add_parser(
        "repro",
        help="write and verify a standalone reproducer for each finding of a stored run",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    repro.add_argument("run_id", metavar="RUN", help="run id, or 'latest'")
    repro.add_argument(
        "findings",
        nargs="*",
        metavar="FINDING",
        help="only the findings whose id contains this text (default: every finding); "
        "ids are printed as '<section>:<item>'",
    )
    repro.add_argument(
        "--timeout",
        type=float,
        default=TIMEOUT_S,
        metavar="SECONDS",
        help=f"seconds one repro.py may run in one version (default {TIMEOUT_S:g}; a "
        "timing script, which runs both versions itself, twice that)",
    )
    repro.add_argument(
        "--reduce",
        action="store_true",
        help="shrink each changed call's tensor inputs while the change still reproduces "
        "(each try runs the script in both versions), within --reduce-budget; says how far "
        "it got (other kinds are written as they are)",
    )
    repro.add_argument(
        "--reduce-budget",
        type=float,
        default=REDUCE_BUDGET_S,
        metavar="SECONDS",
        help=f"seconds --reduce may spend on one finding (default {REDUCE_BUDGET_S:g})",
    )
    add_result_flags(repro, outputs=True)
    return {"repro": _cmd_repro}


def chosen(found: list[Finding], wanted: list[str]) -> list[Finding]:
    """The findings whose id contains one of ``wanted`` (all of them when none is given);
    a text that matches none is a usage error naming the ids there are."""
    if not wanted:
        return found
    ids = [f"{f.section}:{f.item}" for f in found]
    unmatched = [text for text in wanted if not any(text in i for i in ids)]
    if unmatched:
        known = ", ".join(ids) or "none"
        raise CanaryError(f"no finding matches {', '.join(unmatched)}; this run's: {known}")
    return [f for f, i in zip(found, ids, strict=True) if any(text in i for text in wanted)]


def _pythons(view: RunView) -> dict[str, str]:
    """Each role's interpreter, the run's environment reused from the cache (built again
    only where the cache lost it)."""
    from torchcanary.envs.cache import ensure_environment
    from torchcanary.envs.spec import parse_env_spec

    return {
        role: ensure_environment(role, parse_env_spec(view.environments[role].spec)).python
        for role in ROLES
        if role in view.environments
    }


def _digest(store: Any, run_id: str) -> str:
    from torchcanary.report.evidence import EVIDENCE_ARTIFACT, Evidence

    for name, _, content in store.artifacts(run_id):
        if name == EVIDENCE_ARTIFACT:
            return Evidence.from_json(json.loads(content)).digest
    return "not recorded (the run did not finish)"


def _cmd_repro(args: argparse.Namespace, console: Console) -> int:
    from torchcanary.report.render import write_outputs
    from torchcanary.report.view import REPRODUCERS_ARTIFACT, load_run_view
    from torchcanary.sections import registered
    from torchcanary.store.location import open_store

    store_path, output = existing_paths(args)
    for flag, value in (("--timeout", args.timeout), ("--reduce-budget", args.reduce_budget)):
        if value <= 0:
            raise CanaryError(f"{flag} must be above 0 seconds, not {value:g}")
    with open_store(store_path, create=False) as store:
        run_id = resolve_run_id(store, args.run_id)
        view = load_run_view(store, run_id)
        found = [f for section in registered().values() for f in section.reproducible(view)]
        findings = chosen(found, list(args.findings))
        if not findings:
            console.print(f"repro: run {run_id} has no finding a script can show", markup=False)
            return EXIT_GO
        run = RunFacts.of(view, _digest(store, run_id))
        root = output / run_id / FOLDER
        pythons = _pythons(view)
        linked = dict(view.reproducers)
        all_reproduce = True
        budget = args.reduce_budget if args.reduce else None
        for finding in findings:
            verdict, where = _one(finding, root, run, pythons, (args.timeout, budget), console)
            all_reproduce &= verdict is Reproduces.YES
            key = f"{finding.section}:{finding.item}"
            if verdict is Reproduces.YES:
                linked[key] = f"{FOLDER}/{where}"
            else:
                linked.pop(key, None)
        store.save_artifact(
            run_id, REPRODUCERS_ARTIFACT, "application/json", json.dumps(linked).encode()
        )
        write_outputs(load_run_view(store, run_id), output)
    console.print(
        f"repro: folders in {root}; report linked: {output / run_id}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    return EXIT_GO if all_reproduce else EXIT_NO_GO


def _one(
    finding: Finding,
    root: Path,
    run: RunFacts,
    pythons: dict[str, str],
    limits: tuple[float, float | None],
    console: Console,
) -> tuple[Reproduces, str]:
    """Write (reduced, where ``limits`` gives a budget) and verify one finding's
    reproducer; its verdict and folder name. ``limits``: (seconds per script run, seconds
    for reducing or None)."""
    key = f"{finding.section}:{finding.item}"
    timeout_s, budget_s = limits
    writer = writer_for(finding)
    if writer is None:
        console.print(
            f"not written: {key}: no writer for findings of kind {finding.kind!r}", markup=False
        )
        return Reproduces.NOT_CHECKED, ""
    name = folder_name(key)
    try:
        reproducer = writer(finding)
        reduced = None
        if budget_s is not None and finding.kind in REDUCIBLE_KINDS:
            finding, reduced = _reduced(finding, writer, pythons, timeout_s, budget_s, root)
            reproducer = writer(finding)
    except NotWritable as exc:
        console.print(f"not written: {key}: {exc}", markup=False)
        return Reproduces.NOT_CHECKED, ""
    script = write_folder(root / name, reproducer, run)
    verification = verify(reproducer, script, pythons, timeout_s)
    notes = reduced.sentence() if reduced is not None else ""
    write_verification(root / name, reproducer, run, verification, notes)
    console.print(
        f"{verification.verdict}: {key} ({reproducer.lines()} lines; {verification.reason})"
        + (f"; {notes}" if notes else ""),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    return verification.verdict, name


def _reduced(
    finding: Finding,
    writer: Callable[[Finding], Reproducer],
    pythons: dict[str, str],
    timeout_s: float,
    budget_s: float,
    root: Path,
) -> tuple[Finding, Reduction]:
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix="reducing-") as scratch:
        return reduce(
            finding,
            writer,
            lambda reproducer, script: verify(reproducer, script, pythons, timeout_s),
            Path(scratch),
            budget_s,
        )
