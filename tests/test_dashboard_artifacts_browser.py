"""The dashboard's goal page in headless Chromium shows what a human reviews: each artifact a
goal's evidence recorded (path, sha256, a link to a read-only view), and beside a gate the artifact
recorded to decide it (a diff), as text, never markup; changed behind LoopX's back it is TAMPERED
and not shown. Generic: no capability is involved, the artifacts are saved and recorded by hand."""

from __future__ import annotations

import json

import pytest

from tests.test_dashboard_browser import WAIT, browser, cli, dashboard  # noqa: F401  (fixtures)

pytestmark = pytest.mark.browser

DIFF = "--- a/conftest.py\n+++ b/conftest.py\n+<script>window.pwned = 1</script>\n+calc.add = lambda a, b: 5\n"


def test_the_goal_page_links_the_packet_and_shows_a_gates_diff_as_text(browser, dashboard, sqlite_url):  # noqa: F811
    from pathlib import Path

    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from loopx.ledger import artifacts
    from loopx.ledger.registry import Registry

    goal = cli(sqlite_url, "project-prompt", "create", "--title", "Release", "--description", "d")["id"]
    cli(sqlite_url, "todo", "add", goal, "--text", "work")
    gate = cli(sqlite_url, "gate", "add", goal, "--title", "Accept changed tests", "--blocks", "all")["id"]
    with Registry.open(sqlite_url) as reg, reg.read() as tx:
        packet = artifacts.save(tx, goal, "handoff.md", b"# Reviewer packet\nroot cause: add subtracted\n")
        diff = artifacts.save(tx, goal, f"test-changes-{gate}.diff", DIFF.encode())
    cli(sqlite_url, "evidence", "add", "--goal-id", goal, "--kind", "handoff", "--summary", "packet",
        "--file", packet["path"])
    cli(sqlite_url, "evidence", "add", "--goal-id", goal, "--kind", "test_changes", "--summary", "diff",
        "--file", diff["path"], "--data", json.dumps({"gate_id": gate}))

    # The goal page renders again on each refresh (on load, on the stream's first event): an element
    # found a moment ago may be gone, so each wait reads what it needs in one go and tries again.
    wait = WebDriverWait(browser, WAIT, ignored_exceptions=(StaleElementReferenceException,))
    browser.get(f"{dashboard.url}#{goal}")
    card = wait.until(lambda d: (lambda t: "handoff.md" in t and t)(d.find_element(By.ID, "artifacts").text))
    assert packet["sha256"] in card and packet["path"] in card
    href = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#artifacts li[data-artifact='handoff.md'] a")
                      .get_attribute("href"))
    assert href.endswith(f"/api/goals/{goal}/artifacts/handoff.md")

    # Beside the gate: the diff, as text (the <script> in it is shown, never run).
    pre = wait.until(lambda d: (lambda t: "calc.add" in t and t)(
        d.find_element(By.CSS_SELECTOR, f"#gates li[data-gate-id='{gate}'] pre.artifact-text").text))
    assert "+<script>window.pwned = 1</script>" in pre
    assert browser.execute_script("return window.pwned === undefined")
    assert not browser.find_elements(By.CSS_SELECTOR, "#gates script")

    # The link opens the packet itself, read-only.
    browser.get(href)
    assert "root cause: add subtracted" in browser.find_element(By.TAG_NAME, "body").text

    # Changed behind LoopX's back: the page says TAMPERED and shows none of it.
    Path(diff["path"]).write_text("+harmless\n")
    cli(sqlite_url, "todo", "add", goal, "--text", "more")  # a new revision: the page re-reads the goal
    browser.get(f"{dashboard.url}#{goal}")
    item = wait.until(lambda d: (lambda t: "TAMPERED" in t and t)(
        d.find_element(By.CSS_SELECTOR, f"#gates li[data-gate-id='{gate}']").text))
    assert "+harmless" not in item and "calc.add" not in item
