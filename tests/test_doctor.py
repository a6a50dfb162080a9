"""``loopx doctor`` (issue 37): real states - a missing key, a key of mode 0644, an agent CLI that
is not logged in, no confinement, a notification target that fails, a worker that died - each
seen, explained with its fix, and the exit status 1 until it is fixed. Every call is a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import loopx_env

AGENTS = os.environ.get("LOOPX_TEST_AGENTS_DIR")
needs_agents = pytest.mark.skipif(not AGENTS, reason="LOOPX_TEST_AGENTS_DIR is not set (the real agent CLIs)")


def _env(url, tmp_path, **extra):
    """A user whose agent CLIs are the real ones when the suite has them, logged out (a fresh HOME)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in loopx_env(url).items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "CODEX_"))}
    env.update(HOME=str(home), PATH=os.pathsep.join([*([AGENTS] if AGENTS else []), os.path.dirname(sys.executable),
                                                      "/usr/bin", "/bin"]))
    env.update(extra)
    return env


def _doctor(env, *args):
    p = subprocess.run([sys.executable, "-m", "loopx", "doctor", *args], env=env, capture_output=True, text=True,
                       timeout=180)
    return p


def _json(env, *args):
    p = _doctor(env, "--json", *args)
    report = json.loads(p.stdout)
    assert p.returncode == (0 if report["ok"] else 1), p
    return p.returncode, {c["name"]: c for c in report["checks"]}


