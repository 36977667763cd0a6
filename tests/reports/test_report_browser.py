"""The HTML report in a real browser (headless Chromium, the system's /usr/bin/chromium driven by Playwright): no
console errors, nothing fetched from the network, every chart drawn, the host and rule filters work, readable at a
laptop's and a phone's width. Skipped, saying so, when Chromium or Playwright is missing (make e2e installs them)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import psycopg
import pytest

CHROMIUM = os.environ.get("INDEXER_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    sync_playwright = None

pytestmark = [
    pytest.mark.skipif(sync_playwright is None, reason="playwright not installed (pip install -e '.[test]'); "
                                                       "browser check of the report skipped"),
    pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason=f"no Chromium at {CHROMIUM} (make e2e installs "
                                                                "Debian's chromium); browser check skipped"),
]


@pytest.fixture(scope="module")
def report(demo_db_url, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    run = subprocess.run([sys.executable, "-m", "indexer", "report", "--database-url", demo_db_url, "--html",
                          str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    with psycopg.connect(demo_db_url) as conn:
        counts = dict(conn.execute("SELECT participant, count(*) FROM api.disputable_penalties GROUP BY 1"))
        rules = dict(conn.execute("SELECT rule, count(*) FROM api.disputable_penalties GROUP BY 1"))
        at = {(h, e): n for h, e, n in conn.execute("SELECT participant, epoch_index, count(*) "
                                                     "FROM api.disputable_penalties GROUP BY 1, 2")}
    return out, counts, rules, at


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _open(browser, path, width, height):
    page = browser.new_page(viewport={"width": width, "height": height})
    problems, fetched = [], []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))

    def route(r):
        if not r.request.url.startswith(("file:", "data:")):
            fetched.append(r.request.url)
            return r.abort()
        return r.continue_()

    page.route("**/*", route)
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, problems, fetched


@pytest.mark.parametrize("width, height", [(1366, 768), (390, 844)], ids=["laptop", "phone"])
def test_report_renders_filters_and_fits(browser, report, width, height):
    path, counts, rules, counts_at = report
    page, problems, fetched = _open(browser, path, width, height)
    # every chart drawn: each SVG has a visible box and shapes in it
    charts = page.eval_on_selector_all("svg", """svgs => svgs.map(s => {
        const r = s.getBoundingClientRect();
        return {w: r.width, h: r.height, shapes: s.querySelectorAll('rect, polyline, path, circle').length}; })""")
    assert len(charts) >= 4 and all(c["w"] > 0 and c["h"] > 0 and c["shapes"] > 0 for c in charts), charts
    heat = page.eval_on_selector("#heatmap", "s => s.querySelectorAll('.cell rect').length")
    assert heat >= len(counts)
    total = sum(counts.values())
    assert page.locator("#penalties tbody tr:visible").count() == total
    host = max(counts, key=counts.get)
    page.select_option("#f-host", host)
    assert page.locator("#penalties tbody tr:visible").count() == counts[host] < total
    assert page.locator("#shown").inner_text() == str(counts[host])
    assert set(page.eval_on_selector_all("#penalties tbody tr:not([hidden])", "rs => rs.map(r => r.dataset.host)")
               ) == {host}
    page.click("#f-clear")
    rule = min(rules, key=rules.get)
    page.select_option("#f-rule", rule)
    assert page.locator("#penalties tbody tr:visible").count() == rules[rule]
    page.click("#f-clear")
    # a heatmap cell filters to its host and its epoch; clicking it again shows every row
    cell = page.locator(f'#heatmap .cell[data-host="{host}"]').first
    epoch = cell.get_attribute("data-epoch")
    cell.click()
    assert page.input_value("#f-host") == host
    picked = page.eval_on_selector_all("#penalties tbody tr:not([hidden])",
                                       "rs => rs.map(r => [r.dataset.host, r.dataset.epoch])")
    assert {tuple(r) for r in picked} <= {(host, epoch)}
    assert len(picked) == counts_at.get((host, int(epoch)), 0) <= counts[host]
    assert page.locator("#f-cell").is_visible()
    cell.click()
    assert page.locator("#penalties tbody tr:visible").count() == total and not page.locator("#f-cell").is_visible()
    cell.click()
    page.click("#f-cell")  # the "epoch N only (show all)" control clears it too
    assert page.locator("#penalties tbody tr:visible").count() == total
    page.locator(f'#heatmap .cell[data-host="{host}"]').first.click()
    page.locator("#penalties tbody tr:visible details summary").first.click()
    assert page.locator("#penalties tbody tr:visible details pre").first.is_visible()
    # readable: the page itself never scrolls sideways (wide tables scroll in their own box), text not tiny
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"page {overflow}px wider than a {width}px window"
    assert page.evaluate("parseFloat(getComputedStyle(document.body).fontSize)") >= 14
    assert page.locator("h2").first.is_visible()
    assert problems == [] and fetched == []
    page.close()
