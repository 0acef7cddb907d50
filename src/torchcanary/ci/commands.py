"""``ci init`` and ``ci comment``: their flags, turned into keyword arguments here."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from torchcanary.ci.init import DEFAULT_PIN_FILE, DEFAULT_SCHEDULE, PLATFORMS, CiOptions
from torchcanary.command_line import Handler, Parser
from torchcanary.errors import EXIT_GO


def add_commands(commands: Any) -> dict[str, Handler]:
    """Add ``ci`` with its two subcommands; its handler."""
    ci = commands.add_parser(
        "ci", help="run torchcanary in CI: write the workflow, post the comment"
    )
    actions = ci.add_subparsers(
        dest="ci_command", metavar="ACTION", required=True, parser_class=Parser
    )
    init = actions.add_parser(
        "init",
        help="write a GitHub Actions workflow or a GitLab CI job for a self-hosted GPU runner",
    )
    init.add_argument("platform", choices=PLATFORMS)
    init.add_argument(
        "--out",
        type=Path,
        help="where to write it (default .github/workflows/torchcanary.yml or .gitlab-ci.yml)",
    )
    init.add_argument(
        "--runner-label",
        action="append",
        dest="runner_labels",
        metavar="LABEL",
        help="runner label (GitHub, after self-hosted) or tag (GitLab); repeatable (default gpu)",
    )
    init.add_argument(
        "--schedule", default=DEFAULT_SCHEDULE, help=f"cron line (default {DEFAULT_SCHEDULE!r})"
    )
    init.add_argument(
        "--pin-file",
        default=DEFAULT_PIN_FILE,
        help="the file that pins the candidate; a pull request changing it runs the job "
        f"(default {DEFAULT_PIN_FILE})",
    )
    init.add_argument(
        "--run-args",
        default="",
        help="extra arguments for `torchcanary run`, e.g. '--config ci.toml'",
    )
    init.add_argument(
        "--timeout-minutes", type=int, default=360, help="the job's limit (default 360)"
    )
    init.add_argument("--force", action="store_true", help="replace an existing file")

    comment = actions.add_parser(
        "comment",
        help="post, or update, the one pull-request comment with a run's summary (go or no-go)",
    )
    comment.add_argument("platform", choices=PLATFORMS)
    comment.add_argument(
        "--results", type=Path, required=True, metavar="DIR", help="the run's output folder"
    )
    comment.add_argument(
        "--marker",
        default="torchcanary",
        help="names the comment to update; one per job, e.g. a profile (default torchcanary)",
    )
    return {"ci": _cmd_ci}


def _cmd_ci(args: argparse.Namespace, console: Console) -> int:
    if args.ci_command == "init":
        return _init(args, console)
    return _comment(args, console)


def _init(args: argparse.Namespace, console: Console) -> int:
    from torchcanary.ci.init import DEFAULT_LABELS, write

    options = CiOptions(
        platform=args.platform,
        runner_labels=tuple(args.runner_labels or DEFAULT_LABELS),
        schedule=args.schedule,
        pin_file=args.pin_file,
        run_args=args.run_args,
        timeout_minutes=args.timeout_minutes,
    )
    path = write(options, args.out, args.force)
    console.print(f"wrote {path}", markup=False, highlight=False)
    return EXIT_GO


def _comment(args: argparse.Namespace, console: Console) -> int:
    from torchcanary.ci.comment import comment_body, github_thread, gitlab_thread, post_or_update

    body = comment_body(args.results, args.marker)  # a missing run is an error anywhere
    thread = github_thread() if args.platform == "github" else gitlab_thread()
    if thread is None:
        console.print(
            "ci comment: not posted: this job is not for a pull or merge request", markup=False
        )
        return EXIT_GO
    how, comment_id = post_or_update(thread, body, args.marker)
    console.print(f"ci comment: {how} comment {comment_id}", markup=False, highlight=False)
    return EXIT_GO
