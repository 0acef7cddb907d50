"""The command line: the top parser, and the routing to each command group's handler
(``commands/``, and ``history/commands.py`` for the cross-run questions).

Exit codes: 0 go, 1 no-go, 2 usage or configuration error, 3 internal error (a section
could not finish, or a bug: the traceback is shown with --debug).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console

from torchcanary import __version__
from torchcanary.ci import commands as ci_commands
from torchcanary.commands import Handler, Parser, publish, run, stored, verify
from torchcanary.errors import EXIT_INTERNAL, EXIT_USAGE, CanaryError
from torchcanary.history import commands as history_commands
from torchcanary.sections import SectionDiscoveryError, registered, section_commands
from torchcanary.store.redaction import redact

EPILOG = """\
examples:
  torchcanary run --baseline torch==2.13.0 --candidate torch==2.14.1
  torchcanary run --candidate "torch==2.14.1 numpy" --only claims --probes 'c10d.*'
  torchcanary run --resume                   # carry on after an interruption
  torchcanary probes                          # every claim probe and what it needs
  torchcanary packs                           # the claims packs installed, one per release
  torchcanary claims checklist NOTES.md --release 2.15   # draft a pack from the notes
  torchcanary runs && torchcanary report RUN_ID
  torchcanary publish site/                   # a static site of every stored run
  torchcanary verify canary-results/latest     # results.json still matches its digest?
  torchcanary ci init github --runner-label h100  # a workflow for a self-hosted GPU runner

environments (--baseline/--candidate): pip requirements ('torch==2.13.0 numpy'), an
interpreter ('python:/opt/venv/bin/python') or 'current'. Requirement sets are built once
into a cache (TORCHCANARY_CACHE, default the user cache dir) and reused.
configuration: [tool.torchcanary] in pyproject.toml or canary.toml; flags win.
exit codes: 0 go, 1 no-go, 2 usage/configuration error, 3 internal error.
"""


HANDLERS: dict[str, Handler] = {}  # command -> its handler, filled as the parser is built


def build_parser() -> argparse.ArgumentParser:
    """The top parser; each command group adds its own commands and flags."""
    parser = Parser(
        prog="torchcanary",
        description="Qualify a PyTorch release on your own "
        "hardware before you roll it out: every claim probed, performance A/B, "
        "your own tests, and fault drills, with a go / no-go verdict.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"torchcanary {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    HANDLERS.update(run.register(commands, EPILOG))
    for section in registered().values():  # a section's own commands (the claims: probes)
        HANDLERS.update(section_commands(section, commands))
    HANDLERS.update(stored.register(commands))
    HANDLERS.update(publish.register(commands))
    HANDLERS.update(verify.register(commands))  # a run's evidence digest
    HANDLERS.update(history_commands.register(commands))  # history, compare, store
    HANDLERS.update(ci_commands.register(commands))  # ci init, ci comment
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()  # finds the installed sections: a broken plugin fails here
    except SectionDiscoveryError as exc:
        if "--debug" in words:
            raise
        print(
            f"torchcanary: error: {exc}; fix or uninstall that package (--debug: traceback)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    args = parser.parse_args(words)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    console = Console()
    try:
        handler = HANDLERS[args.command]
        return handler(args, console)
    except CanaryError as exc:
        print(f"torchcanary: error: {redact(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(
            "torchcanary: interrupted; finished results are stored: resume with "
            "`torchcanary run --resume`",
            file=sys.stderr,
        )
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(
            f"torchcanary: internal error: {type(exc).__name__}: {redact(str(exc))} "
            "(rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
