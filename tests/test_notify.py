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


@pytest.fixture
def hook_server():
    """A webhook receiver on 127.0.0.1 that answers 500 to the first request, then 204."""
    got: list[tuple[dict, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.headers, body))  # case-insensitive, as HTTP headers are
            self.send_response(500 if len(got) == 1 else 204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
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


def test_a_pending_gate_is_told_once_to_a_command_and_a_signed_webhook(sqlite_url, tmp_path, hook_server):
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
    # The webhook: refused once (500), delivered on the retry; the body is signed with the user's key.
    assert len(got) == 2 and got[0][1] == got[1][1]
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
