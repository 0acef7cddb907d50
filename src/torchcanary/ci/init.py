"""``ci init``: a CI definition rendered from the package's templates with the user's
flags (where it runs, when, what it runs), and written where the platform looks for it."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from torchcanary import __version__
from torchcanary.errors import CanaryError

PLATFORMS = ("github", "gitlab")
DEFAULT_PATHS = {
    "github": Path(".github/workflows/torchcanary.yml"),
    "gitlab": Path(".gitlab-ci.yml"),
}
DEFAULT_SCHEDULE = "0 3 * * *"  # nightly, when the GPU runner is least busy
DEFAULT_PIN_FILE = "canary.toml"
DEFAULT_LABELS = ("gpu",)
_CRON_FIELD = re.compile(r"^[\d*/,\-A-Za-z]+$")
_PLACEHOLDER = re.compile(r"@@[A-Z_]+@@")


@dataclass(frozen=True)
class CiOptions:
    """What the flags choose; every default works for a single GPU runner."""

    platform: str
    runner_labels: tuple[str, ...] = DEFAULT_LABELS
    schedule: str = DEFAULT_SCHEDULE
    pin_file: str = DEFAULT_PIN_FILE
    run_args: str = ""
    timeout_minutes: int = 360


def _checked(options: CiOptions) -> CiOptions:
    if options.platform not in PLATFORMS:
        raise CanaryError(f"unknown CI platform {options.platform!r}; choose github or gitlab")
    fields = options.schedule.split()
    if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
        raise CanaryError(
            f"--schedule {options.schedule!r} is not a five-field cron line; "
            f"e.g. {DEFAULT_SCHEDULE!r} (03:00 UTC daily)"
        )
    for label in options.runner_labels:
        if not re.fullmatch(r"[\w.\-:/]+", label):
            raise CanaryError(f"runner label {label!r} has spaces or quotes; pass a plain label")
    if not options.pin_file or any(c in options.pin_file for c in "\"'\n"):
        raise CanaryError(f"--pin-file {options.pin_file!r} is not a plain path in the repository")
    if options.timeout_minutes <= 0:
        raise CanaryError("--timeout-minutes must be positive")
    try:
        shlex.split(options.run_args)
    except ValueError as exc:
        raise CanaryError(
            f"--run-args cannot be split as a shell line ({exc}); fix its quotes"
        ) from exc
    return options


def render(options: CiOptions) -> str:
    """The platform's template with ``options`` filled in."""
    options = _checked(options)
    template = (
        resources.files("torchcanary.ci") / "templates" / f"{options.platform}.yml"
    ).read_text()
    labels = list(options.runner_labels)
    values = {
        "VERSION": __version__,
        "SCHEDULE": options.schedule,
        "PIN_FILE": options.pin_file,
        # JSON flow sequences are YAML: ["self-hosted", "gpu"].
        "RUNS_ON": json.dumps(["self-hosted", *labels]),
        "TAGS": json.dumps(labels),
        "RUN_ARGS": options.run_args,
        "TIMEOUT_MINUTES": str(options.timeout_minutes),
    }
    text = _PLACEHOLDER.sub(lambda match: values[match.group(0).strip("@")], template)
    # Without extra arguments no trailing space is left after the run command.
    return text.replace("canary-results  ||", "canary-results ||")


def write(options: CiOptions, out: Path | None, force: bool) -> Path:
    """The rendered definition written to ``out`` (default: where the platform reads it)."""
    text = render(options)
    path = out if out is not None else DEFAULT_PATHS[options.platform]
    if path.exists() and not force:
        raise CanaryError(f"{path} exists; pass --force to replace it, or --out PATH")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
