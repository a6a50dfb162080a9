"""One "needs you": `status` (its count, its list and its order), the dashboard's API over real
HTTP, notifications and MCP's `goal_status` name the same goals on the same registry, for the
same reasons - goals waiting for a person first, the one waiting longest first."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import urllib.request

import pytest
from loopx.status_server import make_server
from tests.conftest import loopx_env

PY = sys.executable


def cli(url, tmp_path, *args):
    p = subprocess.run([PY, "-m", "loopx", "--format", "json", *map(str, args)],
                       env=loopx_env(url, XDG_CONFIG_HOME=str(tmp_path / "config")), cwd=tmp_path / "work",
                       capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, 1), (args, p.stdout, p.stderr)
    return json.loads(p.stdout) if p.stdout.strip() else None


def registry_of_six(url, tmp_path) -> dict:
    """Six open or paused goals, three of which wait for a person."""
    (tmp_path / "work").mkdir()
    made = {}
    for name in ("fine", "stuck", "gated", "idle", "failed_once", "paused"):
        made[name] = cli(url, tmp_path, "project-prompt", "create", "--title", name)["id"]
    # fine: a todo is ready - agents have work, nobody is needed.
    cli(url, tmp_path, "todo", "add", made["fine"], "--text", "work")
    # stuck: the same step failed in the last run (stuck after 1): repeated_failure.
    cli(url, tmp_path, "action", "add", made["stuck"], "--name", "f", "--", "false")
    cli(url, tmp_path, "todo", "add", made["stuck"], "--text", "try")
    cli(url, tmp_path, "quota", "set", made["stuck"], "--stuck-after", "1")
    cli(url, tmp_path, "turn", made["stuck"], "--executor", "shell")
    # gated: a gate on the whole goal.
    cli(url, tmp_path, "gate", "add", made["gated"], "--title", "Go?", "--blocks", "all")
    # idle: its only todo is done: nothing left to do (a person adds work or closes it).
    t = cli(url, tmp_path, "todo", "add", made["idle"], "--text", "once")["id"]
    cli(url, tmp_path, "todo", "done", made["idle"], "--todo-id", t)
    # failed_once: its newest run failed, but agents retry (stuck after 3): not a person's yet.
    cli(url, tmp_path, "action", "add", made["failed_once"], "--name", "f", "--", "false")
    cli(url, tmp_path, "todo", "add", made["failed_once"], "--text", "try")
    cli(url, tmp_path, "turn", made["failed_once"], "--executor", "shell")
    # paused: a pending gate, but the user paused the goal.
    cli(url, tmp_path, "gate", "add", made["paused"], "--title", "Later", "--blocks", "all")
    cli(url, tmp_path, "project-prompt", "pause", made["paused"])
    return made


async def _mcp_needs(url, goal_ids):
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=PY, args=["-m", "loopx", "mcp"], env=loopx_env(url))
    out = {}
    async with stdio_client(params, errlog=sys.stderr) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            for g in goal_ids:
                shown = json.loads((await s.call_tool("goal_status", {"goal_id": g})).content[0].text)
                out[g] = (shown.get("needs_you") or {}).get("reason")
    return out


@pytest.mark.slow
def test_status_the_dashboard_notifications_and_mcp_agree_on_who_needs_you(sqlite_url, tmp_path):
    url = sqlite_url
    made = registry_of_six(url, tmp_path)
    want = {made["stuck"]: "repeated_failure", made["gated"]: "gate_pending", made["idle"]: "no_ready_work"}
    oldest_first = [made["stuck"], made["gated"], made["idle"]]

    # status: the count, the list, the order.
    view = cli(url, tmp_path, "status")
    assert view["counts"]["attention"] == 3, view["counts"]
    listed = {g["id"]: g["needs_you"]["reason"] for g in view["goals"] if g["needs_you"]}
    assert listed == want
    assert [g["id"] for g in view["goals"]][:3] == oldest_first
    text = subprocess.run([PY, "-m", "loopx", "status"], env=loopx_env(url), capture_output=True, text=True,
                          timeout=60).stdout
    assert "; 3 need you" in text and text.count("NEEDS YOU") == 3
    assert sorted(ln.split()[1] for ln in text.splitlines() if ln.startswith("! ")) == sorted(want)

    # The dashboard's API, over real HTTP from the status server.
    srv = make_server(url, host="127.0.0.1", port=0, poll_interval=0.05)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        port = srv.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=30) as resp:
            api = json.loads(resp.read())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/assets/dashboard.js", timeout=30) as resp:
            js = resp.read().decode()
    finally:
        srv.shutdown_all()
    assert api["counts"]["attention"] == 3
    assert {g["id"]: g["needs_you"]["reason"] for g in api["goals"] if g["needs_you"]} == want
    assert [g["id"] for g in api["goals"]][:3] == oldest_first
    assert "need you`" in js and 'goal.needs_you ? "attention"' in js  # the count and the row's mark

    # Notifications: one per goal that needs a person, none for the others.
    inbox = tmp_path / "inbox.jsonl"
    cli(url, tmp_path, "config", "set", "notify.command", f"cat >> {inbox}; echo >> {inbox}")
    cli(url, tmp_path, "config", "set", "notify.min_interval_seconds", "0")
    cli(url, tmp_path, "notify", "check")
    told = [json.loads(ln) for ln in inbox.read_text().splitlines() if ln.strip()]
    assert {n["goal_id"]: n["reason"] for n in told} == want

    # MCP's goal_status, as an agent harness reads it.
    assert asyncio.run(_mcp_needs(url, list(made.values()))) == {g: want.get(g) for g in made.values()}
