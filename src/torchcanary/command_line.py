"""What every command module speaks, wherever it lives (``commands/``, a section's own
commands, ``history/``, ``ci/``): the handler it hands back for each command, and the
parser that makes a usage mistake one line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from rich.console import Console

from torchcanary.errors import EXIT_USAGE

Handler = Callable[[argparse.Namespace, Console], int]


class Parser(argparse.ArgumentParser):
    """Every usage mistake is one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"torchcanary: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
