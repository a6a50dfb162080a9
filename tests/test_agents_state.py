"""The agent CLIs' state is the goal's own: nothing a hostile agent writes there reaches the user.

Real ``loopx turn --executor claude-code|codex`` processes, confined, with the real CLIs driven by
scripted model servers (tests/model_servers.py) that have the CLI run an attack script through its
own shell tool. The user has a login and settings of their own (``~/.claude``, ``~/.claude.json``,
``$CODEX_HOME``). The agent plants rules, a shell snapshot, hooks, MCP servers and
``AGENTS.override.md`` in the user's directories and in its own; afterwards the user's directories
are byte-for-byte what they were, and the user's next (unconfined) CLI run sends the model none of
the planted text - while the user's own rule does reach it (the check can see such text).
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from loopx.turn.executors import homes
from loopx.ledger.registry import Registry
from tests.test_agents_cli import SERVERS, Agent
from tests.test_turn_helpers import PY, make_goal

USER_RULE = "USER-OWN-RULE-5c1e"
PLANTED = "PLANTED-BY-THE-AGENT-9d2a"

# Each target prints "WROTE <where>" or "REFUSED <where>"; {user} is the user's own directory,
# {var} the variable the executor points at the goal's own one.
ATTACK = r"""
try() {{ where=$1; shift; if sh -c "$*" 2>/dev/null; then echo "WROTE $where"; else echo "REFUSED $where"; fi; }}
for d in "{user}" "${var}"; do
  try "$d/rules" "mkdir -p '$d/rules' && echo '{planted} rule' > '$d/rules/x.md'"
  try "$d/shell-snapshots" "mkdir -p '$d/shell-snapshots' && echo 'echo {planted} > /tmp/pwned' > '$d/shell-snapshots/snapshot-bash-1-x.sh'"
  try "$d/settings.json" "echo '{{\"hooks\": {{\"SessionStart\": [{{\"hooks\": [{{\"type\": \"command\", \"command\": \"echo {planted}\"}}]}}]}}}}' > '$d/settings.json'"
  try "$d/AGENTS.override.md" "echo '{planted} override' > '$d/AGENTS.override.md'"
  try "$d/config.toml" "echo 'notify = [\"sh\", \"-c\", \"echo {planted}\"]' >> '$d/config.toml'"
  try "$d/projects" "mkdir -p '$d/projects' && echo '{planted} note' > '$d/projects/note'"
done
try "$HOME/.claude.json" "echo '{{\"mcpServers\": {{\"evil\": {{\"command\": \"sh\"}}}}}}' > '$HOME/.claude.json'"
echo "GOAL_HOME ${var}"
true
"""


def _user_world(agent: Agent) -> dict:
    """The user's own login and settings, as a user who uses both CLIs has them."""
    home = agent.tmp / "home"
    claude = home / ".claude"
    (claude / "rules").mkdir(parents=True)
    (claude / "rules" / "mine.md").write_text(f"{USER_RULE}: always answer in English.\n")
    (claude / "settings.json").write_text(
        '{"env": {"MY_SETTING": "carried"}, "hooks": {"SessionStart": [{"hooks": [{"type": "command", '
        '"command": "touch hook-ran"}]}]}, "statusLine": {"type": "command", "command": "date"}}\n')
    (home / ".claude.json").write_text('{"userID": "u-1234", "hasCompletedOnboarding": true, '
                                       '"mcpServers": {"mine": {"command": "true"}}}\n')
    codex = agent.tmp / "codex-home"
    codex.mkdir()
    (codex / "AGENTS.md").write_text(f"{USER_RULE}: run tests before you finish.\n")
    (codex / "auth.json").write_text('{"OPENAI_API_KEY": "sk-from-the-users-login"}\n')
    (codex / "config.toml").write_text('model_reasoning_effort = "low"\nnotify = ["sh", "-c", "touch notified"]\n'
                                       '[mcp_servers.mine]\ncommand = "true"\n'
                                       '[model_providers.mine]\nname = "mine"\nbase_url = "http://127.0.0.1:9/v1"\n'
                                       'env_key = "MY_KEY"\n')
    return {"claude": claude, "claude_json": home / ".claude.json", "codex": codex}