def _made(url, env):
    p = subprocess.run([sys.executable, "-m", "loopx", "project-prompt", "create", "--title", "t", "--json"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p
    return json.loads(p.stdout)["id"]


def _loopx(env, *args):
    p = subprocess.run([sys.executable, "-m", "loopx", *args], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p
    return p


@pytest.mark.slow
def test_the_integrity_key_missing_or_readable_by_others_needs_fixing(sqlite_url, tmp_path, private_key_dir):
    env = _env(sqlite_url, tmp_path, LOOPX_UNCONFINED="1")
    _made(sqlite_url, env)
    code, checks = _json(env)
    assert checks["integrity key"]["status"] == "ok" and checks["registry"]["status"] == "ok"
    assert checks["registry"]["details"]["schema_version"] == checks["registry"]["details"]["schema_supported"]
    [key] = private_key_dir.glob("*.key")

    key.chmod(0o644)
    code, checks = _json(env)
    k = checks["integrity key"]
    assert code == 1 and k["status"] == "fail" and k["details"]["mode"] == "0644", k
    assert k["fix"] == f"chmod 600 {key}"
    text = _doctor(env)
    assert text.returncode == 1 and f"fix: chmod 600 {key}" in text.stdout
    subprocess.run(["sh", "-c", k["fix"]], check=True)  # the fix, as printed
    assert _json(env)[1]["integrity key"]["status"] == "ok"

    hidden = key.rename(tmp_path / "elsewhere.key")
    code, checks = _json(env)
    assert code == 1 and checks["integrity key"]["status"] == "fail"
    assert "rekey --adopt" in checks["integrity key"]["fix"] and str(key) in checks["integrity key"]["summary"]
    hidden.rename(key)


@pytest.mark.slow
def test_no_confinement_fails_unless_the_user_opted_out(sqlite_url, tmp_path):
    env = _env(sqlite_url, tmp_path)
    _made(sqlite_url, env)
    code, checks = _json({**env, "LOOPX_CONFINE_BACKEND": "none"})
    c = checks["confinement"]
    assert code == 1 and c["status"] == "fail" and "LOOPX_UNCONFINED=1" in c["fix"], c
    code, checks = _json({**env, "LOOPX_CONFINE_BACKEND": "none", "LOOPX_UNCONFINED": "1"})
    assert checks["confinement"]["status"] == "warn" and "UNCONFINED" in checks["confinement"]["summary"]
    from loopx.sandbox import landlock

    if landlock.abi() >= 1:  # this machine confines: the kernel's offer and what LoopX uses
        code, checks = _json(env)
        c = checks["confinement"]
        assert c["status"] == "ok" and c["details"]["landlock_abi"] == landlock.abi()
        assert f"Landlock ABI {landlock.abi()}" in c["summary"] and "LoopX uses" in c["summary"]
        assert set(c["details"]) >= {"namespaces", "bubblewrap", "cgroup_v2", "cgroup_delegated"}


@needs_agents
@pytest.mark.agents
def test_agent_clis_logged_out_fail_only_when_an_executor_uses_them(sqlite_url, tmp_path):
    env = _env(sqlite_url, tmp_path, LOOPX_UNCONFINED="1")
    _made(sqlite_url, env)
    code, checks = _json(env)
    a = checks["agent CLIs"]
    by_host = {c["host"]: c for c in a["details"]["clis"]}
    assert by_host["claude-code"]["installed"] and by_host["codex"]["installed"]
    assert "Claude Code" in by_host["claude-code"]["version"] and "codex" in by_host["codex"]["version"]
    assert by_host["claude-code"]["logged_in"] is False and by_host["codex"]["logged_in"] is False
    assert a["status"] == "warn" and code == 0  # nobody uses them yet
    assert "claude auth login" in a["fix"] and "codex login" in a["fix"]

    _loopx(env, "config", "set", "executor", "codex")
    code, checks = _json(env)
    assert code == 1 and checks["agent CLIs"]["status"] == "fail"

    # Logged in: Claude Code through an API key, Codex through a provider of the user's own.
    logged = {**env, "ANTHROPIC_API_KEY": "sk-ant-doctor", "LOOPX_CODEX_BASE_URL": "http://127.0.0.1:9/v1",
              "OPENAI_API_KEY": "sk-doctor"}
    code, checks = _json(logged)
    assert checks["agent CLIs"]["status"] == "ok", checks["agent CLIs"]
    assert all(c["logged_in"] for c in checks["agent CLIs"]["details"]["clis"])


@pytest.mark.slow
def test_a_notification_test_reaches_the_target_or_fails(sqlite_url, tmp_path):
    env = _env(sqlite_url, tmp_path, LOOPX_UNCONFINED="1")
    _made(sqlite_url, env)
    assert _json(env)[1]["notifications"]["status"] == "warn"
    got = tmp_path / "got.jsonl"
    _loopx(env, "config", "set", "notify.command", f"cat >> {got}; echo >> {got}")
    code, checks = _json(env)
    assert checks["notifications"]["status"] == "ok" and not got.exists()  # no test unless asked
    code, checks = _json(env, "--notify-test")
    assert checks["notifications"]["status"] == "ok" and checks["notifications"]["details"]["test"] == {
        "command": "delivered"}
    [sent] = [json.loads(line) for line in got.read_text().splitlines() if line]
    assert sent["reason"] == "doctor_test"
    listed = json.loads(_loopx(env, "notify", "list", "--json").stdout)
    assert any(n["reason"] == "doctor_test" and n["status"] == "delivered" for n in listed)
    _loopx(env, "config", "set", "notify.command", "exit 3")
    code, checks = _json(env, "--notify-test")
    assert code == 1 and checks["notifications"]["status"] == "fail" and "notify list" in checks["notifications"]["fix"]


def test_a_worker_that_died_is_seen(sqlite_url, tmp_path, loopx_clock):
    from loopx.values import clock
    from loopx.ledger.registry import Registry
    from loopx.domain.supervision import beat

    env = _env(sqlite_url, tmp_path, LOOPX_UNCONFINED="1", **{clock.OFFSET_ENV: os.environ[clock.OFFSET_ENV]})
    _made(sqlite_url, env)
    with Registry.open(sqlite_url) as reg:
        beat(reg, "w-doctor", host="here", pid=4242, started_at=clock.now(), goals=[])
    code, checks = _json(env)
    assert checks["workers"]["status"] == "ok" and "w-doctor" in checks["workers"]["summary"]
    loopx_clock.advance(3600)
    code, checks = _json(env)
    w = checks["workers"]
    assert code == 1 and w["status"] == "fail" and "pid 4242" in w["summary"] and "restart" in w["fix"], w


def test_plugins_are_listed_with_their_capabilities(sqlite_url, tmp_path):
    env = _env(sqlite_url, tmp_path, LOOPX_UNCONFINED="1", LOOPX_PLUGINS="self_repair")
    _made(sqlite_url, env)
    code, checks = _json(env)
    listed = {p["name"]: p for p in checks["plugins"]["details"]["plugins"]}
    assert listed["self_repair"]["capabilities"] == ["self_repair"]
    assert "self_repair [self_repair]" in checks["plugins"]["summary"]


def test_without_a_registry_it_says_how_to_make_one(tmp_path):
    url = str(tmp_path / "none.db")
    env = _env(url, tmp_path, LOOPX_UNCONFINED="1")
    code, checks = _json(env)
    assert checks["registry"]["status"] == "warn" and "registry init" in checks["registry"]["fix"]
    assert not Path(url).exists()


def test_a_step_cannot_run_it(sqlite_url, tmp_path):
    """It shows the notification targets and may send one: refused to an executor."""
    env = _env(sqlite_url, tmp_path, LOOPX_UNCONFINED="1", LOOPX_ACTOR="executor")
    p = _doctor(env, "--json", "--notify-test")
    assert p.returncode == 2 and json.loads(p.stdout)["error"]["code"] == "actor_forbidden", p
