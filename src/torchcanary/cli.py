"""The command line: the top parser, and the routing to each command group's handler.

Commands come from the core's modules (``commands/``, ``history/commands.py``,
``ci/commands.py``) and from each section (its ``add_commands``), all added the same way
(:func:`command_adders`).

Exit codes: 0 go, 1 no-go, 2 usage or configuration error, 3 internal error (a section
could not finish, or a bug: the traceback is shown with --debug), 130 interrupted (Ctrl-C),
143 terminated (SIGTERM); an interrupted run keeps what it finished, for ``run --resume``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from rich.console import Console

from torchcanary import __version__
from torchcanary.ci import commands as ci_commands
from torchcanary.command_line import Handler, Parser
from torchcanary.commands import EPILOG, publish, run, stored, verify
from torchcanary.errors import EXIT_INTERNAL, EXIT_USAGE, CanaryError
from torchcanary.history import commands as history_commands
from torchcanary.repro import command as repro_command
from torchcanary.sections import SectionDiscoveryError, registered, section_commands
from torchcanary.store.redaction import redact

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
    for add_commands in command_adders():
        HANDLERS.update(add_commands(commands))
    return parser


def command_adders() -> list[Callable[[Any], Mapping[str, Handler]]]:
    """Every place commands come from, in the order ``--help`` lists them, each as its
    ``add_commands(commands)`` (its parsers added to the subparsers; its handlers by
    command): ``run`` (with each section's own command: ``bench``, ``drill``, ...), each
    registered section's other commands (the claims: ``probes``, ``packs``, ``claims``;
    through the contract, so a plugin's failing hook names the plugin), then the core's
    commands on stored runs."""
    return [
        run.add_commands,
        *(functools.partial(section_commands, section) for section in registered().values()),
        stored.add_commands,  # runs, report
        publish.add_commands,
        verify.add_commands,  # a run's evidence digest
        repro_command.add_commands,  # a verified reproducer per finding
        history_commands.add_commands,  # history, compare, store
        ci_commands.add_commands,  # ci init, ci comment
    ]


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI job's time limit, ``kill``) met as Ctrl-C is, so every ``finally``
    runs: a run's workers, drill ranks and store hosts are stopped, not left running."""


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Python's default SIGTERM ends the process at once, cleanup skipped; this raises
    :class:`Terminated` instead, for as long as the command runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
        with _sigterm_as_interrupt():
            return handler(args, console)
    except CanaryError as exc:
        print(f"torchcanary: error: {redact(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(
            f"torchcanary: {how}; finished results are stored: resume with "
            "`torchcanary run --resume`",
            file=sys.stderr,
        )
        return 143 if isinstance(exc, Terminated) else 130
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
