"""An agent turn on a terminal shows the agent's activity as it streams, one line per event, and
stays quiet in a pipe: ``loopx turn`` and ``loopx worker`` under a real pseudo-terminal (python's
``pty``), the real Claude Code and Codex CLIs against the scripted model servers."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading

import pytest

from loopx.ledger.registry import Registry
from tests.model_servers import cli_path
from tests.test_agents_cli import PY, SERVERS, Agent
from tests.test_turn_helpers import make_goal


@pytest.fixture(params=["claude-code", "codex"])
def agent(request, tmp_path, sqlite_url):
    cli_path("claude" if request.param == "claude-code" else "codex")  # skips, saying why, without the CLI
    return Agent(request.param, tmp_path, sqlite_url)


def _goal(url):
    with Registry.open(url) as reg:
        return make_goal(reg, acts={"test": [PY, "-c", "open('proof.txt', 'w').write('ran')"]})["goal"]


def _on_a_terminal(argv, env, cwd, timeout=180):
    """Run ``argv`` with its stderr on a pseudo-terminal (stdout piped): (exit code, stdout, what the
    terminal showed)."""
    master, slave = pty.openpty()
    shown = bytearray()

    def read():
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: every writer of the terminal is gone
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    p = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
                         text=True, start_new_session=True)
    os.close(slave)
    out, _ = p.communicate(timeout=timeout)
    reader.join(timeout=30)
    os.close(master)
    return p.returncode, out, shown.decode(errors="replace").replace("\r\n", "\n")


@pytest.mark.agents  # the real Claude Code / Codex CLIs
def test_a_turn_on_a_terminal_shows_the_agents_activity_and_is_quiet_in_a_pipe(agent):
    gid = _goal(agent.url)
    with SERVERS[agent.executor]() as server:
        code, out, shown = _on_a_terminal([PY, "-m", "loopx", "--format", "json", "turn", "--goal-id", gid,
                                           "--executor", agent.executor], agent.env(server), agent.work)
    assert code == 0 and json.loads(out)["outcome"] == "ok", (out, shown)
    lines = [line for line in shown.splitlines() if line.startswith(f"{agent.executor}: ")]
    # Each command the agent ran through its shell, as it ran it, then the end of its turn.
    commands = [line for line in lines if line.startswith(f"{agent.executor}: $ ")]
    assert any("todo claim" in c for c in commands) and any("loopx exec" in c for c in commands), shown
    assert any("todo done" in c for c in commands), shown
    assert "-> ok" in shown and lines[-1].startswith(f"{agent.executor}: done: "), shown
    assert (agent.workspace(gid) / "proof.txt").read_text() == "ran"  # in the goal's workspace
    # The same turn in a pipe (a script, a log): not one activity line.
    gid = _goal(agent.url)
    with SERVERS[agent.executor]() as server:
        p = subprocess.run([PY, "-m", "loopx", "--format", "json", "turn", "--goal-id", gid, "--executor",
                            agent.executor], env=agent.env(server), cwd=agent.work, capture_output=True, text=True,
                           timeout=180)
    assert p.returncode == 0 and json.loads(p.stdout)["outcome"] == "ok", p.stderr
    assert f"{agent.executor}: " not in p.stderr, p.stderr


@pytest.mark.agents  # the real Claude Code / Codex CLIs
def test_a_worker_on_a_terminal_logs_its_turns_agent_activity(tmp_path, sqlite_url):
    agent = Agent("claude-code", tmp_path, sqlite_url)
    gid = _goal(sqlite_url)
    with SERVERS["claude-code"]() as server:
        code, out, shown = _on_a_terminal([PY, "-m", "loopx", "--format", "json", "worker", "--exit-when-idle",
                                           "--executor", "claude-code"], agent.env(server), agent.work)
    assert code == 0, shown
    activity = [line for line in shown.splitlines() if " activity " in line and f"goal={gid}" in line]
    assert any("claude-code: $ " in line and "loopx exec" in line for line in activity), shown
    assert any("claude-code: done: " in line for line in activity), shown
    assert json.loads(out)["turns"] == 1
