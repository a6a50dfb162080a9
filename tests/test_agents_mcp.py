"""``loopx mcp``: an MCP client from the official SDK drives a whole turn over stdio."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

# Found, not imported: importing the SDK costs 1.4 s of CPU, which collecting this file in every
# worker (the quick tier's too, which deselects it) would pay; the tests import what they use.
if importlib.util.find_spec("mcp") is None:
    pytest.skip("the mcp SDK is not installed (pip install '.[mcp]')", allow_module_level=True)

import anyio  # noqa: E402  (installed with mcp)

from loopx.domain import runs, todos  # noqa: E402
from loopx.ledger.registry import Registry  # noqa: E402
from loopx.testing import wait_until  # noqa: E402
from tests.test_turn_helpers import make_goal  # noqa: E402

PY = sys.executable


async def _session(url, body):
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env["LOOPX_REGISTRY"] = url
    params = StdioServerParameters(command=PY, args=["-m", "loopx", "mcp"], env=env)
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)


def _json(result):
    return json.loads(result.content[0].text)


@pytest.mark.slow
def test_an_mcp_client_runs_a_whole_turn_and_is_refused_what_only_a_user_may_do(tmp_path, sqlite_url):
    reg = Registry.open(sqlite_url)
    made = make_goal(reg, acts={"test": [PY, "-c", "print('green')"]})
    g, todo = made["goal"], made["todos"][0]

    async def body(s):
        listed = {t.name: t for t in (await s.list_tools()).tools}
        assert set(listed) == {"should_run", "goal_status", "todo_add", "todo_claim", "todo_done", "evidence_add",
                               "exec_step", "run_finish", "gate_request"}
        assert listed["run_finish"].input_schema["properties"]["outcome"]["enum"] == ["ok", "partial", "failed"]
        assert listed["todo_claim"].input_schema["additionalProperties"] is False

        contract = _json(await s.call_tool("should_run", {"goal_id": g, "agent": "mcp-bot"}))
        assert contract["decision"] == "run"
        r = contract["interaction_contract"]["run_id"]
        assert not (await s.call_tool("todo_claim", {"goal_id": g, "todo_id": todo, "run_id": r})).is_error
        ran = _json(await s.call_tool("exec_step", {"run_id": r, "action": "test"}))
        assert ran["data"]["exit_code"] == 0 and "green" in ran["data"]["output_tail"]
        await s.call_tool("evidence_add", {"run_id": r, "summary": "the test is green"})
        # An allowed-action runner is not a back door: a command the contract does not list is refused.
        sneaky = await s.call_tool("exec_step", {"run_id": r, "argv": ["loopx", "gate", "approve", "--goal-id", g,
                                                                        "--gate-id", "x-000000000000"]})
        assert sneaky.is_error and _json(sneaky)["error"]["code"] == "action_not_allowed"
        assert not (await s.call_tool("todo_done", {"goal_id": g, "todo_id": todo, "run_id": r})).is_error
        finished = _json(await s.call_tool("run_finish", {"run_id": r, "outcome": "ok", "tokens": 900,
                                                          "handoff": "done through MCP"}))
        assert finished["status"] == "finished"

        # Nothing a user alone may do: not offered, and refused when asked for by name.
        gate = _json(await s.call_tool("gate_request", {"goal_id": g, "title": "Ship?", "scope": "production"}))
        refused = await s.call_tool("gate_approve", {"goal_id": g, "gate_id": gate["id"]})
        assert refused.is_error and _json(refused)["error"]["code"] == "actor_forbidden"
        # Precise schemas: a wrong type or an unknown argument is invalid_argument, with nothing written.
        for bad in ({"run_id": r, "outcome": "great"}, {"run_id": r, "outcome": "ok", "tokens": "9"},
                    {"run_id": r, "outcome": "ok", "extra": 1}, {"outcome": "ok"}):
            res = await s.call_tool("run_finish", bad)
            assert res.is_error and _json(res)["error"]["code"] == "invalid_argument", bad
        missing = await s.call_tool("goal_status", {"goal_id": "g-000000000000"})
        assert _json(missing)["error"]["code"] == "goal_not_found"

        resources = (await s.list_resources()).resources
        assert [str(x.uri) for x in resources] == [f"loopx://goals/{g}"]
        read = await s.read_resource(f"loopx://goals/{g}")
        return r, gate["id"], json.loads(read.contents[0].text)

    try:
        r, gate_id, goal = anyio.run(_session, sqlite_url, body)
        assert goal["id"] == g
        with reg.read() as tx:
            run = runs.load_run(tx, r)
            assert (run.status, run.outcome, run.tokens, run.handoff) == ("finished", "ok", 900, "done through MCP")
            assert todos.load_todo(tx, g, todo).status == "done"
            assert tx.one("SELECT status FROM gates WHERE id = ?", (gate_id,))["status"] == "pending"
            kinds = [e["kind"] for e in tx.query("SELECT kind FROM evidence WHERE run_id = ? ORDER BY created_at, id", (r,))]
            assert kinds == ["step_started", "command", "note"]  # the step's claim, its result, the agent's note
    finally:
        reg.close()


@pytest.mark.slow
def test_every_command_the_broker_keeps_for_the_user_is_refused_over_mcp_by_its_tool_name(sqlite_url, monkeypatch):
    # The server loads every installed plugin (its environment has no LOOPX_PLUGINS); so does this list.
    monkeypatch.delenv("LOOPX_PLUGINS", raising=False)
    from loopx.turn import broker
    from loopx.seam import capabilities

    def name(command, sub):  # `gate approve` -> gate_approve; the tools call a project-prompt a goal
        return "_".join(["goal" if command == "project-prompt" else command, *([sub] if sub else [])]).replace("-", "_")

    users = broker.USER_ONLY | capabilities.user_commands()
    assert ("issue-fix", "start") in users and ("approvals", None) in users  # the capabilities' own count too
    reg = Registry.open(sqlite_url)
    g = make_goal(reg)["goal"]

    async def body(s):
        offered = {t.name for t in (await s.list_tools()).tools}
        answers = {}
        for command, sub in sorted(users, key=str):
            tool = name(command, sub)
            assert tool not in offered
            answers[tool] = await s.call_tool(tool, {"goal_id": g})
        return answers

    try:
        answers = anyio.run(_session, sqlite_url, body)
        wrong = {tool: _json(a) for tool, a in answers.items()
                 if not (a.is_error and _json(a)["error"]["code"] == "actor_forbidden")}
        assert wrong == {}
        assert "goal_retry" in answers and "notify_check" in answers and "self_repair_accept" in answers
    finally:
        reg.close()


@pytest.mark.agents
def test_claude_code_takes_a_turn_through_loopx_mcp_registered_as_documented(tmp_path, sqlite_url):
    """The `mcpServers` snippet of docs/agents.md, given to the real Claude Code."""
    import subprocess

    from tests.model_servers import AnthropicServer
    from tests.test_agents_cli import cli_path

    claude = cli_path("claude")
    reg = Registry.open(sqlite_url)
    made = make_goal(reg, acts={"test": [PY, "-c", "print('green')"]})
    g, todo = made["goal"], made["todos"][0]
    seen_tools = []

    def policy(results, tools):
        seen_tools.append(sorted(t for t in tools if t.startswith("mcp__loopx__")))
        if not results:
            return "mcp__loopx__should_run", {"goal_id": g, "agent": "claude"}
        run_id = json.loads(results[0])["interaction_contract"]["run_id"]
        steps = [("mcp__loopx__todo_claim", {"goal_id": g, "todo_id": todo, "run_id": run_id}),
                 ("mcp__loopx__exec_step", {"run_id": run_id, "action": "test"}),
                 ("mcp__loopx__todo_done", {"goal_id": g, "todo_id": todo, "run_id": run_id}),
                 ("mcp__loopx__run_finish", {"run_id": run_id, "outcome": "ok", "handoff": "via MCP"})]
        return steps[len(results) - 1] if len(results) <= len(steps) else None

    # The launcher must find this checkout's loopx: the snippet's "loopx" with an absolute path.
    config = {"mcpServers": {"loopx": {"type": "stdio", "command": os.path.join(os.path.dirname(PY), "loopx"),
                                       "args": ["mcp"], "env": {"LOOPX_REGISTRY": sqlite_url}}}}
    (tmp_path / "mcp.json").write_text(json.dumps(config))
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPX_", "ANTHROPIC_"))}
    try:
        with AnthropicServer(policy=policy) as server:
            env.update({"HOME": str(home), "ANTHROPIC_BASE_URL": server.url(), "ANTHROPIC_API_KEY": "sk-ant-scripted",
                        "IS_SANDBOX": "1", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
                        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                        # MCP tools are offered directly, not behind Claude Code's ToolSearch (a model
                        # would search for them; a scripted server calls them by name).
                        "ENABLE_TOOL_SEARCH": "false"})
            p = subprocess.run([claude, "-p", "Take one LoopX turn.", "--output-format", "stream-json", "--verbose",
                                "--permission-mode", "bypassPermissions", "--mcp-config", str(tmp_path / "mcp.json"),
                                "--strict-mcp-config"], env=env, cwd=tmp_path, stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        assert seen_tools[0] == sorted(f"mcp__loopx__{n}" for n in (
            "should_run", "goal_status", "todo_add", "todo_claim", "todo_done", "evidence_add", "exec_step",
            "run_finish", "gate_request"))
        assert server.paths() == {"POST /v1/messages?beta=true"}
        with reg.read() as tx:
            run = tx.one("SELECT status, outcome, handoff FROM runs WHERE goal_id = ?", (g,))
            assert (run["status"], run["outcome"], run["handoff"]) == ("finished", "ok", "via MCP")
            assert todos.load_todo(tx, g, todo).status == "done"
    finally:
        reg.close()


@pytest.mark.slow
def test_a_long_exec_step_does_not_hold_up_the_other_tools(tmp_path, sqlite_url):
    """exec_step runs its command off the event loop: while a slow step runs, the agent (or a
    second request from it) can still read its goal and record evidence."""
    reg = Registry.open(sqlite_url)
    flag = tmp_path / "release"
    # The step waits until the test has read the goal, so the two calls truly overlap.
    slow = [PY, "-c", f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.05)\nprint('slow done')"]
    made = make_goal(reg, acts={"slow": slow})
    g = made["goal"]

    async def body(s):
        contract = _json(await s.call_tool("should_run", {"goal_id": g}))
        r = contract["interaction_contract"]["run_id"]
        order = []

        async def run_slow():
            with anyio.fail_after(60):
                res = _json(await s.call_tool("exec_step", {"run_id": r, "action": "slow"}))
            order.append(("exec", res["data"]["exit_code"]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_slow)

            def step_started():
                with Registry.open(sqlite_url, readonly=True) as other, other.read() as tx:
                    return tx.query("SELECT id FROM evidence WHERE run_id = ? AND kind = 'step_started'", (r,))

            await anyio.to_thread.run_sync(lambda: wait_until(step_started, "the slow step to start"))
            try:
                with anyio.fail_after(20):
                    status = _json(await s.call_tool("goal_status", {"goal_id": g}))
                    noted = await s.call_tool("evidence_add", {"run_id": r, "summary": "still working"})
                order.append(("status", status["id"]))
                assert not noted.is_error
            finally:
                flag.write_text("go")  # never leave the step's process waiting
        return order, r

    try:
        order, r = anyio.run(_session, sqlite_url, body)
        assert order == [("status", g), ("exec", 0)]
        with reg.read() as tx:
            kinds = sorted(e["kind"] for e in tx.query("SELECT kind FROM evidence WHERE run_id = ?", (r,)))
        assert kinds == ["command", "note", "step_started"]
    finally:
        reg.close()
