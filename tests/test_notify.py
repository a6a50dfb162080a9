"""Telling a human: a command and a webhook on 127.0.0.1 get one notification per change, signed and retried."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import loopx_env


def _serve(failures: int):
    """A webhook receiver on 127.0.0.1 that answers 500 to its first ``failures`` requests, then 200."""
    got: list[tuple[dict, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.headers, body))  # case-insensitive, as HTTP headers are
            self.send_response(500 if len(got) <= failures else 200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/hook", got


@pytest.fixture
def hook_server():
    """A webhook receiver on 127.0.0.1 that answers 500 to the first request, then 200."""
    server, url, got = _serve(1)
    yield url, got
    server.shutdown()


def _env(url, tmp_path):
    return loopx_env(url, XDG_CONFIG_HOME=str(tmp_path / "config"))


def _cli(url, tmp_path, *args):
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *map(str, args)], env=_env(url, tmp_path),
                       capture_output=True, text=True, timeout=120)
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else None), p.stderr


def _configure(url, tmp_path, hook_url):
    inbox = tmp_path / "inbox.jsonl"
    for key, value in (("notify.command", f"cat >> {inbox}; echo >> {inbox}"), ("notify.webhook", hook_url),
                       ("notify.min_interval_seconds", "0")):
        code, _, err = _cli(url, tmp_path, "config", "set", key, value)
        assert code == 0, err
    return inbox


def _inbox(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


@pytest.mark.slow
def test_a_pending_gate_is_told_once_to_a_command_and_a_signed_webhook(sqlite_url, tmp_path, hook_server,
                                                                       loopx_clock):
    url = sqlite_url
    hook_url, got = hook_server
    inbox = _configure(url, tmp_path, hook_url)
    code, goal, _ = _cli(url, tmp_path, "project-prompt", "create", "--title", "Ship it", "--description", "d")
    gid = goal["id"]
    code, gate, _ = _cli(url, tmp_path, "gate", "add", gid, "--title", "Deploy?", "--scope", "production")
    code, sent, err = _cli(url, tmp_path, "notify", "check")
    assert code == 0, err
    assert [s["reason"] for s in sent] == ["gate_pending"]

    told = _inbox(inbox)
    assert len(told) == 1
    n = told[0]
    assert (n["schema"], n["goal_id"], n["reason"], n["decision"]) == ("loopx.notification/1", gid, "gate_pending",
                                                                       "ask_user")
    assert n["command"] == f"loopx gate approve --goal-id {gid} --gate-id {gate['id']}"
    # The webhook: refused once (500) and pending; tried again once its back-off (30 s) has passed.
    code, deliveries, _ = _cli(url, tmp_path, "notify", "list")
    assert {d["channel"]: d["status"] for d in deliveries} == {"webhook": "pending", "command": "delivered"}
    assert _cli(url, tmp_path, "notify", "check")[1] == [] and len(got) == 1  # not yet: no sleep, no retry
    loopx_clock.advance(30)
    assert [s["reason"] for s in _cli(url, tmp_path, "notify", "check")[1]] == ["gate_pending"]
    assert len(got) == 2 and got[0][1] == got[1][1]
    assert len(_inbox(inbox)) == 1  # the command, delivered already, is not told again
    headers, body = got[1]
    key = (tmp_path / "config" / "loopx" / "notify.key").read_bytes().strip()
    assert headers["X-LoopX-Signature"] == "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
    assert json.loads(body) == n
    assert oct((tmp_path / "config" / "loopx" / "notify.key").stat().st_mode & 0o777) == "0o600"
    code, deliveries, _ = _cli(url, tmp_path, "notify", "list")
    by_channel = {d["channel"]: d for d in deliveries}
    assert by_channel["webhook"]["status"] == "delivered" and by_channel["webhook"]["attempts"] == 2
    assert by_channel["command"]["status"] == "delivered"

    # Nothing new: not sent again, however often anyone looks (or the goal changes otherwise).
    _cli(url, tmp_path, "todo", "add", gid, "--text", "more")
    assert _cli(url, tmp_path, "notify", "check")[1] == []
    assert len(_inbox(inbox)) == 1 and len(got) == 2

    # The person types the command it named; the need is gone; a new gate is news again.
    p = subprocess.run(n["command"].replace("loopx", f"{sys.executable} -m loopx", 1), shell=True,
                       env=_env(url, tmp_path), capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert _cli(url, tmp_path, "notify", "check")[1] == []
    _cli(url, tmp_path, "gate", "add", gid, "--title", "Again?", "--scope", "safety")
    assert [s["reason"] for s in _cli(url, tmp_path, "notify", "check")[1]] == ["gate_pending"]
    assert len(_inbox(inbox)) == 2


@pytest.mark.slow
def test_the_worker_tells_a_person_when_a_step_keeps_failing(sqlite_url, tmp_path, hook_server):
    url = sqlite_url
    hook_url, got = hook_server
    inbox = _configure(url, tmp_path, hook_url)
    code, goal, _ = _cli(url, tmp_path, "project-prompt", "create", "--title", "Flaky", "--description", "d")
    gid = goal["id"]
    _cli(url, tmp_path, "action", "add", "--goal-id", gid, "--name", "test", "--", "sh", "-c", "echo boom; exit 3")
    _cli(url, tmp_path, "todo", "add", gid, "--text", "make it pass")
    _cli(url, tmp_path, "quota", "set", gid, "--stuck-after", "2")
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", "worker", "--exit-when-idle", "--retry-seconds", "0"],
                       env=_env(url, tmp_path), capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    told = _inbox(inbox)
    assert [n["reason"] for n in told] == ["repeated_failure"]
    assert told[0]["commands"][-1] == f"loopx project-prompt retry --goal-id {gid}"
    assert json.loads(got[-1][1])["reason"] == "repeated_failure"
    code, view, _ = _cli(url, tmp_path, "status")
    top = view["goals"][0]
    assert top["id"] == gid and top["needs_you"]["reason"] == "repeated_failure"
    assert top["needs_you"]["commands"] == told[0]["commands"]


@pytest.mark.slow
def test_a_plugins_loopx_notify_hook_hears_each_change_once(sqlite_url, tmp_path):
    from tests.plugin_site import plugin_env

    env = plugin_env(tmp_path, sqlite_url, recorder="notify_recorder")
    env["NOTIFY_RECORDER_FILE"] = str(tmp_path / "heard.jsonl")

    def cli(*args):
        p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *args], env=env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    gid = cli("project-prompt", "create", "--title", "Budget", "--description", "d")["id"]
    cli("todo", "add", gid, "--text", "x")
    cli("quota", "set", gid, "--max-turns", "1")
    cli("quota", "should-run", gid)  # the one turn the budget allows
    cli("notify", "check")
    cli("notify", "check")
    heard = [json.loads(line) for line in (tmp_path / "heard.jsonl").read_text().splitlines()]
    assert [(h["goal_id"], h["reason"]) for h in heard] == [(gid, "budget_exhausted")]
    assert heard[0]["command"].startswith(f"loopx quota grant --goal-id {gid} --turns")
    deliveries = cli("notify", "list")
    assert [(d["channel"], d["status"]) for d in deliveries] == [("hook:recorder", "delivered")]


@pytest.mark.slow
def test_only_a_user_changes_settings_and_bad_ones_are_refused(sqlite_url, tmp_path):
    url = sqlite_url
    _cli(url, tmp_path, "project-prompt", "create", "--title", "t", "--description", "d")
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", "config", "set", "notify.command", "true"],
                       env={**_env(url, tmp_path), "LOOPX_ACTOR": "executor"}, capture_output=True, text=True)
    assert p.returncode == 2 and json.loads(p.stdout)["error"]["code"] == "actor_forbidden"
    for args in (("config", "set", "notify.webhook", "ftp://x"), ("config", "set", "executor", "nosuch"),
                 ("config", "set", "bogus", "1"), ("config", "set", "notify.min_interval_seconds", "soon")):
        code, out, _ = _cli(url, tmp_path, *args)
        assert code == 2 and out["error"]["code"] in ("invalid_argument", "not_found"), args
    assert _cli(url, tmp_path, "config", "list")[1] == {}
    assert _cli(url, tmp_path, "config", "set", "executor", "shell")[0] == 0
    assert _cli(url, tmp_path, "config", "list")[1] == {"executor": "shell"}


@pytest.mark.slow
def test_a_failed_webhook_is_retried_with_back_off_until_delivered_never_dropped(sqlite_url, tmp_path, loopx_clock):
    url = sqlite_url
    server, hook_url, got = _serve(4)  # 500 four times, then 200
    try:
        for key, value in (("notify.webhook", hook_url), ("notify.min_interval_seconds", "0")):
            assert _cli(url, tmp_path, "config", "set", key, value)[0] == 0
        gid = _cli(url, tmp_path, "project-prompt", "create", "--title", "Hook", "--description", "d")[1]["id"]
        _cli(url, tmp_path, "gate", "add", gid, "--title", "Deploy?", "--scope", "production")

        def check():
            code, sent, err = _cli(url, tmp_path, "notify", "check")
            assert code == 0, err
            (row,) = _cli(url, tmp_path, "notify", "list")[1]
            return sent, row

        sent, row = check()
        assert [s["reason"] for s in sent] == ["gate_pending"]  # sent (tried) ...
        assert (row["status"], row["attempts"], len(got)) == ("pending", 1, 1)  # ... refused: pending
        # The back-off grows on the movable clock: 30 s, 60 s, 120 s after the 1st, 2nd, 3rd failure.
        for wait, attempts in ((30, 2), (60, 3), (120, 4)):
            loopx_clock.advance(wait - 10)
            assert check()[1]["attempts"] == attempts - 1 and len(got) == attempts - 1  # not due yet
            loopx_clock.advance(10)
            sent, row = check()
            assert sent == [] and (row["status"], row["attempts"], len(got)) == ("pending", attempts, attempts)
            assert row["detail"]["errors"][-1] == "HTTP 500"
        loopx_clock.advance(300)
        sent, row = check()
        assert [s["reason"] for s in sent] == ["gate_pending"]
        assert (row["status"], row["attempts"], len(got)) == ("delivered", 5, 5)
        assert len({body for _, body in got}) == 1  # the same notification each time
        loopx_clock.advance(3600)
        assert check()[0] == [] and len(got) == 5  # delivered: never again
    finally:
        server.shutdown()


@pytest.mark.slow
def test_a_pending_delivery_ends_failed_when_the_need_clears(sqlite_url, tmp_path, loopx_clock):
    url = sqlite_url
    server, hook_url, got = _serve(100)  # bounded: far more than the test makes
    try:
        for key, value in (("notify.webhook", hook_url), ("notify.min_interval_seconds", "0")):
            assert _cli(url, tmp_path, "config", "set", key, value)[0] == 0
        gid = _cli(url, tmp_path, "project-prompt", "create", "--title", "Hook", "--description", "d")[1]["id"]
        gate = _cli(url, tmp_path, "gate", "add", gid, "--title", "Deploy?", "--scope", "production")[1]
        _cli(url, tmp_path, "notify", "check")
        assert _cli(url, tmp_path, "notify", "list")[1][0]["status"] == "pending"
        assert _cli(url, tmp_path, "gate", "approve", "--goal-id", gid, "--gate-id", gate["id"])[0] == 0
        loopx_clock.advance(60)
        _cli(url, tmp_path, "notify", "check")
        rows = _cli(url, tmp_path, "notify", "list")[1]
        assert [(r["channel"], r["status"]) for r in rows] == [("none", "cleared"), ("webhook", "failed")]
        assert rows[1]["detail"]["gave_up"] == "the need cleared" and len(got) == 1
    finally:
        server.shutdown()


@pytest.mark.slow
def test_the_worker_tells_a_person_when_a_cadence_goal_runs_out_of_work(sqlite_url, tmp_path, loopx_clock):
    """No event marks the cadence passing: the worker's beat looks at every open goal."""
    from loopx.testing import wait_until
    from tests.factories import make_goal

    url = sqlite_url

    def cli(*args):  # the env make_goal uses (its registry's key lives in the test's config dir)
        p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *args], env=loopx_env(url),
                           capture_output=True, text=True, timeout=120)
        return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else None), p.stderr

    inbox = tmp_path / "inbox.jsonl"
    gid = make_goal(url, title="Cadenced", description="d", acts={"work": ["sh", "-c", "true"]},
                    todo_texts=["only one"], limits={"cadence_seconds": 3600})["goal"]
    assert cli("config", "set", "notify.command", f"cat >> {inbox}; echo >> {inbox}")[0] == 0
    work = tmp_path / "work"
    work.mkdir()
    w = subprocess.Popen([sys.executable, "-m", "loopx", "--format", "json", "worker", "--beat-seconds", "0.3"],
                         env=loopx_env(url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, cwd=work)
    try:
        wait_until(lambda: [r["status"] for r in cli("run", "list", gid)[1]] == ["finished"],
                   "the first turn")
        assert [t["status"] for t in cli("todo", "list", gid)[1]] == ["done"]  # the turn did the last work ...
        code, preview, _ = cli("quota", "should-run", gid, "--dry-run")
        assert preview["decision"] == "wait"  # ... inside the cadence: nobody is needed yet
        loopx_clock.advance(3601)  # the cadence passes; nothing is written to the ledger
        told = wait_until(lambda: _inbox(inbox), "the notification")
        assert [(n["goal_id"], n["decision"]) for n in told] == [(gid, "ask_user")]
        # Once: the worker looks at every open goal at each beat, and tells nobody again.
        beats = set()
        wait_until(lambda: beats.add(cli("worker", "list")[1][0]["last_beat_at"]) or len(beats) >= 4,
                   "three more heartbeats")
        assert len(_inbox(inbox)) == 1, _inbox(inbox)
    finally:
        import os
        import signal

        os.killpg(w.pid, signal.SIGTERM)
        w.communicate(timeout=60)