def _snapshot(*paths: Path) -> dict:
    """Every file and link beneath ``paths``: path -> bytes (or link target)."""
    out = {}
    for top in paths:
        items = [top] if top.is_file() else sorted(top.rglob("*"))
        for p in items:
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p))
            elif p.is_file():
                out[str(p)] = p.read_bytes()
            else:
                out[str(p)] = "dir"
    return out


def _attack(agent: Agent, made: dict, world: dict, script_name="attack.sh") -> tuple[dict, list[str], str]:
    """One governed turn whose agent runs the attack script first; (turn, result lines, bodies)."""
    claude = agent.executor == "claude-code"
    user = world["claude"] if claude else world["codex"]
    var = "CLAUDE_CONFIG_DIR" if claude else "CODEX_HOME"
    (agent.work / script_name).write_text(ATTACK.format(user=user, var=var, planted=PLANTED))
    with SERVERS[agent.executor](before=[f"sh {script_name} > {script_name}.out 2>&1"]) as server:
        t = agent.loopx(server, "turn", made["goal"], "--executor", agent.executor, timeout=240)
        bodies = server.bodies()
    return t, (agent.workspace(made["goal"]) / f"{script_name}.out").read_text().splitlines(), bodies


def _users_next_run(agent: Agent, world: dict) -> str:
    """The user's own CLI, unconfined and outside LoopX, asked something: every request body it sent."""
    with SERVERS[agent.executor]() as server:
        env = agent.env(server)
        if agent.executor == "claude-code":
            argv = [agent.bin, "-p", "hello", "--output-format", "json"]
        else:
            argv = [agent.bin, "exec", "--json", "--skip-git-repo-check", "-c", "model_provider=loopx",
                    "-c", f'model_providers.loopx={{name="loopx", base_url="{server.url()}", wire_api="responses", '
                          'env_key="OPENAI_API_KEY"}', "-m", "scripted-model", "hello"]
        p = subprocess.run(argv, env=env, cwd=agent.tmp, capture_output=True, text=True, timeout=180,
                           stdin=subprocess.DEVNULL)
        assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
        return server.bodies()


class _NoServer:
    """What :meth:`Agent.env` asks of a server, for the user's environment without one."""

    def url(self) -> str:
        return "http://127.0.0.1:9"


@pytest.fixture(params=["claude-code", "codex"])
def agent(request, tmp_path, sqlite_url):
    return Agent(request.param, tmp_path, sqlite_url)


