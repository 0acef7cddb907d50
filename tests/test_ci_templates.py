"""``torchcanary ci init`` and ``ci comment``: the templates validate against the
platforms' own schemas (SchemaStore's, vendored in fixtures/ci_schemas/ with their source),
and their shell runs for real: a real (small) qualification in a temporary project, the
job summary, the evidence check, and the one comment posted to a local HTTP server that
stands in for the GitHub REST and GitLab notes APIs (the real ones cannot be reached from
here). The marketplace actions (checkout, upload-artifact) do not run here; the upload's
globs are checked against the files the run wrote instead. The pip install step is left
out: this checkout is installed already, and PyPI's torchcanary is not this one.

actionlint is not run: its PyPI wrapper downloads the binary while building, which fails
here, and there is no Go toolchain (fixtures/ci_schemas/README.md).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from cli_helpers import FIXTURES, run_canary_here
from env_specs import BASELINE_SPEC, CANDIDATE_SPEC
from torchcanary.ci.init import CiOptions, render

SCHEMAS = FIXTURES / "ci_schemas"
TOKEN = "tok-sEcReT-4242"
RUN_ARGS = (
    f"--only claims --probes sanity.version-pin --quiet "
    f"--baseline '{BASELINE_SPEC}' --candidate '{CANDIDATE_SPEC}'"
)


def _workflow(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    if True in data:  # PyYAML reads the key `on` as YAML 1.1's boolean; GitHub does not
        data["on"] = data.pop(True)
    return dict(data)


@pytest.mark.parametrize(
    "options",
    [
        CiOptions("github"),
        CiOptions(
            "github", ("h100", "linux"), "15 2 * * 1-5", "requirements/torch.txt", "--only claims"
        ),
        CiOptions("gitlab"),
        CiOptions("gitlab", ("h100", "cuda-12"), "0 4 * * *", "canary.toml", "--skip drill"),
    ],
    ids=["github", "github-flags", "gitlab", "gitlab-flags"],
)
def test_templates_validate_against_the_platforms_schemas(options: CiOptions):
    text = render(options)
    schema_file = "github-workflow.json" if options.platform == "github" else "gitlab-ci.json"
    schema = json.loads((SCHEMAS / schema_file).read_text())
    data = _workflow(text)
    jsonschema.validate(data, schema)
    assert "@@" not in text and options.pin_file in text and options.run_args in text
    if options.platform == "github":
        job = data["jobs"]["qualify"]
        assert data["on"]["pull_request"]["paths"] == [options.pin_file]
        assert data["on"]["schedule"] == [{"cron": options.schedule}]
        assert job["runs-on"] == ["self-hosted", *options.runner_labels]
        assert all(step.get("if") for step in job["steps"][3:])  # after the run: always
    else:
        job = data["torchcanary"]
        assert job["tags"] == list(options.runner_labels)
        assert job["artifacts"]["when"] == "always"
        assert {"changes": [options.pin_file]}.items() <= job["rules"][-1].items()


def test_bad_flags_are_one_line_errors(tmp_path: Path):
    bad = run_canary_here("ci", "init", "github", "--schedule", "nightly", cwd=tmp_path)
    assert bad.returncode == 2 and "five-field cron" in bad.stderr
    ok = run_canary_here("ci", "init", "gitlab", "--runner-label", "h100", cwd=tmp_path)
    assert ok.returncode == 0 and (tmp_path / ".gitlab-ci.yml").is_file()
    again = run_canary_here("ci", "init", "gitlab", cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr


class FakeApi:
    """GitHub's issue comments and GitLab's MR notes, as far as ``ci comment`` uses them."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.comments: dict[int, str] = {}
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, data: Any) -> None:
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                api.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": body,
                    }
                )
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self._answer(401, {"message": "Bad credentials"})
                elif self.command == "GET":
                    page = int(self.path.rsplit("page=", 1)[1])
                    listed = [{"id": i, "body": b} for i, b in sorted(api.comments.items())]
                    self._answer(200, listed[(page - 1) * 100 : page * 100])
                elif self.command == "POST":
                    new_id = len(api.comments) + 1
                    api.comments[new_id] = body["body"]
                    self._answer(201, {"id": new_id, "body": body["body"]})
                else:  # PATCH (GitHub) or PUT (GitLab) of .../<id>
                    comment_id = int(self.path.rstrip("/").rsplit("/", 1)[1])
                    api.comments[comment_id] = body["body"]
                    self._answer(200, {"id": comment_id, "body": body["body"]})

            do_GET = do_POST = do_PATCH = do_PUT = _handle

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def calls(self) -> list[tuple[str, str]]:
        return [(r["method"], r["path"].split("?")[0]) for r in self.requests]


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()
    thread.join()


