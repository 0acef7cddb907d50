"""One exception type per kind of user mistake; the CLI prints each as one line with the fix.

A failure of what the run depends on (the store's server lost mid-run) is not the user's
mistake: it is printed the same way but exits with ``EXIT_INTERNAL``, never the usage code.
"""

from __future__ import annotations

EXIT_GO = 0
EXIT_NO_GO = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


class CanaryError(Exception):
    """A problem the user can fix; ``str()`` names the problem and the fix."""

    exit_code = EXIT_USAGE


class ConfigError(CanaryError):
    """A configuration file or flag has an unknown key or a bad value."""


class EnvSpecError(CanaryError):
    """An environment spec (``--baseline``/``--candidate``) cannot be understood."""


class EnvBuildError(CanaryError):
    """An environment could not be built (package not found, index unreachable)."""


class StoreError(CanaryError):
    """The results store is missing, newer than this torchcanary, or has no such run."""


class FleetError(CanaryError):
    """The fleet (``--fleet``) cannot be reached or used: address, Ray install, no nodes."""


class StoreLostError(StoreError):
    """The store's server went away mid-run: an environment failure, not a usage error."""

    exit_code = EXIT_INTERNAL
