"""The command line's commands, one module per group: each registers its own parsers
and flags (``register``), turns ``args`` into keyword arguments at its own boundary, and
hands back its handlers; ``cli.py`` only builds the top parser and routes.
"""

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
