"""Deciding from the page, in a real headless Chromium, with both servers as real processes.

Three goals: one that needs a human (a pending gate on all of it), one whose run failed, and one
with a publish-like gate (``--scope production --blocks action:publish``) whose run left a review
packet. The dashboard (``loopx status-server``) links to the approvals page while it runs and shows
the three; the approvals page shows each pending gate's title, scope, what it blocks and the
packet's path and sha256, prefills no score, looks like the dashboard (same stylesheet, same
computed styles), and approving there lets the goal run next. Screenshots are kept in
``test-artifacts/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from approvals_helpers import cli, start_browser, WAIT

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts"


@pytest.fixture
def browser(tmp_path):
    driver = start_browser(tmp_path / "chromium-profile", "--window-size=1280,1000")
    yield driver
    driver.quit()


def _start(env, *args):
    proc = subprocess.Popen([sys.executable, "-m", "loopx", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return proc, json.loads(proc.stdout.readline())


def _stop(proc):
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def world(tmp_path):
    """Three goals, the approvals server and the dashboard, sharing one registry and data dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update(LOOPX_REGISTRY=str(tmp_path / "registry.db"), LOOPX_PLUGINS="approvals",
               HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    human = cli(env, "project-prompt", "create", "--title", "Migrate billing", "--description", "d")["id"]
    cli(env, "todo", "add", human, "--text", "Switch reads to the new cluster")
    cutover = cli(env, "gate", "add", human, "--title", "Cut over production traffic", "--scope", "safety")["id"]

    failed = cli(env, "project-prompt", "create", "--title", "Nightly import", "--description", "d")["id"]
    cli(env, "todo", "add", failed, "--text", "Import the feed")
    failed_run = cli(env, "quota", "should-run", failed)["interaction_contract"]["run_id"]
    cli(env, "run", "finish", "--run-id", failed_run, "--outcome", "failed", "--handoff", "import crashed")

    publish = cli(env, "project-prompt", "create", "--title", "Quarterly report", "--description", "d")["id"]
    cli(env, "todo", "add", publish, "--text", "Publish the report")
    cli(env, "action", "add", publish, "--name", "publish", "--", sys.executable, "-c", "print('published')")
    publish_gate = cli(env, "gate", "add", publish, "--title", "Publish report v3 to origin/main",
                        "--scope", "production", "--blocks", "action:publish")["id"]
    run = cli(env, "quota", "should-run", publish)["interaction_contract"]["run_id"]
    packet = tmp_path / "packet.md"
    packet.write_text("# Review packet\n\nWhat changed, and why.\n")
    cli(env, "evidence", "add", "--run-id", run, "--kind", "handoff", "--summary", "review packet",
         "--file", str(packet))
    cli(env, "run", "finish", "--run-id", run, "--handoff", "report ready; publish waits for the gate")

    approvals, info = _start(env, "approvals", "serve", "--port", "0")
    dashboard, dash = _start(env, "status-server", "--port", "0", "--json")
    try:
        yield {"env": env, "human": human, "cutover": cutover, "failed": failed, "failed_run": failed_run,
               "publish": publish, "publish_gate": publish_gate, "packet": str(packet),
               "packet_sha256": hashlib.sha256(packet.read_bytes()).hexdigest(),
               "approvals": approvals, "dashboard": dash["url"], **info}
    finally:
        _stop(dashboard)
        if approvals.poll() is None:
            _stop(approvals)


def _styles(driver, selector):
    return driver.execute_script(
        "const s = getComputedStyle(document.querySelector(arguments[0]));"
        "return [s.backgroundColor, s.color, s.fontFamily, s.fontSize, s.borderBottom];", selector)


def test_decide_from_the_page(browser, world):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT, ignored_exceptions=(StaleElementReferenceException,))
    css = lambda sel: browser.find_element(By.CSS_SELECTOR, sel)  # noqa: E731
    env = world["env"]

    # The dashboard re-renders as the registry changes: read an element's text in one go.
    text = lambda sel: wait.until(lambda d: d.find_element(By.CSS_SELECTOR, sel).text)  # noqa: E731

    # The dashboard: the link to the approvals page, and the three goals.
    browser.get(world["dashboard"])
    href = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#pages a[data-capability='approvals']")
                      .get_attribute("href"))
    assert href == world["url"]
    human = text(f"#goals li[data-goal-id='{world['human']}']")
    assert "needs you" in human and "gate pending" in human
    assert "last run failed" in text(f"#goals li[data-goal-id='{world['failed']}']")
    browser.get(world["dashboard"] + f"#{world['publish']}")
    gate = text(f"#gates li[data-gate-id='{world['publish_gate']}']")
    assert "Publish report v3 to origin/main" in gate and "production" in gate and "action:publish" in gate
    dashboard_look = {sel: _styles(browser, sel) for sel in ("body", "header", "header h1", ".card")}
    ARTIFACTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "dashboard-with-approvals-link.png"))

    # The approvals page: logged in with the one-time link.
    browser.get(world["login"])
    cutover = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, f".gate-card[data-gate-id='{world['cutover']}']"))
    assert cutover.find_element(By.CSS_SELECTOR, ".gate-title").text == "Cut over production traffic"
    assert cutover.find_element(By.CSS_SELECTOR, ".gate-scope").text == "safety"
    assert cutover.find_element(By.CSS_SELECTOR, ".gate-blocks").text == "all — every turn of this goal"
    assert "no_ready_work" not in css(f"article[data-goal-id='{world['human']}']").text

    pub = css(f".gate-card[data-gate-id='{world['publish_gate']}']")
    assert pub.find_element(By.CSS_SELECTOR, ".gate-title").text == "Publish report v3 to origin/main"
    assert pub.find_element(By.CSS_SELECTOR, ".gate-scope").text == "production"
    assert pub.find_element(By.CSS_SELECTOR, ".gate-blocks").text.startswith("action:publish — the action publish")
    assert pub.find_element(By.CSS_SELECTOR, ".packet-path").text == world["packet"]
    assert pub.find_element(By.CSS_SELECTOR, ".packet-sha256").text == world["packet_sha256"]

    # The failed goal: its run to score, with no score filled in; an empty score is not sent.
    failed = css(f"article[data-goal-id='{world['failed']}']")
    assert "failed" in failed.find_element(By.CSS_SELECTOR, f".reward-card[data-run-id='{world['failed_run']}']").text
    score = failed.find_element(By.NAME, "score")
    assert score.get_attribute("value") == "" and score.get_attribute("required") == "true"
    failed.find_element(By.CSS_SELECTOR, "form.reward button").click()
    assert not browser.find_elements(By.ID, "message")  # the browser kept the form: no request
    assert cli(env, "reward", "list", world["failed"]) == []

    # It looks like the dashboard: the same stylesheet, the same computed styles.
    assert {sel: _styles(browser, sel) for sel in dashboard_look} == dashboard_look
    with urllib.request.urlopen(world["url"] + "assets/dashboard.css") as resp:
        assert resp.read() == urllib.request.urlopen(world["dashboard"] + "assets/dashboard.css").read()
    policy = _header(world["url"] + "assets/approvals.css", "Content-Security-Policy")
    assert "style-src 'self'" in policy and "unsafe-inline" not in policy and "script-src" not in policy
    assert browser.save_screenshot(str(ARTIFACTS / "approvals.png"))

    # Before the decision the goal waits for a person; approve from the page; then it runs next.
    assert cli(env, "quota", "should-run", world["human"], "--dry-run")["decision"] == "ask_user"
    cutover = css(f".gate-card[data-gate-id='{world['cutover']}']")
    cutover.find_element(By.NAME, "comment").send_keys("window agreed")
    cutover.find_element(By.CSS_SELECTOR, "button[value='approve']").click()
    message = wait.until(lambda d: d.find_element(By.ID, "message")).text
    assert f"gate {world['cutover']} approved" in message
    assert not browser.find_elements(By.CSS_SELECTOR, f".gate-card[data-gate-id='{world['cutover']}']")
    gates = cli(env, "gate", "list", world["human"])
    assert [(g["status"], g["decided_by"], g["comment"]) for g in gates] == [("approved", "user", "window agreed")]
    decided = [e for e in cli(env, "history", world["human"]) if e["kind"] == "gate.approved"]
    assert decided[0]["actor"] == "user" and decided[0]["operation_id"].startswith("approvals-s-")
    turn = cli(env, "quota", "should-run", world["human"])
    assert turn["decision"] == "run" and turn["interaction_contract"]["run_id"]

    # The publish-like gate: approved from the page, the held-back action is in the next contract.
    steps = lambda: [s["id"] for s in cli(env, "quota", "should-run", world["publish"], "--dry-run")  # noqa: E731
                     ["interaction_contract"]["cli_channel"]["steps"]]
    assert "action:publish" not in steps()
    css(f".gate-card[data-gate-id='{world['publish_gate']}'] button[value='approve']").click()
    wait.until(lambda d: f"gate {world['publish_gate']} approved" in d.find_element(By.ID, "message").text)
    assert "action:publish" in steps()

    # The dashboard shows the decision; once the approvals server stops, the link goes.
    browser.get(world["dashboard"] + f"#{world['human']}")
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, f"#gates li[data-gate-id='{world['cutover']}'][data-status='approved']"))
    _stop(world["approvals"])
    with urllib.request.urlopen(world["dashboard"] + "api/pages") as resp:
        assert json.load(resp) == {"pages": []}
    browser.refresh()
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, f"#goals li[data-goal-id='{world['human']}']"))
    wait.until(lambda d: d.execute_script("return document.getElementById('pages').children.length") == 0)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def _header(url, name):
    with urllib.request.urlopen(url) as resp:
        return resp.headers[name]
