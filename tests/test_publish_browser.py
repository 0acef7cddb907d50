"""The published site in real headless Chromium at a laptop's 1366x768: the overview, every
run page and every history page render without console errors or a horizontal scroll bar,
and every link of every page resolves to a file of the site (which works from a share)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import pytest

from site_helpers import fill_release_qualification
from test_report_browser import CHROMIUM, CHROMIUM_FLAGS
from torchcanary.publish.site import publish
from torchcanary.store.location import open_store

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason="not checked: Debian chromium is not installed"
    ),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("site")
    with open_store(str(workdir / "canary.db")) as store:
        fill_release_qualification(store)
        publish(store, workdir / "site")
    return workdir / "site"


def test_every_page_renders_readably_and_every_link_resolves(site: Path) -> None:
    from playwright.sync_api import sync_playwright

    pending, seen = [site / "index.html"], set()
    problems: list[str] = []
    broken: list[str] = []
    overflowing: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1366, "height": 768})
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        while pending:
            path = pending.pop()
            if path in seen:
                continue
            seen.add(path)
            page.goto(path.as_uri())
            page.wait_for_load_state("load")
            widths = page.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            if widths[0] > widths[1]:
                overflowing.append(f"{path.relative_to(site)}: {widths}")
            assert page.inner_text("h1").strip(), path
            for href in page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)"):
                target, anchor = urldefrag(href)
                parsed = urlparse(target)
                local = Path(unquote(parsed.path))
                if parsed.scheme != "file" or not local.is_relative_to(site):
                    broken.append(f"{path.relative_to(site)} -> {href} (leaves the site)")
                elif not local.is_file():
                    broken.append(f"{path.relative_to(site)} -> {href} (no such file)")
                elif anchor and f'id="{anchor}"' not in local.read_text():
                    broken.append(f"{path.relative_to(site)} -> {href} (no such anchor)")
                elif local.suffix == ".html":
                    pending.append(local)
        browser.close()
    assert problems == [] and broken == [] and overflowing == []
    # the walk from the overview reached every page of the site
    assert seen == set(site.rglob("*.html"))
    kinds = {path.relative_to(site).parts[0] for path in seen}
    assert kinds == {"index.html", "runs", "history"}
    assert len([p for p in seen if p.name == "report.html"]) == 7