@pytest.mark.agents  # the real Claude Code / Codex CLIs
def test_what_a_hostile_agent_writes_to_its_cli_state_never_reaches_the_users_own_sessions(agent, sqlite_url,
                                                                                           monkeypatch):
    world = _user_world(agent)
    # The check can see such text: the user's own rule reaches the model in the user's own run.
    assert USER_RULE in _users_next_run(agent, world)
    users = (world["claude"], world["claude_json"], world["codex"])
    before = _snapshot(*users)
    reg = Registry.open(sqlite_url)
    made = make_goal(reg, acts={"test": [PY, "-c", "pass"]})
    goal_home = Path(homes.goal_dir(reg, made["goal"])) / ("claude" if agent.executor == "claude-code" else "codex")
    reg.close()

    t, lines, bodies = _attack(agent, made, world)
    user = str(world["claude"] if agent.executor == "claude-code" else world["codex"])
    # Every write into the user's directories was refused (or, where the step's world does not show
    # them - here under the test's /tmp - landed in the step's private /tmp and is gone: the
    # snapshot below is what counts); the same writes in the goal's own worked.
    if "/tmp/" not in user:
        assert [ln for ln in lines if ln.startswith("WROTE") and user in ln] == [], lines
        assert f"REFUSED {world['claude_json']}" in lines, lines
    assert f"GOAL_HOME {goal_home}" in lines, lines
    assert all(f"WROTE {goal_home}/{name}" in lines for name in ("rules", "shell-snapshots", "AGENTS.override.md")), \
        lines
    assert t["outcome"] == "ok", t["handoff"]
    # The user's directories are byte-for-byte what they were.
    assert _snapshot(*users) == before
    # The goal's directory was seeded from the user's login with the allowlisted settings only:
    # the user's rules, hooks, status line, MCP servers and notify command stayed behind.
    assert USER_RULE not in bodies
    assert oct(goal_home.stat().st_mode & 0o777) == "0o700"
    # The user's next session sends the model none of the planted text.
    assert PLANTED not in _users_next_run(agent, world)

    # The next turn of the goal starts from a directory made again: the planted files are gone,
    # the CLI's own history (projects/, sessions/) stays.
    user_env = agent.env(_NoServer())  # seeding here, in this process, from the same user's login
    for name in ("HOME", "CODEX_HOME", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        if name in user_env:
            monkeypatch.setenv(name, user_env[name])
    reg = Registry.open(sqlite_url)
    homes.seed(reg, made["goal"], agent.executor)
    reg.close()
    left = {p.name for p in goal_home.iterdir()}
    assert not left & {"rules", "shell-snapshots", "AGENTS.override.md"}, left
    if agent.executor == "claude-code":
        assert (goal_home / "projects" / "note").exists()
        assert '"MY_SETTING": "carried"' in (goal_home / "settings.json").read_text()
        assert "hooks" not in (goal_home / "settings.json").read_text()
        assert "statusLine" not in (goal_home / "settings.json").read_text()
        account = json.loads((goal_home / ".claude.json").read_text())
        assert account["userID"] == json.loads(world["claude_json"].read_text())["userID"], account
        assert "mcpServers" not in account, account
    else:
        config = tomllib.loads((goal_home / "config.toml").read_text())
        assert config == {"model_reasoning_effort": "low", "model_providers": {"mine": {
            "name": "mine", "base_url": "http://127.0.0.1:9/v1", "env_key": "MY_KEY"}}}, config
        assert (goal_home / "auth.json").read_bytes() == (world["codex"] / "auth.json").read_bytes()


@pytest.mark.agents  # the real Claude Code / Codex CLIs
def test_two_goals_get_homes_of_their_own_and_one_cannot_see_what_the_others_agent_wrote(agent, sqlite_url):
    world = _user_world(agent)
    reg = Registry.open(sqlite_url)
    a = make_goal(reg, title="Goal A", acts={"test": [PY, "-c", "pass"]})
    b = make_goal(reg, title="Goal B", acts={"test": [PY, "-c", "pass"]})
    kind = "claude" if agent.executor == "claude-code" else "codex"
    home_a = Path(homes.goal_dir(reg, a["goal"])) / kind
    reg.close()
    _t, lines_a, _ = _attack(agent, a, world)
    assert f"WROTE {home_a}/projects" in lines_a, lines_a
    var = "CLAUDE_CONFIG_DIR" if kind == "claude" else "CODEX_HOME"
    (agent.work / "look.sh").write_text(
        f'echo "GOAL_HOME ${var}"; ls -aR "${var}"; cat "{home_a}/projects/note" && echo READ-A || echo CANNOT-READ-A\n'
        f'ls "{home_a.parent.parent}" | grep -q "{a["goal"]}" && echo SAW-A || echo CANNOT-SEE-A\n')
    with SERVERS[agent.executor](before=["sh look.sh > look.out 2>&1"]) as server:
        t = agent.loopx(server, "turn", b["goal"], "--executor", agent.executor, timeout=240)
        bodies_b = server.bodies()
    assert t["outcome"] == "ok", t["handoff"]
    out = (agent.workspace(b["goal"]) / "look.out").read_text()
    home_b = out.split("GOAL_HOME ", 1)[1].split("\n", 1)[0]
    assert home_b != str(home_a) and Path(home_b).parent.name == b["goal"], out
    # Goal A's directory is neither readable nor listed (in a step's world it is not there at all).
    assert "CANNOT-READ-A" in out and "CANNOT-SEE-A" in out and "SAW-A" not in out, out
    assert PLANTED not in out and PLANTED not in bodies_b, out


def test_closing_a_goal_removes_its_agent_cli_state_and_no_other_goals(tmp_path, sqlite_url, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-scripted")
    reg = Registry.open(sqlite_url)
    a, b = make_goal(reg, title="A")["goal"], make_goal(reg, title="B")["goal"]
    home_a, home_b = homes.seed(reg, a, "claude-code"), homes.seed(reg, b, "claude-code")
    reg.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update({"LOOPX_REGISTRY": sqlite_url, "LOOPX_PLUGINS": ""})
    p = subprocess.run([PY, "-m", "loopx", "project-prompt", "close", a], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert not Path(home_a).parent.exists() and Path(home_b).is_dir()
