"""The dashboard in a real headless Chromium: changes made from the CLI appear without a reload.

Needs Debian's ``chromium`` and ``chromium-driver`` and the ``selenium`` package (the ``test``
extra); skipped, saying which is missing, otherwise. The screenshot is kept in
``test-artifacts/dashboard.png``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from loopx.ledger.registry import Registry
from loopx.status_server import make_server
from tests.conftest import ROOT, loopx_env
from tests.tiers import refuse_in_quick_tier

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
MISSING = [name for name, found in (("chromium", CHROMIUM), ("chromedriver (chromium-driver)", CHROMEDRIVER),
                                    ("selenium", importlib.util.find_spec("selenium"))) if not found]
ARTIFACTS = ROOT / "test-artifacts"
WAIT = 60  # seconds; generous, the machine is shared


@pytest.fixture
def browser(tmp_path):
    refuse_in_quick_tier("browser", "Chromium")
    if MISSING:
        pytest.skip(f"browser tests skipped: {', '.join(MISSING)} not installed")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chromium-profile'}",
                 "--window-size=1280,1100"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(WAIT)
    yield driver
    driver.quit()


@pytest.fixture
def dashboard(sqlite_url):
    Registry.open(sqlite_url).close()
    srv = make_server(sqlite_url, host="127.0.0.1", port=0, poll_interval=0.1)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield srv
    srv.shutdown_all()


def cli(url, *args, actor=None):
    """Run the real ``loopx`` command line on ``url``; return its JSON output."""
    env = loopx_env(url, **({"LOOPX_ACTOR": actor} if actor else {}))
    p = subprocess.run([sys.executable, "-m", "loopx", *args, "--json"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return json.loads(p.stdout)


def test_cli_changes_appear_live_without_a_reload(browser, dashboard, sqlite_url):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT)
    browser.get(dashboard.url)
    wait.until(EC.visibility_of_element_located((By.ID, "no-goals")))
    wait.until(EC.text_to_be_present_in_element((By.ID, "live"), "live"))
    # Anything a reload would wipe out: if it is still there at the end, the page never reloaded.
    browser.execute_script("window.__loopxTestMarker = 'same page'")

    goal = cli(sqlite_url, "project_prompt", "create", "--title", "Migrate the billing service",
               "--description", "Move billing to the new cluster without downtime.")
    item = (By.CSS_SELECTOR, f"#goals li[data-goal-id='{goal['id']}']")
    wait.until(EC.text_to_be_present_in_element(item, "Migrate the billing service"))
    wait.until(EC.text_to_be_present_in_element((By.ID, "goal-title"), "Migrate the billing service"))
    # Where the goal's agent will work (loopx/domain/workspace.py): its workspace, made by its first turn.
    wait.until(EC.text_to_be_present_in_element((By.ID, "goal-workspace"), "/workspaces/"))
    shown = browser.find_element(By.ID, "goal-workspace").text
    assert shown.endswith(f"{goal['id']} (made by its next turn) · project {os.getcwd()}"), shown

    gate = cli(sqlite_url, "gate", "add", "--goal-id", goal["id"], "--title", "Cut over production traffic",
               "--scope", "production")
    pending = (By.CSS_SELECTOR, f"#gates li[data-gate-id='{gate['id']}'][data-status='pending']")
    wait.until(EC.presence_of_element_located(pending))
    wait.until(EC.text_to_be_present_in_element(item, "gate pending"))

    cli(sqlite_url, "gate", "approve", "--goal-id", goal["id"], "--gate-id", gate["id"], "--comment", "go")
    approved = (By.CSS_SELECTOR, f"#gates li[data-gate-id='{gate['id']}'][data-status='approved']")
    wait.until(EC.presence_of_element_located(approved))
    assert "approved by user" in browser.find_element(*approved).text

    # A turn with a budget, evidence, a hand-off and a reward fills the rest of the page.
    cli(sqlite_url, "quota", "set", "--goal-id", goal["id"], "--max-turns", "4", "--max-tokens", "20000")
    todo = cli(sqlite_url, "todo", "add", "--goal-id", goal["id"], "--text", "Dual-write invoices", "--priority", "P1")
    cli(sqlite_url, "todo", "add", "--goal-id", goal["id"], "--text", "Switch reads", "--depends-on", todo["id"])
    run_id = cli(sqlite_url, "quota", "should-run", "--goal-id", goal["id"])["interaction_contract"]["run_id"]
    cli(sqlite_url, "evidence", "add", "--run-id", run_id, "--kind", "command", "--summary", "make test: 48 passed",
        actor="executor")
    cli(sqlite_url, "run", "finish", "--run-id", run_id, "--outcome", "ok", "--tokens", "5200", "--cost", "0.41",
        "--handoff", "Dual-write is live behind a flag; next: compare nightly totals.")
    cli(sqlite_url, "reward", "add", "--goal-id", goal["id"], "--run-id", run_id, "--score", "0.8",
        "--comment", "Careful rollout.")
    wait.until(EC.text_to_be_present_in_element((By.ID, "handoff"), "Dual-write is live"))
    wait.until(EC.text_to_be_present_in_element((By.ID, "rewards"), "Careful rollout."))
    wait.until(EC.text_to_be_present_in_element((By.ID, "timeline"), "make test: 48 passed"))
    bar = (By.CSS_SELECTOR, "#quota .bar[data-field='tokens']")
    wait.until(EC.text_to_be_present_in_element(bar, "5200 / 20000"))
    ready = browser.find_element(By.CSS_SELECTOR, f"#todos tr[data-todo-id='{todo['id']}']").text
    assert "ready" in ready

    assert browser.execute_script("return window.__loopxTestMarker") == "same page"
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    ARTIFACTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "dashboard.png"))
