"""The dashboard in headless Chromium: goals waiting for a person come first, with the command to type;
workers' heartbeats are in the header."""

from __future__ import annotations

import pytest

from tests.test_dashboard_browser import WAIT, browser, cli, dashboard  # noqa: F401  (fixtures)

pytestmark = pytest.mark.browser


def test_needs_you_first_with_the_command_and_the_workers_heartbeat(browser, dashboard, sqlite_url):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from loopx.values import clock
    from loopx.domain import supervision
    from loopx.ledger.registry import Registry

    quiet = cli(sqlite_url, "project-prompt", "create", "--title", "Quiet", "--description", "d")["id"]
    cli(sqlite_url, "todo", "add", quiet, "--text", "work")
    gated = cli(sqlite_url, "project-prompt", "create", "--title", "Deploy", "--description", "d")["id"]
    cli(sqlite_url, "todo", "add", gated, "--text", "work")
    gate = cli(sqlite_url, "gate", "add", gated, "--title", "Ship?", "--scope", "production")["id"]
    newest = cli(sqlite_url, "project-prompt", "create", "--title", "Newest", "--description", "d")["id"]
    cli(sqlite_url, "todo", "add", newest, "--text", "work")
    with Registry.open(sqlite_url) as reg:
        supervision.beat(reg, "w-dashboard1", host="box", pid=4242, started_at=clock.now(), goals=[quiet])

    wait = WebDriverWait(browser, WAIT)
    browser.get(dashboard.url)
    from selenium.common.exceptions import StaleElementReferenceException

    def first_goal(d, click=False):
        # The list is re-rendered whenever the registry moves (the page's live stream): read the
        # first entry whole, and again if it was replaced while being read.
        try:
            items = d.find_elements(By.CSS_SELECTOR, "#goals li")
            if not items:
                return False
            seen = (items[0].get_attribute("data-goal-id"), items[0].find_element(By.CSS_SELECTOR, ".needs-command").text)
            if click:
                items[0].click()
            return seen
        except StaleElementReferenceException:
            return False

    first_id, command = wait.until(first_goal)
    assert first_id == gated  # though two goals are newer
    approve = f"loopx gate approve --goal-id {gated} --gate-id {gate}"
    assert command == approve
    header = wait.until(lambda d: "w-dashboard1" in d.find_element(By.ID, "workers").text
                        and d.find_element(By.ID, "workers").text)
    assert "running" in header and "pid 4242 on box" in header and quiet in header

    assert wait.until(lambda d: first_goal(d, click=True))[0] == gated
    block = wait.until(lambda d: d.find_element(By.ID, "needs-you").is_displayed() and d.find_element(By.ID, "needs-you"))
    assert "Needs you: ask_user (gate pending)" in block.text and approve in block.text
    assert browser.find_element(By.ID, "decision-now").text.startswith("Decision now: ask_user (gate_pending)")
