"""What the approvals tests share: the ``loopx`` CLI as a real process, and headless Chromium.

A uniquely named module (not ``helpers``), so that pytest's rootdir-based imports of the
several plugin test folders never mix two modules of one name.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
MISSING = [n for n, f in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER),
                          ("selenium", importlib.util.find_spec("selenium"))) if not f]
#: Seconds a page load or a wait for an element may take (a loaded 2-core machine).
WAIT = 60


def cli(env: dict, *args: str):
    """``loopx --format json ARGS`` as a process in ``env``; its JSON (the test fails on a non-zero exit)."""
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *args], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return json.loads(p.stdout)


def start_browser(profile_dir, *flags: str):
    """A headless Chromium driven by chromedriver, with a profile of its own in ``profile_dir``
    (skips the test, saying what is missing, where Chromium, chromedriver or selenium is not installed)."""
    if os.environ.get("LOOPX_TEST_QUICK") == "1":  # the quick tier (scripts/test.sh --quick) runs no browser
        pytest.fail("this test needs Chromium but is not marked @pytest.mark.browser: the quick tier runs none",
                    pytrace=False)
    if MISSING:
        pytest.skip(f"browser tests skipped: {', '.join(MISSING)} not installed")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-dev-shm-usage", *flags, f"--user-data-dir={profile_dir}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(WAIT)
    return driver
