"""The approvals page in headless Chromium: a one-time login link, approve a gate, a reward; CSRF and
a wrong or reused token refused; every decision in the ledger as the user, with the session it came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from approvals_helpers import cli, start_browser, WAIT

pytestmark = pytest.mark.browser



def _env(url, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update(LOOPX_REGISTRY=url, LOOPX_PLUGINS="approvals", HOME=str(tmp_path / "home"))
    return env


@pytest.fixture
def browser(tmp_path):
    driver = start_browser(tmp_path / "chromium-profile")
    yield driver
    driver.quit()


@pytest.fixture
def server(tmp_path):
    url = str(tmp_path / "registry.db")
    env = _env(url, tmp_path)
    goal = cli(env, "project-prompt", "create", "--title", "Ship the report", "--description", "d")["id"]
    gate = cli(env, "gate", "add", goal, "--title", "Publish?", "--scope", "production")["id"]
    scored = cli(env, "project-prompt", "create", "--title", "Scored", "--description", "d")["id"]
    cli(env, "todo", "add", scored, "--text", "x")
    run = cli(env, "quota", "should-run", scored)["interaction_contract"]["run_id"]
    cli(env, "run", "finish", "--run-id", run, "--handoff", "done")
    proc = subprocess.Popen([sys.executable, "-m", "loopx", "approvals", "serve", "--port", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    info = json.loads(proc.stdout.readline())
    yield {"env": env, "goal": goal, "gate": gate, "scored": scored, "run": run, **info}
    proc.terminate()
    proc.wait(timeout=30)


def _post(url, data: bytes, cookie: str | None = None):
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/x-www-form-urlencoded",
                                          **({"Cookie": cookie} if cookie else {})})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_login_approve_and_refusals(browser, server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from selenium.common.exceptions import StaleElementReferenceException

    # The page re-renders after each action: an element read while it is replaced is looked up again.
    wait = WebDriverWait(browser, WAIT, ignored_exceptions=(StaleElementReferenceException,))
    base = server["url"]
    token_file = server["token_file"]
    assert oct(os.stat(token_file).st_mode & 0o777) == "0o600"

    browser.get(base)  # not logged in
    assert "Log in with the link" in browser.find_element(By.ID, "error").text
    browser.get(base + "login?token=wrong")
    assert "wrong or was used" in browser.find_element(By.ID, "error").text

    browser.get(server["login"])
    row = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, f"article[data-goal-id='{server['goal']}']"))
    assert "Publish?" in row.find_element(By.CSS_SELECTOR, f".gate-card[data-gate-id='{server['gate']}'] .gate-title").text
    cookie = browser.get_cookie("loopx_approvals")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"

    # The same link again, in a fresh session: spent.
    try:
        urllib.request.urlopen(server["login"])
        raise AssertionError("a used login link worked twice")
    except urllib.error.HTTPError as exc:
        assert exc.code == 403

    # CSRF: the session's cookie without the form's token changes nothing.
    session = f"loopx_approvals={cookie['value']}"
    form = f"goal_id={server['goal']}&gate_id={server['gate']}&verb=approve".encode()
    status, body = _post(base + "decide", form, session)
    assert status == 403 and "CSRF" in body
    status, body = _post(base + "decide", form + b"&csrf=forged", session)
    assert status == 403
    gates = cli(server["env"], "gate", "list", server["goal"])
    assert [g["status"] for g in gates] == ["pending"]

    form_el = row.find_element(By.CSS_SELECTOR, f"form.gate[data-gate-id='{server['gate']}']")
    form_el.find_element(By.NAME, "comment").send_keys("ship it")
    form_el.find_element(By.CSS_SELECTOR, "button[value='approve']").click()
    try:
        message = wait.until(lambda d: d.find_elements(By.ID, "message"))[0].text
    except Exception:
        raise AssertionError(browser.current_url + browser.page_source[:2000])
    assert f"gate {server['gate']} approved" in message

    gates = cli(server["env"], "gate", "list", server["goal"])
    assert [(g["status"], g["decided_by"], g["comment"]) for g in gates] == [("approved", "user", "ship it")]
    history = cli(server["env"], "history", server["goal"])
    decided = [e for e in history if e["kind"] == "gate.approved"]
    assert len(decided) == 1 and decided[0]["actor"] == "user"
    assert decided[0]["operation_id"].startswith("approvals-s-")  # the browser session it came from

    # A reward, from the same session, recorded as the user's with the session's operation id.
    form_el = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, f"form.reward[data-run-id='{server['run']}']"))
    score = form_el.find_element(By.NAME, "score")
    score.clear()
    score.send_keys("0.5")
    form_el.find_element(By.NAME, "comment").send_keys("good start")
    form_el.find_element(By.TAG_NAME, "button").click()
    wait.until(lambda d: any("reward" in m.text for m in d.find_elements(By.ID, "message")))
    rewards = cli(server["env"], "reward", "list", server["scored"])
    assert [(r["score"], r["comment"], r["author"]) for r in rewards] == [(0.5, "good start", "user")]
    added = [e for e in cli(server["env"], "history", server["scored"]) if e["kind"].startswith("reward")]
    assert added[0]["operation_id"].startswith("approvals-s-")
