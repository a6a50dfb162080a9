"""The approvals server's parameters that fail to parse: a ``Content-Length`` that is not ASCII
digits gets a 400 with a JSON error (never a dropped connection), and a score written in other
scripts' digits is refused like any score that is not a number - nothing is recorded."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
from urllib.parse import quote, urlsplit

import pytest
from approvals_helpers import cli


def _env(url, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update(LOOPX_REGISTRY=url, LOOPX_PLUGINS="approvals", HOME=str(tmp_path / "home"),
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    return env


@pytest.fixture
def served(tmp_path):
    url = str(tmp_path / "registry.db")
    env = _env(url, tmp_path)
    goal = cli(env, "project-prompt", "create", "--title", "Scored", "--description", "d")["id"]
    cli(env, "todo", "add", goal, "--text", "x")
    run = cli(env, "quota", "should-run", goal)["interaction_contract"]["run_id"]
    cli(env, "run", "finish", "--run-id", run, "--handoff", "done")
    proc = subprocess.Popen([sys.executable, "-m", "loopx", "approvals", "serve", "--port", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        login = urlsplit(info["login"])
        port = login.port
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", f"{login.path}?{login.query}", headers={"Host": f"127.0.0.1:{port}"})
        resp = conn.getresponse()
        resp.read()
        cookie = resp.getheader("Set-Cookie").split(";")[0]
        conn.request("GET", "/", headers={"Host": f"127.0.0.1:{port}", "Cookie": cookie})
        page = conn.getresponse().read().decode()
        csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
        conn.close()
        yield {"env": env, "goal": goal, "run": run, "port": port, "cookie": cookie, "csrf": csrf}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _post(s, path, body: bytes, length: str):
    conn = http.client.HTTPConnection("127.0.0.1", s["port"], timeout=30)
    try:
        conn.putrequest("POST", path, skip_host=True, skip_accept_encoding=True)
        for k, v in {"Host": f"127.0.0.1:{s['port']}", "Cookie": s["cookie"], "Content-Length": length,
                     "Content-Type": "application/x-www-form-urlencoded"}.items():
            conn.putheader(k, v.encode("utf-8") if not v.isascii() else v)
        conn.endheaders(body)
        resp = conn.getresponse()  # a dropped connection raises here
        return resp.status, resp.getheader("Content-Type", ""), resp.getheader("Location", ""), resp.read()
    finally:
        conn.close()


def _form(s, score):
    return (f"csrf={quote(s['csrf'])}&goal_id={s['goal']}&run_id={s['run']}&score={quote(score)}").encode()


LENGTHS = ["²", "١٢", "１２", "-1", "5 x", "5x", "9" * 30, "\x00", "+5"]
SCORES = ["١", "１", "¹", "①", "𝟏", "nan", "inf", "1e0", "0x1", ""]


def test_a_content_length_that_is_not_ascii_digits_is_a_400_with_json(served):
    for length in LENGTHS:
        status, ctype, _loc, body = _post(served, "/reward", _form(served, "1"), length)
        assert status == 400 and ctype.startswith("application/json"), (length, status, body)
        assert json.loads(body)["error"]["code"] == "invalid_argument"
    assert cli(served["env"], "reward", "list", "--goal-id", served["goal"]) == []


def test_a_score_in_other_digits_is_refused_and_nothing_is_recorded(served):
    for score in SCORES:
        body = _form(served, score)
        status, _ctype, location, _ = _post(served, "/reward", body, str(len(body)))
        assert status == 303 and "refused" in location, (score, status, location)
    assert cli(served["env"], "reward", "list", "--goal-id", served["goal"]) == []
    # An ASCII score is taken.
    body = _form(served, "0.5")
    status, _ctype, location, _ = _post(served, "/reward", body, str(len(body)))
    assert status == 303 and "added" in location, location
    assert [r["score"] for r in cli(served["env"], "reward", "list", "--goal-id", served["goal"])] == [0.5]
