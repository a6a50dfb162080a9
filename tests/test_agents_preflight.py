"""An agent CLI that is not logged in costs nothing (issue 37): the claude-code and codex
executors ask the real CLI (`claude auth status`, `codex login status`: no model call) before
the turn's should-run, and a logged-out CLI is refused with a "needs you: log in to ..." reason,
no run opened, no turn of the budget charged."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

AGENTS = os.environ.get("LOOPX_TEST_AGENTS_DIR")
pytestmark = [pytest.mark.skipif(not AGENTS, reason="LOOPX_TEST_AGENTS_DIR is not set (the real agent CLIs)"),
              pytest.mark.agents]
PY = sys.executable


def _env(tmp_path, url, **extra):
    """A user who installed both CLIs and never logged in: a fresh HOME, no API keys."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPX_", "ANTHROPIC_", "OPENAI_", "CODEX_"))}
    env.update({"LOOPX_REGISTRY": url, "LOOPX_PLUGINS": "", "HOME": str(home), "LOOPX_UNCONFINED": "1",
                "PATH": os.pathsep.join([AGENTS, os.path.dirname(PY), "/usr/bin", "/bin"]), **extra})
    return env


def _loopx(env, *args):
    return subprocess.run([PY, "-m", "loopx", "--format", "json", *args], env=env, capture_output=True, text=True,
                          timeout=180)


@pytest.mark.parametrize("executor, extra, says", [
    ("claude-code", {}, "needs you: log in to Claude Code: claude auth login"),
    ("codex", {}, "needs you: log in to Codex: codex login"),
    ("codex", {"LOOPX_CODEX_BASE_URL": "http://127.0.0.1:9/v1"}, "OPENAI_API_KEY is empty"),
])
def test_a_logged_out_agent_cli_fails_the_turn_before_anything_is_charged(tmp_path, sqlite_url, executor, extra,
                                                                          says):
    env = _env(tmp_path, sqlite_url, **extra)
    g = json.loads(_loopx(env, "project-prompt", "create", "--title", "preflight").stdout)["id"]
    assert _loopx(env, "todo", "add", g, "--text", "work").returncode == 0
    assert _loopx(env, "quota", "set", g, "--max-turns", "1").returncode == 0

    p = _loopx(env, "turn", g, "--executor", executor)
    err = json.loads(p.stdout)["error"]
    assert p.returncode == 2 and err["code"] == "agent_logged_out", p
    assert says in err["message"] and "nothing was charged" in err["message"]
    # No run, no turn of the budget: the one turn allowed is still there.
    assert json.loads(_loopx(env, "run", "list", g).stdout) == []
    quota = json.loads(_loopx(env, "quota", "show", g).stdout)
    assert quota["used"]["turns"] == 0 and quota["remaining"]["turns"] == 1, quota
    assert json.loads(_loopx(env, "quota", "should-run", g, "--dry-run").stdout)["decision"] == "run"


def test_a_login_that_cannot_be_carried_into_the_goals_own_directory_fails_before_anything_is_charged(tmp_path,
                                                                                                      sqlite_url):
    # Logged in as far as `claude auth status` says (the API key), but the credentials file LoopX
    # copies into the goal's own CLAUDE_CONFIG_DIR (loopx/turn/executors/homes.py) cannot be read.
    env = _env(tmp_path, sqlite_url, ANTHROPIC_API_KEY="sk-ant-scripted")
    (tmp_path / "home" / ".claude" / ".credentials.json").mkdir(parents=True)
    g = json.loads(_loopx(env, "project-prompt", "create", "--title", "seeding").stdout)["id"]
    assert _loopx(env, "todo", "add", g, "--text", "work").returncode == 0
    assert _loopx(env, "quota", "set", g, "--max-turns", "1").returncode == 0

    p = _loopx(env, "turn", g, "--executor", "claude-code")
    err = json.loads(p.stdout)["error"]
    assert p.returncode == 2 and err["code"] == "agent_logged_out", p
    assert err["message"].startswith("needs you: log in to Claude Code") and ".credentials.json" in err["message"]
    assert "nothing was charged" in err["message"], err
    assert json.loads(_loopx(env, "run", "list", g).stdout) == []
    assert json.loads(_loopx(env, "quota", "show", g).stdout)["used"]["turns"] == 0
