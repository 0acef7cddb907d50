"""``torchcanary publish``: a store of two profiles and three candidates becomes a static
site whose regressions are what ``compare`` says, and re-publishing after one new run makes
again only the pages that run changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import run_canary_here
from site_helpers import T0, fill_qualification, fill_release_qualification
from torchcanary.publish.site import MANIFEST, publish
from torchcanary.sections import get_section
from torchcanary.store.location import open_store


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """The store, the site `torchcanary publish` made of it, and the runs by name."""
    workdir = tmp_path_factory.mktemp("publish")
    db = workdir / "canary.db"
    with open_store(str(db)) as store:
        runs = fill_release_qualification(store)
    done = run_canary_here("publish", "site", "--store", str(db), cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert "published 7 runs" in done.stdout and "1 open regression(s)" in done.stdout
    return db, workdir / "site", runs


def test_the_overview_has_a_cell_per_candidate_build_and_hardware(published) -> None:
    _, site, runs = published
    page = (site / "index.html").read_text()
    for name in ("h100-8x", "mi300-8x", "2.14.1rc1 +cu130", "2.14.1rc2 +cu130", "2.14.1 +cpu"):
        assert name in page
    # every run's report is there and linked, relative to the site
    for run_id in runs.values():
        assert (site / "runs" / run_id / "report.html").is_file()
        assert f'href="runs/{run_id}/report.html"' in page
    assert "drill kill:restart failed" in page  # what blocks 2.14.1 on mi300-8x
    for run_id in runs.values():  # a run whose results carry an evidence digest shows it
        results = json.loads((site / "runs" / run_id / "results.json").read_text())
        if isinstance(results.get("evidence"), dict):
            assert f'title="{results["evidence"]["digest"]}"' in page


def test_an_empty_store_publishes_a_page_that_says_so(tmp_path) -> None:
    with open_store(str(tmp_path / "canary.db")) as store:
        done = publish(store, tmp_path / "site")
    assert (done.runs, done.regressions) == (0, 0)
    assert "The store holds no runs yet." in (tmp_path / "site" / "index.html").read_text()
    assert (tmp_path / "site" / "regressions.txt").read_text().startswith("no open regressions")


def test_the_regressions_list_is_what_compare_says(published) -> None:
    db, site, runs = published
    [entry] = json.loads((site / "regressions.json").read_text())["regressions"]
    # mi300-8x: rc1 was go, 2.14.1 is no-go; h100-8x was no-go at rc2 but is go again
    assert (entry["hardware"], entry["run"], entry["last_go"]) == (
        "mi300-8x",
        runs["final mi300"],
        runs["rc1 mi300"],
    )
    done = run_canary_here(
        "compare", entry["last_go"], entry["run"], "--json", "--store", str(db), cwd=db.parent
    )
    assert done.returncode == 0, done.stderr
    changes = json.loads(done.stdout)["changes"]
    # compare lists the benchmark gone faster too; the regressions list only what got worse
    assert {
        "section": "bench",
        "item": "matmul.bf16",
        "before": "same",
        "after": "faster",
    }.items() <= next(c for c in changes if c["section"] == "bench").items()
    worse = [
        c
        for c in changes
        if c["after"] in get_section(c["section"]).worse_verdicts
        and c["before"] not in get_section(c["section"]).worse_verdicts
    ]
    assert entry["changes"] == worse
    assert [(c["section"], c["after"]) for c in entry["changes"]] == [("drill", "failed")]
    table = run_canary_here(
        "compare", entry["last_go"], entry["run"], "--store", str(db), cwd=db.parent
    )
    assert f"{len(changes)} changed ({len(worse)} for the worse)" in table.stdout
    text = (site / "regressions.txt").read_text()
    assert text.startswith(f"NO-GO 2.14.1 +cu130 on mi300-8x: run {runs['final mi300']}")
    assert "drill kill:restart (candidate): passed -> failed" in text
    assert "matmul.bf16" not in text  # the benchmark got faster: no regression


def test_history_pages_keep_hardware_and_build_variants_apart(published) -> None:
    _, site, _ = published
    [bench] = (site / "history" / "bench").glob("matmul.bf16-*.html")
    page = bench.read_text()
    headings = [line.split("</h2>")[0] for line in page.split("<h2>on ")[1:]]
    assert headings == ["AMD EPYC 9654, build cpu", "h100-8x, build cu130", "mi300-8x, build cu130"]
    assert page.count("<svg") == 3


def test_republishing_after_one_new_run_remakes_only_the_pages_it_changes(
    published, tmp_path
) -> None:
    db, _, runs = published
    copy = tmp_path / "canary.db"
    copy.write_bytes(db.read_bytes())
    out = tmp_path / "site"
    with open_store(str(copy), create=False) as store:
        first = publish(store, out)
        # a page made again is a new file (written aside, then moved over the old one)
        before = {path: _identity(path) for path in out.rglob("*.html")}
        again = publish(store, out)
        assert (again.rendered, again.kept) == ([], len(first.rendered))
        new = fill_qualification(store, "2.14.1", "mi300-8x", fleet=True, created_at=T0 + 9e4)
        third = publish(store, out)
    histories = sorted(p for p in third.rendered if p.startswith("history/"))
    assert sorted(third.rendered) == sorted(
        [f"runs/{new}/report.html", *histories, "index.html", "regressions.json", "regressions.txt"]
    )
    assert len(histories) == 3  # the new run's claim, benchmark and drill
    assert third.regressions == 0  # 2.14.1 is go again on mi300-8x
    manifest = json.loads((out / MANIFEST).read_text())
    assert new in manifest["runs"] and f"runs/{new}/report.html" in manifest["pages"]
    for path, stamp in before.items():
        page = path.relative_to(out).as_posix()
        remade = page in third.rendered
        assert (_identity(path) != stamp) == remade, page
    assert any(runs["rc1 h100"] in page for page in manifest["pages"])


def _identity(path: Path) -> tuple[int, int]:
    return path.stat().st_ino, path.stat().st_mtime_ns


def test_publish_reads_a_postgresql_store(postgres_url, tmp_path) -> None:
    with open_store(postgres_url) as store:
        fill_release_qualification(store)
        done = publish(store, tmp_path / "site")
    assert done.runs == 7 and done.regressions == 1
    assert (tmp_path / "site" / "index.html").is_file()


def test_publish_without_a_store_says_so_in_one_line(tmp_path) -> None:
    done = run_canary_here("publish", "site", "--store", str(tmp_path / "none.db"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"torchcanary: error: no store at {tmp_path / 'none.db'}; pass --store PATH"
    ]
    assert not (tmp_path / "site").exists()


def test_a_go_that_let_units_through_unchecked_never_shows_as_a_bare_go(tmp_path) -> None:
    with open_store(str(tmp_path / "canary.db")) as store:
        run_id = fill_qualification(store, "2.14.1", "h100-8x")
        store.finish_run(run_id, "go", {"reasons": [], "warnings": [], "not_checked": 2})
        publish(store, tmp_path / "site")
    page = (tmp_path / "site" / "index.html").read_text()
    assert '<span class="badge go">go with 2 units not checked</span>' in page
    assert ">go</span>" not in page
