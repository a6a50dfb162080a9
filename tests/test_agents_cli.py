"""The real Claude Code and Codex CLIs take governed turns against scripted model servers.

``loopx turn --executor claude-code|codex`` runs as a real process; the CLI (installed by
``scripts/test.sh`` into ``LOOPX_TEST_AGENTS_DIR``) talks only to a scripted server on
127.0.0.1 (``tests/model_servers.py``) that asks it to run the contract's commands through its
own shell tool. A missing CLI skips its tests, saying where it was looked for.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopx.domain import gates, runs, todos
from loopx.ledger.registry import Registry
from tests.model_servers import AnthropicServer, OpenAIServer, cli_path
from tests.test_turn_helpers import make_goal

pytestmark = pytest.mark.agents  # drives the real agent CLIs: not in the quick tier

PY = sys.executable


SERVERS = {"claude-code": AnthropicServer, "codex": OpenAIServer}
PATHS = {"claude-code": {"POST /v1/messages?beta=true"}, "codex": {"POST /v1/responses"}}


class Agent:
    """One agent CLI wired to its scripted server, in a directory of its own."""

    def __init__(self, executor: str, tmp_path: Path, registry_url: str):
        self.executor, self.tmp, self.url = executor, tmp_path, registry_url
        self.bin = cli_path("claude" if executor == "claude-code" else "codex")
        self.work = tmp_path / "work"
        self.work.mkdir(exist_ok=True)

    def env(self, server, **extra) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPX_", "ANTHROPIC_", "OPENAI_", "CODEX_"))}
        home = self.tmp / "home"
        home.mkdir(exist_ok=True)
        # XDG_CONFIG_HOME stays the test's own (tests/conftest.py): it holds the registry's key.
        env.update({"LOOPX_REGISTRY": self.url, "HOME": str(home),
                    "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                    "DISABLE_AUTOUPDATER": "1", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})
        if self.executor == "claude-code":
            env.update({"LOOPX_CLAUDE_BIN": self.bin, "ANTHROPIC_BASE_URL": server.url(),
                        "ANTHROPIC_API_KEY": "sk-ant-scripted"})
        else:
            env.update({"LOOPX_CODEX_BIN": self.bin, "LOOPX_CODEX_BASE_URL": server.url(),
                        "LOOPX_CODEX_MODEL": "scripted-model", "OPENAI_API_KEY": "sk-scripted",
                        "CODEX_HOME": str(self.tmp / "codex-home")})
        env.update(extra)
        return env

    def workspace(self, goal_id: str) -> Path:
        """Where the goal's agent worked: its workspace (loopx.domain.workspace), made from ``work`` (the
        user's checkout: files put there before the goal's first turn are in it)."""
        class _Off:
            def url(self) -> str:
                return "http://127.0.0.1:9"

        return Path(self.loopx(_Off(), "workspace", "show", goal_id)["workspace"])

    def loopx(self, server, *args, timeout=120, **extra):
        p = subprocess.run([PY, "-m", "loopx", "--format", "json", *args], env=self.env(server, **extra),
                           cwd=self.work, capture_output=True, text=True, timeout=timeout)
        # `loopx turn` exits 1 (failed) or 3 (partial) when the turn's outcome is not ok.
        out = json.loads(p.stdout) if p.stdout.strip() else None
        expected = {"failed": 1, "partial": 3}.get((out or {}).get("outcome"), 0) if args[:1] == ("turn",) else 0
        assert p.returncode == expected, (p.stdout[-3000:], p.stderr[-3000:])
        return out


@pytest.fixture(params=["claude-code", "codex"])
def agent(request, tmp_path, sqlite_url):
    return Agent(request.param, tmp_path, sqlite_url)


@pytest.fixture
def reg(sqlite_url):
    r = Registry.open(sqlite_url)
    yield r
    r.close()


def _run(reg, run_id):
    with reg.read() as tx:
        return runs.load_run(tx, run_id)


def _evidence(reg, run_id):
    with reg.read() as tx:
        return tx.query("SELECT kind, summary, data FROM evidence WHERE run_id = ? ORDER BY created_at, id", (run_id,))


def _todo(reg, goal_id, todo_id):
    with reg.read() as tx:
        return todos.load_todo(tx, goal_id, todo_id)


def test_a_turn_runs_the_contracts_commands_through_the_agents_shell_and_charges_what_the_server_reported(
        agent, reg):
    made = make_goal(reg, acts={"test": [PY, "-c", "open('proof.txt', 'w').write('ran by the agent')"]})
    with SERVERS[agent.executor]() as server:
        t = agent.loopx(server, "turn", "--goal-id", made["goal"], "--executor", agent.executor)
    assert t["outcome"] == "ok", t["handoff"]
    run = _run(reg, t["run_id"])
    assert run.status == "finished" and run.tokens == server.tokens() > 0
    # Only the model API was called, and every answer the server gave was charged.
    assert server.paths() == PATHS[agent.executor]
    # in the goal's workspace (made from the turn's directory), not in the user's checkout
    assert (agent.workspace(made["goal"]) / "proof.txt").read_text() == "ran by the agent"
    assert not (agent.work / "proof.txt").exists()
    assert _todo(reg, made["goal"], made["todos"][0]).status == "done"
    kinds = [e["kind"] for e in _evidence(reg, t["run_id"])]
    # The core recorded the run's owner and the step's start; the exec step records itself; no placeholder note line
    assert kinds == ["run_owner", "step_started", "command", "transcript"]
    transcript = json.loads(_evidence(reg, t["run_id"])[-1]["data"])
    ran = [c["command"] for c in transcript["commands"]]
    assert len(ran) == 3 and all(c["ok"] for c in transcript["commands"])  # claim, exec, todo done
    assert not any("run finish" in c for c in ran)  # the core finishes the run, with the CLI's usage
    if agent.executor == "claude-code":
        assert run.cost > 0  # Claude Code's own total_cost_usd
    assert agent.executor in run.handoff and "All steps of the contract ran." in run.handoff


def test_a_failing_step_fails_the_turn(agent, reg):
    made = make_goal(reg, acts={"test": [PY, "-c", "import sys; print('3 tests failed'); sys.exit(3)"]})
    with SERVERS[agent.executor]() as server:
        t = agent.loopx(server, "turn", "--goal-id", made["goal"], "--executor", agent.executor)
    assert t["outcome"] == "failed"
    run = _run(reg, t["run_id"])
    assert "command failed" in run.handoff and "--action test" in run.handoff
    assert run.tokens == server.tokens()
    command = [e for e in _evidence(reg, t["run_id"]) if e["kind"] == "command"]
    assert json.loads(command[0]["data"])["exit_code"] == 3


def test_an_attempt_to_approve_a_gate_is_refused_and_shows_in_the_evidence(agent, reg):
    made = make_goal(reg, acts={"test": [PY, "-c", "pass"], "publish": [PY, "-c", "pass"]})
    gate = gates.add(reg, "user", goal_id=made["goal"], title="Publish", scope="production",
                     blocks="action:publish")["id"]
    attempt = f"loopx gate approve --goal-id {made['goal']} --gate-id {gate}"
    with SERVERS[agent.executor](before=[attempt]) as server:
        t = agent.loopx(server, "turn", "--goal-id", made["goal"], "--executor", agent.executor)
    assert t["outcome"] == "failed"
    with reg.read() as tx:
        assert tx.one("SELECT status FROM gates WHERE id = ?", (gate,))["status"] == "pending"
    transcript = [e for e in _evidence(reg, t["run_id"]) if e["kind"] == "transcript"][0]
    assert "gate approve" in transcript["summary"]
    refused = [c for c in json.loads(transcript["data"])["commands"] if "gate approve" in c["command"]]
    assert refused and not refused[0]["ok"] and "actor_forbidden" in refused[0]["output"]


def test_an_api_error_fails_the_turn_with_the_reason_in_the_handoff(agent, reg):
    made = make_goal(reg, acts={"test": [PY, "-c", "pass"]})
    with SERVERS[agent.executor](refuse="scripted refusal: quota exceeded") as server:
        t = agent.loopx(server, "turn", "--goal-id", made["goal"], "--executor", agent.executor)
    run = _run(reg, t["run_id"])
    assert t["outcome"] == "failed" and run.tokens == 0
    assert "exited 1" in run.handoff and "scripted refusal: quota exceeded" in run.handoff
    assert _processes_of(t["run_id"]) == []


def test_a_model_server_that_never_answers_is_stopped_by_the_timeout_and_nothing_is_left_running(agent, reg):
    made = make_goal(reg, acts={"test": [PY, "-c", "pass"]})
    with SERVERS[agent.executor](hang=True) as server:
        started = time.monotonic()
        t = agent.loopx(server, "turn", "--goal-id", made["goal"], "--executor", agent.executor,
                        LOOPX_AGENT_TIMEOUT="4")
        took = time.monotonic() - started
    assert t["outcome"] == "failed" and "timed out after 4.0s" in _run(reg, t["run_id"]).handoff
    assert took < 30
    assert server.log, "the CLI never reached the scripted server"
    assert _processes_of(t["run_id"]) == []


def test_the_goals_remaining_wall_budget_bounds_the_turn(reg, tmp_path, sqlite_url):
    agent = Agent("codex", tmp_path, sqlite_url)
    made = make_goal(reg, limits={"max_wall_seconds": 3}, acts={"test": [PY, "-c", "pass"]})
    with OpenAIServer(hang=True) as server:
        t = agent.loopx(server, "turn", "--goal-id", made["goal"], "--executor", "codex")
    handoff = _run(reg, t["run_id"]).handoff
    bound = float(re.search(r"timed out after ([0-9.]+)s", handoff).group(1))
    assert t["outcome"] == "failed" and 1 <= bound <= 3
    assert _processes_of(t["run_id"]) == []


def test_the_runs_lease_bounds_the_turn(reg, tmp_path, sqlite_url):
    agent = Agent("claude-code", tmp_path, sqlite_url)
    made = make_goal(reg, acts={"test": [PY, "-c", "pass"]})
    with AnthropicServer(hang=True) as server:
        t = agent.loopx(server, "turn", "--goal-id", made["goal"], "--executor", "claude-code", "--ttl-seconds", "3")
    handoff = _run(reg, t["run_id"]).handoff
    bound = float(re.search(r"timed out after ([0-9.]+)s", handoff).group(1))
    assert t["outcome"] == "failed" and 1 <= bound <= 3
    assert _processes_of(t["run_id"]) == []


def _processes_of(run_id: str) -> list[int]:
    """Live processes whose environment names ``run_id`` (everything an executor started has it)."""
    found = []
    marker = f"LOOPX_RUN_ID={run_id}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    with open(f"/proc/{name}/stat", "rb") as s:
                        if s.read().split(b") ")[-1][:1] != b"Z":
                            found.append(int(name))
        except OSError:
            continue
    return found


def test_codex_in_a_read_only_sandbox_runs_nothing_and_the_turn_fails(reg, tmp_path, sqlite_url):
    agent = Agent("codex", tmp_path, sqlite_url)
    made = make_goal(reg, acts={"test": [PY, "-c", "pass"]})
    with OpenAIServer() as server:
        t = agent.loopx(server, "turn", "--goal-id", made["goal"], "--executor", "codex",
                        LOOPX_CODEX_SANDBOX="read-only")
    # Whether Codex reports the refused writes or (as with other settings) shows no command at all,
    # the turn is failed and the todo untouched.
    assert t["outcome"] == "failed"
    assert _todo(reg, made["goal"], made["todos"][0]).status == "open"


def test_an_agent_that_only_talks_fails_the_turn(reg, tmp_path, sqlite_url):
    agent = Agent("claude-code", tmp_path, sqlite_url)
    made = make_goal(reg, acts={"test": [PY, "-c", "pass"]})
    with AnthropicServer(policy=lambda results, tools: None) as server:
        t = agent.loopx(server, "turn", "--goal-id", made["goal"], "--executor", "claude-code")
    assert t["outcome"] == "failed"
    assert "ran none of the contract's commands" in _run(reg, t["run_id"]).handoff


def test_codex_loop_drives_a_goal_with_three_todos_to_done(reg, tmp_path, sqlite_url):
    agent = Agent("codex", tmp_path, sqlite_url)
    made = make_goal(reg, todo_texts=("one", "two", "three"),
                     acts={"test": [PY, "-c", "open('turns.txt', 'a').write('turn\\n')"]})
    with OpenAIServer() as server:
        out = agent.loopx(server, "loop", "--goal-id", made["goal"], "--executor", "codex", "--max-turns", "5")
    assert [t["outcome"] for t in out["turns"]] == ["ok", "ok", "ok"]
    assert out["stopped"] == "decision" and out["reasons"] == ["no_ready_work"]
    assert all(_todo(reg, made["goal"], t).status == "done" for t in made["todos"])
    assert (agent.workspace(made["goal"]) / "turns.txt").read_text() == "turn\n" * 3  # one workspace, every turn
    charged = sum(_run(reg, t["run_id"]).tokens for t in out["turns"])
    assert charged == server.tokens()


def test_claude_code_on_an_allow_list_is_denied_anything_else_and_the_denial_fails_the_turn(reg, tmp_path,
                                                                                             sqlite_url):
    agent = Agent("claude-code", tmp_path, sqlite_url)
    made = make_goal(reg, acts={"test": [PY, "-c", "pass"]})
    with AnthropicServer(before=["touch outside-the-contract.txt"]) as server:
        t = agent.loopx(server, "turn", "--goal-id", made["goal"], "--executor", "claude-code",
                        LOOPX_CLAUDE_PERMISSIONS="allowlist")
    assert t["outcome"] == "failed"
    assert "permission denied: Bash touch outside-the-contract.txt" in _run(reg, t["run_id"]).handoff
    assert not (agent.work / "outside-the-contract.txt").exists()
    # The contract's own commands were allowed and ran.
    assert _todo(reg, made["goal"], made["todos"][0]).status == "done"


def test_agent_prompt_prints_the_text_the_executor_sends(reg, tmp_path, sqlite_url):
    agent = Agent("claude-code", tmp_path, sqlite_url)
    made = make_goal(reg, acts={"test": [PY, "-c", "pass"]})
    with AnthropicServer() as server:
        shown = agent.loopx(server, "agent-prompt", "--goal-id", made["goal"], "--host", "claude-code",
                            "--managed", "--agent", "bot")
        # The same agent asks again and gets its open run back: the same contract, the same prompt.
        t = agent.loopx(server, "turn", "--goal-id", made["goal"], "--executor", "claude-code", "--agent", "bot")
    assert t["run_id"] == shown["run_id"] and t["outcome"] == "ok"
    assert server.prompts[0] == shown["prompt"]


@pytest.mark.postgres
@pytest.mark.parametrize("executor", ["claude-code", "codex"])
def test_an_agent_turn_on_a_postgresql_registry(executor, tmp_path):
    from tests import backends

    url = backends.fresh_registry("postgres", tmp_path)
    try:
        agent = Agent(executor, tmp_path, url)
        with Registry.open(url) as pg:
            made = make_goal(pg, acts={"test": [PY, "-c", "pass"]})
            with SERVERS[executor]() as server:
                t = agent.loopx(server, "turn", "--goal-id", made["goal"], "--executor", executor)
            assert t["outcome"] == "ok", t["handoff"]
            assert _run(pg, t["run_id"]).tokens == server.tokens()
            assert _todo(pg, made["goal"], made["todos"][0]).status == "done"
    finally:
        backends.drop_registry("postgres", url)