def _shell(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A step's script as the runners start it: bash with errexit and pipefail."""
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _ci_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    env.update(extra)
    return env


def _token_only_in_authorization(api: FakeApi, outputs: list[str]) -> None:
    for request in api.requests:
        assert request["headers"]["Authorization"] == f"Bearer {TOKEN}"
        others = {k: v for k, v in request["headers"].items() if k != "Authorization"}
        assert TOKEN not in json.dumps([request["path"], request["body"], others])
    assert all(TOKEN not in text for text in outputs)


@pytest.mark.torch_envs  # the job runs torchcanary on the real environments
def test_github_workflow_runs_for_real_posts_then_updates_one_comment(tmp_path: Path, api: FakeApi):
    steps = _workflow(render(CiOptions("github", run_args=RUN_ARGS)))["jobs"]["qualify"]["steps"]
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7}}))
    files = {name: tmp_path / name for name in ("output", "summary")}
    env = _ci_env(
        tmp_path,
        GITHUB_OUTPUT=str(files["output"]),
        GITHUB_STEP_SUMMARY=str(files["summary"]),
        GITHUB_EVENT_PATH=str(event),
        GITHUB_REPOSITORY="team/trainer",
        GITHUB_API_URL=api.url,
        GITHUB_RUN_ID="1",
    )
    project = tmp_path / "project"
    project.mkdir()
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    for step in steps:
        if "uses" in step or step.get("id") == "install":
            continue
        step_env = dict(env)
        for key, value in (step.get("env") or {}).items():  # the only expressions used
            value = value.replace("${{ secrets.GITHUB_TOKEN }}", TOKEN)
            exit_code = dict(
                line.split("=", 1) for line in files["output"].read_text().splitlines()
            ).get("exit_code", "")
            step_env[key] = value.replace("${{ steps.qualify.outputs.exit_code }}", exit_code)
        outputs[step["name"]] = _shell(step["run"], project, step_env)
    for name, done in outputs.items():
        assert done.returncode == 0, (name, done.stdout, done.stderr)
    assert "exit_code=0" in files["output"].read_text()
    summary = files["summary"].read_text()
    run_dir = (project / "canary-results" / "latest").resolve()
    assert f"run {run_dir.name}, digest sha256:" in summary
    assert "verify: match" in outputs["Qualify"].stdout
    assert f"evidence: run {run_dir.name}, digest sha256:" in outputs["Qualify"].stdout
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    for pattern in upload["with"]["path"].split():
        assert glob.glob(str(project / pattern)), pattern
    comments = "/repos/team/trainer/issues/7/comments"
    assert api.calls() == [("GET", comments), ("POST", comments)]
    first = api.comments[1]
    assert (
        first.startswith("<!-- torchcanary-comment:torchcanary -->") and "Verdict **go**" in first
    )

    # The next run (here, its comment step again) updates the same comment.
    comment_step = next(s for s in steps if s.get("name") == "Pull-request comment")
    again = _shell(comment_step["run"], project, env | {"GITHUB_TOKEN": TOKEN})
    assert again.returncode == 0 and "updated comment 1" in again.stdout, again.stderr
    assert api.calls()[-1] == ("PATCH", "/repos/team/trainer/issues/comments/1")
    assert list(api.comments) == [1]
    texts = [d.stdout + d.stderr for d in [*outputs.values(), again]]
    _token_only_in_authorization(api, texts)

    # The gate fails the job on a no-go, and on a run that never said.
    gate = next(s for s in steps if s.get("name") == "Gate on the verdict")
    assert _shell(gate["run"], project, env | {"QUALIFY_EXIT": "1"}).returncode == 1
    assert _shell(gate["run"], project, env | {"QUALIFY_EXIT": ""}).returncode == 3

    # The evidence: kept in the store too, and a changed policy is named.
    store = str(project / "canary-results" / "canary.db")
    checked = run_canary_here("verify", str(run_dir), "--store", store, cwd=project)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    results = json.loads((run_dir / "results.json").read_text())
    results["run"]["plan"]["policy"]["block_on_not_run"] = False
    (tmp_path / "edited.json").write_text(json.dumps(results))
    edited = run_canary_here("verify", str(tmp_path / "edited.json"), cwd=project)
    assert edited.returncode == 1 and "policy: differs" in edited.stdout


