"""The UI in a real headless Chromium (Debian's package, driven by Playwright): live runs page, filtering by
filter_reason, a fuzzy-duplicate pair. Screenshots go to build/ui-screenshots/ (ZEPHYR_UI_SCREENSHOTS overrides).

`make test` and `make test-ui` install Debian's Chromium first where they can (.ci/install-chromium: root with
apt-get); they skip only where that was impossible, and the reason is in pytest's summary line
("10 browser tests skipped (no Chromium: not root ...)", see conftest.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("ZEPHYR_CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(os.environ.get("ZEPHYR_UI_SCREENSHOTS", Path(__file__).resolve().parents[2] / "build" / "ui-screenshots"))
ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def _why_no_chromium() -> str:
    """Why Chromium is missing: what .ci/install-chromium found (`make test` runs it), else how to get it."""
    reason = Path(__file__).resolve().parents[2] / "build" / "chromium-missing.txt"
    if reason.is_file():
        return reason.read_text().strip()
    return "`make test` installs it where it can (root with apt-get: .ci/install-chromium)"


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser tests skipped: Playwright is not installed (the test extra has it: make install)")
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        pytest.skip(f"browser tests skipped: no Chromium at {CHROMIUM}: {_why_no_chromium()}")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    blocked: list[str] = []
    # nothing may come from outside the server: no CDN, no fonts
    context.route(
        "**/*",
        lambda route: (
            route.continue_()
            if route.request.url.startswith("http://127.0.0.1")
            else (blocked.append(route.request.url), route.abort())
        ),
    )
    pg = context.new_page()
    yield pg
    context.close()
    assert not blocked, f"the page tried to load external resources: {blocked}"


def test_runs_page_follows_a_live_run(page, ui_server, ui_root: Path) -> None:
    page.goto(ui_server.base + "/")
    page.screenshot(path=str(SHOTS / "runs-steps.png"), full_page=True)
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("live_run.py")), str(ui_root), "8", "0.8"])
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            cell = page.locator("#live .shards").first
            # the root has other runs (the recipe's own record): follow this process's run only
            if cell.count() and f"pid {proc.pid}" in page.locator("#live .runhead").inner_text():
                text = cell.inner_text()
                if not seen or text != seen[-1]:
                    seen.append(text)
                    if len(seen) == 3:
                        page.screenshot(path=str(SHOTS / "runs-live.png"), full_page=True)
                if text == "8/8" and "succeeded" in page.locator("#live-status").inner_text():
                    break
            time.sleep(0.25)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    done = [int(s.split("/")[0]) for s in seen]
    assert done[-1] == 8 and len(done) >= 3 and done == sorted(done), seen  # it rose without a reload
    assert "planted failure" in page.locator("#live table.retries").inner_text()
    page.screenshot(path=str(SHOTS / "runs-live-done.png"), full_page=True)


def test_filter_documents_by_filter_reason(page, ui_server) -> None:
    page.goto(ui_server.base + "/documents")
    page.click("#datasets a:text-is('marked')")
    page.fill("#filter", 'filter_reason == "exact_duplicate"')
    page.click("#apply")
    page.wait_for_selector("#docs tbody tr")
    header = [h.inner_text() for h in page.locator("#docs thead th").all()]
    column = header.index("filter_reason")
    reasons = {row.locator("td").nth(column).inner_text() for row in page.locator("#docs tbody tr").all()}
    assert reasons == {"exact_duplicate"}
    page.screenshot(path=str(SHOTS / "documents-filtered.png"), full_page=True)
    keeper = page.locator("#docs a.dup_keeper").first
    keeper_id = keeper.inner_text()
    keeper.click()  # the copy kept for this duplicate, in the same folder
    page.wait_for_selector("#docs tbody tr")
    assert page.locator("#docs tbody tr").count() == 1
    assert keeper_id in page.locator("#docs tbody tr").first.inner_text() and page.locator("#filter").input_value()
    page.go_back()
    page.locator("#docs a.open").first.click()
    page.wait_for_selector("#doctext")
    assert "exact_duplicate" in page.locator("#fields").inner_text()
    page.screenshot(path=str(SHOTS / "document.png"), full_page=True)


def test_open_a_fuzzy_duplicate_pair(page, ui_server) -> None:
    page.goto(ui_server.base + "/removed")
    page.screenshot(path=str(SHOTS / "removed-steps.png"), full_page=True)
    page.click("#removed-steps a.reason:has-text('fuzzy_duplicate')")
    page.wait_for_selector("#removed tbody tr")
    page.screenshot(path=str(SHOTS / "removed-fuzzy.png"), full_page=True)
    page.locator("#removed a.removed-id").first.click()
    page.wait_for_selector("#jaccard")
    assert float(page.locator("#jaccard").inner_text()) >= 0.8
    assert page.locator("#kept-doc .doctext").inner_text() and page.locator("#removed-doc .doctext").inner_text()
    assert page.locator(".pair mark").count() >= 1  # the differing passages are highlighted
    page.screenshot(path=str(SHOTS / "removed-fuzzy-pair.png"), full_page=True)


def test_screenshots_of_stores_and_training(page, ui_server) -> None:
    q = urllib.parse.quote
    stores = ui_server.json("/api/stores")
    training = ui_server.json("/api/training")
    store = stores["stores"][0]["path"]
    shots = {
        "stores": "/stores",
        "store": f"/stores/view?path={q(store)}",
        "store-tokens": f"/stores/doc?path={q(store)}&index=0",
        "mixture": f"/stores/mixture?path={q(stores['mixtures'][0])}",
        "training-run": f"/training/run?path={q(next(p for p in training['runs'] if p.startswith('train-')))}",
        "ablation-report": f"/training/report?path={q(training['reports'][0])}",
    }
    for name, path in shots.items():
        page.goto(ui_server.base + path)
        page.wait_for_selector("main h1")
        assert page.locator(".error").count() == 0, name
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    assert page.locator("#verdicts").inner_text().count("better") >= 1
    # a legend entry hides its series
    page.goto(ui_server.base + shots["training-run"])
    page.locator("figure.line-chart button.legend").first.click()
    assert page.locator("figure.line-chart g.series").first.get_attribute("style") == "display: none;"
    assert page.locator("#tokens").count() == 0
    page.goto(ui_server.base + shots["store-tokens"])
    assert page.locator("#tokens .tok").count() > 10


def test_search_box_finds_a_removed_document_and_its_tokens(page, ui_server) -> None:
    steps = {s["step"].split("-")[0]: s for s in ui_server.json("/api/removed")["steps"]}
    exact = ui_server.json(f"/api/removed?step={urllib.parse.quote(steps['exact_dedup']['step'])}&limit=1000")
    fuzzy = ui_server.json(f"/api/removed?step={urllib.parse.quote(steps['fuzzy_dedup']['step'])}&limit=1000")
    gone = {r["id"] for r in exact["rows"] + fuzzy["rows"]}
    row = next(r for r in exact["rows"] if r["keeper"] not in gone)
    page.goto(ui_server.base + "/stores")
    page.fill("#find-box", row["id"])
    page.press("#find-box", "Enter")
    page.wait_for_selector("#find-removed")
    assert "exact_duplicate" in page.locator("#find-removed").inner_text()
    assert row["keeper"] in page.locator("#find-removed").inner_text()
    page.screenshot(path=str(SHOTS / "find-removed.png"), full_page=True)
    page.locator("#find-removed a", has_text=row["keeper"]).first.click()  # the document kept in its place
    page.wait_for_selector("#find-tokens")
    page.locator("#find-tokens a", has_text="document").first.click()
    page.wait_for_selector("#tokens")
    assert page.locator("#tokens .tok").count() > 0
    page.screenshot(path=str(SHOTS / "find-tokens.png"), full_page=True)
