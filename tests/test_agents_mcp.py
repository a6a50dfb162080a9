"""``loopx mcp``: an MCP client from the official SDK drives a whole turn over stdio."""

from __future__ import annotations

import json
import os
import sys

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is not installed (pip install 'loopx[mcp]')")

import anyio  # noqa: E402  (installed with mcp)

from loopx import runs, todos  # noqa: E402
from loopx.registry import Registry  # noqa: E402
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
            assert kinds == ["command", "note"]
    finally:
        reg.close()