@pytest.mark.torch_envs  # the job runs torchcanary on the real environments
def test_gitlab_job_runs_for_real_and_keeps_one_note_through_no_go_and_go(
    tmp_path: Path, api: FakeApi
):
    def script(run_args: str) -> list[str]:
        job = _workflow(render(CiOptions("gitlab", run_args=run_args)))["torchcanary"]
        assert job["artifacts"]["reports"]["junit"] == "torchcanary-outputs/junit.xml"
        return [line for line in job["script"] if "pip install" not in line]

    env = _ci_env(
        tmp_path,
        CI_MERGE_REQUEST_IID="12",
        CI_API_V4_URL=api.url + "/api/v4",
        CI_PROJECT_ID="99",
        TORCHCANARY_GITLAB_TOKEN=TOKEN,
    )
    project = tmp_path / "project"
    project.mkdir()
    notes = "/api/v4/projects/99/merge_requests/12/notes"
    # A real no-go (the probe gets no time to answer, so it says nothing: blocking).
    no_go = _shell("\n".join(script(RUN_ARGS + " --probe-timeout 0.01")), project, env)
    assert no_go.returncode == 1, no_go.stdout + no_go.stderr
    assert "torchcanary exit code 1" in no_go.stdout and "created comment 1" in no_go.stdout
    assert "Verdict **no-go**" in api.comments[1]
    assert (project / "torchcanary-outputs" / "junit.xml").is_file()
    assert (project / "torchcanary-outputs" / "summary.md").is_file()
    assert api.calls() == [("GET", notes), ("POST", notes)]

    # The next pipeline is a go: the same note is updated, with the new run's digest.
    lines = script(RUN_ARGS)
    go = _shell("\n".join(lines), project, env)
    assert go.returncode == 0 and "updated comment 1" in go.stdout, go.stdout + go.stderr
    assert api.calls()[-2:] == [("GET", notes), ("PUT", f"{notes}/1")]
    run_id = (project / "canary-results" / "latest").resolve().name
    assert list(api.comments) == [1] and "Verdict **go**" in api.comments[1]
    assert f"run {run_id}, digest sha256:" in api.comments[1]
    _token_only_in_authorization(api, [d.stdout + d.stderr for d in (no_go, go)])

    # No token: one line naming the variable to set, nothing sent.
    sent = len(api.requests)
    comment_line = next(line for line in lines if "ci comment" in line)
    no_token = {k: v for k, v in env.items() if k != "TORCHCANARY_GITLAB_TOKEN"}
    refused = _shell(comment_line, project, no_token)
    assert refused.returncode == 2 and "TORCHCANARY_GITLAB_TOKEN is not set" in refused.stderr
    assert len(api.requests) == sent
