"""``ci comment``: one pull-request (merge-request) comment per job, posted on the first
run and updated in place on every later one, go or no-go, so a silent bot never looks
like a healthy one.

The comment is found again by a hidden HTML marker in its body. GitHub is reached through
its REST API (issue comments), GitLab through its notes API, with the standard library
only. The token comes from the environment and goes nowhere but the Authorization header:
it is never printed, and error messages carry the API's status and reason, not the request.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchcanary import __version__
from torchcanary.errors import CanaryError
from torchcanary.report.evidence import citation, recorded_evidence

MAX_BODY = 60_000  # GitHub refuses comments over 65,536 characters; GitLab allows more
PAGE = 100


@dataclass(frozen=True)
class Thread:
    """Where the comment goes: the API's endpoints for one pull or merge request."""

    platform: str
    list_url: str  # GET, paged; POST creates
    token: str

    def item_url(self, comment_id: int) -> str:
        """The URL that updates comment ``comment_id`` (PATCH on GitHub, PUT on GitLab)."""
        if self.platform == "github":
            return self.list_url.split("/issues/")[0] + f"/issues/comments/{comment_id}"
        return f"{self.list_url}/{comment_id}"

    @property
    def update_method(self) -> str:
        return "PATCH" if self.platform == "github" else "PUT"


def _need(name: str, why: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise CanaryError(f"{name} is not set; {why}")
    return value


def github_thread() -> Thread | None:
    """The pull request of this GitHub Actions run; None when the run is not for one."""
    event_path = os.environ.get("GITHUB_EVENT_PATH", "")
    event = json.loads(Path(event_path).read_text()) if event_path else {}
    number = (event.get("pull_request") or {}).get("number")
    if number is None:
        return None
    api = os.environ.get("GITHUB_API_URL", "https://api.github.com").rstrip("/")
    repo = _need("GITHUB_REPOSITORY", "run inside GitHub Actions or set it to OWNER/NAME")
    token = _need("GITHUB_TOKEN", "pass `GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}` in env:")
    return Thread("github", f"{api}/repos/{repo}/issues/{int(number)}/comments", token)


def gitlab_thread() -> Thread | None:
    """The merge request of this GitLab CI job; None when the pipeline is not for one."""
    iid = os.environ.get("CI_MERGE_REQUEST_IID", "")
    if not iid:
        return None
    api = _need("CI_API_V4_URL", "run inside GitLab CI or set it to https://HOST/api/v4").rstrip(
        "/"
    )
    project = _need("CI_PROJECT_ID", "run inside GitLab CI or set it to the project's id")
    token = _need(
        "TORCHCANARY_GITLAB_TOKEN",
        "add a project access token with the api scope as a masked CI/CD variable of that name",
    )
    return Thread("gitlab", f"{api}/projects/{project}/merge_requests/{int(iid)}/notes", token)


def comment_body(results_dir: Path, marker: str) -> str:
    """The comment: the hidden marker, the run's summary.md and the line to cite."""
    summary_path = results_dir / "summary.md"
    results_path = results_dir / "results.json"
    if not summary_path.is_file() or not results_path.is_file():
        raise CanaryError(
            f"no summary.md and results.json in {results_dir}; pass a run's output folder"
        )
    results, evidence = recorded_evidence(results_path)
    run_id = str((results.get("run") or {}).get("run_id", "?"))
    cited = citation(run_id, evidence) if evidence is not None else f"run {run_id}"
    summary = summary_path.read_text()
    verdict = results.get("decision") or "none"
    footer = f"\n\n---\nVerdict **{verdict}**, {cited} (torchcanary {__version__})."
    room = MAX_BODY - len(footer) - len(marker) - 200
    if len(summary) > room:
        summary = summary[:room] + "\n\n(cut here: the full summary.md is in the job's outputs)"
    return f"{_marker_line(marker)}\n{summary.rstrip()}{footer}\n"


def _marker_line(marker: str) -> str:
    return f"<!-- torchcanary-comment:{marker} -->"


def _call(thread: Thread, method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(
        url,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={
            "Authorization": f"Bearer {thread.token}",
            "Accept": "application/vnd.github+json"
            if thread.platform == "github"
            else "application/json",
            "Content-Type": "application/json",
            "User-Agent": f"torchcanary/{__version__}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        hint = " (check the token's permissions)" if exc.code in (401, 403, 404) else ""
        raise CanaryError(
            f"the {thread.platform} API answered {exc.code} {exc.reason} to {method} "
            f"{url.split('?')[0]}{hint}"
        ) from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CanaryError(
            f"cannot reach the {thread.platform} API at {url.split('?')[0]}: {reason}"
        ) from None


def _existing(thread: Thread, marker: str) -> int | None:
    """The id of the comment an earlier run left (its body starts with the marker)."""
    wanted = _marker_line(marker)
    page = 1
    while True:
        comments = _call(thread, "GET", f"{thread.list_url}?per_page={PAGE}&page={page}")
        for comment in comments or []:
            if str(comment.get("body", "")).startswith(wanted):
                return int(comment["id"])
        if not comments or len(comments) < PAGE:
            return None
        page += 1


def post_or_update(thread: Thread, body: str, marker: str) -> tuple[str, int]:
    """Update the earlier comment with ``marker``, else create one: ("updated"/"created", id)."""
    found = _existing(thread, marker)
    if found is None:
        created = _call(thread, "POST", thread.list_url, {"body": body})
        return "created", int(created["id"])
    _call(thread, thread.update_method, thread.item_url(found), {"body": body})
    return "updated", found
