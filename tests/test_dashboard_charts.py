"""The dashboard worth opening, in a real headless Chromium: budget burn-down, run timeline,
reward trend, the last contract, the command that decides a pending gate, the closed-goals
toggle; checked for keyboard use, text contrast and that nothing is fetched from elsewhere.
Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import loopx_env
from tests.test_dashboard_browser import ARTIFACTS, WAIT, browser, cli, dashboard  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

# WCAG 2 contrast of every visible text node against the background it is drawn on.
CONTRAST_JS = """
function parse(c) { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
  const p = m[1].split(',').map(Number); return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; }
function lum(c) { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); }
function bg(node) { for (let n = node; n && n.nodeType === 1; n = n.parentElement) {
  const c = parse(getComputedStyle(n).backgroundColor); if (c && c.a > 0.5) return c; } return {r: 255, g: 255, b: 255}; }
const worst = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let t = walker.nextNode(); t; t = walker.nextNode()) {
  if (!t.textContent.trim()) continue;
  const node = t.parentElement; if (!node || !node.getClientRects().length) continue;
  const style = getComputedStyle(node);
  if (style.visibility === 'hidden' || node.closest('[hidden]')) continue;
  const inSvg = node instanceof SVGElement;
  const fg = parse(inSvg ? style.fill : style.color); if (!fg) continue;
  const a = lum(fg), b = lum(bg(inSvg ? node.ownerSVGElement : node));
  const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  if (ratio < 4.5) worst.push([t.textContent.trim().slice(0, 40), ratio.toFixed(2)]);
}
return worst;
"""


def _wait(browser):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT)


def _turn(url, goal_id, outcome, evidence=0, tokens=0, cost=0.0):
    run_id = cli(url, "quota", "should-run", goal_id)["interaction_contract"]["run_id"]
    assert run_id, "should-run did not open a run"
    for i in range(evidence):
        cli(url, "evidence", "add", "--run-id", run_id, "--kind", "note", "--summary", f"step {i}", actor="executor")
    cli(url, "run", "finish", "--run-id", run_id, "--outcome", outcome, "--tokens", str(tokens), "--cost", str(cost),
        actor="executor")
    return run_id


def test_charts_contract_and_gate_command(browser, dashboard, sqlite_url):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC

    goal = cli(sqlite_url, "project-prompt", "create", "--title", "Forecast Q4 revenue")["id"]
    cli(sqlite_url, "quota", "set", goal, "--max-turns", "6", "--max-tokens", "20000", "--max-cost", "2")
    runs = [_turn(sqlite_url, goal, "ok", evidence=2, tokens=4000, cost=0.3),
            _turn(sqlite_url, goal, "failed", evidence=1, tokens=6000, cost=0.5),
            _turn(sqlite_url, goal, "partial", evidence=3, tokens=3000, cost=0.2)]
    for run_id, score in zip(runs, (1.0, -0.5, 0.5)):
        cli(sqlite_url, "reward", "add", goal, "--run-id", run_id, "--score", str(score))
    gate = cli(sqlite_url, "gate", "add", goal, "--title", "Send to the CFO", "--scope", "privacy")

    wait = _wait(browser)
    browser.get(dashboard.url + f"#{goal}")
    wait.until(EC.text_to_be_present_in_element((By.ID, "goal-title"), "Forecast Q4 revenue"))
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#run-timeline svg rect[data-run-id]")))

    # Run timeline: one bar per run, coloured by outcome, evidence counts written on the bars.
    bars = browser.find_elements(By.CSS_SELECTOR, "#run-timeline rect[data-run-id]")
    assert [b.get_attribute("data-run-id") for b in bars] == runs
    assert [b.get_attribute("data-outcome") for b in bars] == ["ok", "failed", "partial"]
    assert len({b.get_attribute("fill") for b in bars}) == 3
    labels = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#run-timeline text")]
    assert {"2", "1", "3"} <= set(labels)
    assert "failed" in browser.find_element(By.CSS_SELECTOR, "#run-timeline svg").get_attribute("aria-label")

    # Burn-down: a line per limit that is set, ending at what is left.
    lines = {p.get_attribute("data-limit"): p for p in browser.find_elements(By.CSS_SELECTOR, "#burndown polyline")}
    assert set(lines) == {"turns", "tokens", "cost"}
    label = browser.find_element(By.CSS_SELECTOR, "#burndown svg").get_attribute("aria-label")
    assert "turns 3 of 6 used" in label and "tokens 13000 of 20000 used" in label
    # Reward trend: three scores and the running mean.
    dots = browser.find_elements(By.CSS_SELECTOR, "#reward-trend circle[data-score]")
    assert [float(d.get_attribute("data-score")) for d in dots] == [1.0, -0.5, 0.5]
    assert "running mean 0.3333" in browser.find_element(By.CSS_SELECTOR, "#reward-trend svg").get_attribute("aria-label")

    # The last contract issued: the third run's, with its steps.
    contract = browser.find_element(By.ID, "contract").text
    assert "decision run" in contract and f"loopx run finish --run-id {runs[-1]}" in contract

    # The pending gate shows the exact command that decides it; running it as printed does.
    approve = browser.find_element(By.CSS_SELECTOR, f"#gates li[data-gate-id='{gate['id']}'] code[data-verb='approve']")
    assert approve.text == f"loopx gate approve --goal-id {goal} --gate-id {gate['id']}"
    ARTIFACTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "dashboard-charts.png"))
    p = subprocess.run(approve.text.split(), env=loopx_env(sqlite_url, PATH=f"{sys.prefix}/bin:/usr/bin:/bin"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p
    wait.until(EC.presence_of_element_located(
        (By.CSS_SELECTOR, f"#gates li[data-gate-id='{gate['id']}'][data-status='approved']")))

    # Keyboard: Tab reaches the closed-goals toggle, the goal and the copy buttons.
    from selenium.webdriver.common.keys import Keys

    cli(sqlite_url, "gate", "add", goal, "--title", "One more", "--scope", "other")
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#gates button.copy")))
    body = browser.find_element(By.TAG_NAME, "body")
    body.click()
    reached = []
    for _ in range(12):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        active = browser.switch_to.active_element
        reached.append(active.get_attribute("id") or active.get_attribute("class") or active.tag_name)
    assert "show-closed" in reached and any("copy" in r for r in reached), reached
    assert any(r.startswith("attention") or r in ("", "selected") or "selected" in r for r in reached), reached

    # Contrast: every visible text at least 4.5:1 (WCAG AA for normal text).
    assert browser.execute_script(CONTRAST_JS) == []
    # Offline: every resource the page loaded came from the status server itself.
    origins = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => new URL(e.name).origin)")
    assert set(origins) <= {dashboard.url.rstrip("/")}, origins
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def test_closed_goals_are_toggled_never_no_goals_yet(browser, dashboard, sqlite_url):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC

    goal = cli(sqlite_url, "project-prompt", "create", "--title", "Finished migration")["id"]
    cli(sqlite_url, "project-prompt", "close", goal, "--reason", "done")
    wait = _wait(browser)
    browser.get(dashboard.url)
    wait.until(EC.visibility_of_element_located((By.ID, "only-closed")))
    assert not browser.find_element(By.ID, "no-goals").is_displayed()
    assert "1 closed goal is hidden" in browser.find_element(By.ID, "only-closed").text
    assert browser.save_screenshot(str(ARTIFACTS / "dashboard-only-closed.png")) if ARTIFACTS.mkdir(exist_ok=True) is None else None
    # Keyboard only: focus the toggle and press space.
    toggle = browser.find_element(By.ID, "show-closed")
    browser.execute_script("arguments[0].focus()", toggle)
    browser.switch_to.active_element.send_keys(Keys.SPACE)
    item = (By.CSS_SELECTOR, f"#goals li[data-goal-id='{goal}']")
    wait.until(EC.text_to_be_present_in_element(item, "Finished migration"))
    assert not browser.find_element(By.ID, "only-closed").is_displayed()
    ARTIFACTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "dashboard-closed.png"))
    assert browser.execute_script(CONTRAST_JS) == []
