"""At a gate, the decision comes first: where a pending gate holds the remaining work (Issue-Fix's
shape: a production gate on the publish todo, the other todos done), `status`, `should-run
--dry-run` and the dashboard's API say `gate_pending` - not `no_ready_work` - and offer that
gate's approve and reject commands first, with what approving does, and never `close`."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request

import pytest

from loopx.status_server import make_server
from tests.conftest import loopx_env

PY = sys.executable


def cli(url, *args):
    p = subprocess.run([PY, "-m", "loopx", *map(str, args)], env=loopx_env(url), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return json.loads(p.stdout) if "--json" in args else p.stdout


@pytest.mark.slow
def test_a_pending_gate_on_the_last_todo_is_the_first_thing_offered_everywhere(sqlite_url):
    url = sqlite_url
    gid = cli(url, "project-prompt", "create", "--title", "Fix issue 7", "--json")["id"]
    fix = cli(url, "todo", "add", gid, "--text", "Fix and verify", "--json")["id"]
    publish = cli(url, "todo", "add", gid, "--text", "Publish the fix", "--depends-on", fix, "--json")["id"]
    gate = cli(url, "gate", "add", gid, "--title", "Publish sha abc123 to origin/fix-7", "--scope", "production",
               "--blocks", f"todo:{publish}", "--json")["id"]
    cli(url, "todo", "done", gid, "--todo-id", fix)
    approve = f"loopx gate approve --goal-id {gid} --gate-id {gate}"
    reject = f"loopx gate reject --goal-id {gid} --gate-id {gate} --comment why"

    # should-run --dry-run: the reason, the user channel (decision first, no close), its text.
    c = cli(url, "quota", "should-run", gid, "--dry-run", "--json")
    assert (c["decision"], c["reasons"]) == ("ask_user", ["gate_pending"])
    uc = c["interaction_contract"]["user_channel"]
    assert uc["next_user_actions"][:2] == [approve, reject]
    assert not any(" close " in a for a in uc["next_user_actions"])
    assert uc["decisions"] == [{"gate_id": gate, "title": "Publish sha abc123 to origin/fix-7", "scope": "production",
                                "approve": approve, "reject": reject, "approving": f"lets todo {publish} be worked on"}]
    assert "a user must add work" not in c["interaction_contract"]["agent_channel"]["primary_action"]
    text = cli(url, "quota", "should-run", gid, "--dry-run")
    assert f"decide gate {gate} (Publish sha abc123 to origin/fix-7): approving lets todo {publish}" in text
    listed = [ln.strip() for ln in text.split("user actions:", 1)[1].splitlines()[1:] if ln.strip()]
    assert listed[:2] == [approve, reject] and "close" not in text

    # status: needs_you with the same commands first, and the same decisions.
    view = cli(url, "status", "--goal-id", gid, "--json")
    needs = view["needs_you"]
    assert needs["reason"] == "gate_pending" and needs["commands"][:2] == [approve, reject]
    assert needs["decisions"] == uc["decisions"]
    assert not any("close" in x for x in needs["commands"])
    text = cli(url, "status", "--goal-id", gid)
    assert text.index("approving lets todo") < text.index(approve)

    # The dashboard's goal page data, over HTTP from the status server.
    srv = make_server(url, host="127.0.0.1", port=0, poll_interval=0.05)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.server_address[1]}/api/goals/{gid}", timeout=30) as r:
            page = json.loads(r.read())
    finally:
        srv.shutdown_all()
    assert page["needs_you"]["commands"][:2] == [approve, reject]
    assert page["needs_you"]["decisions"][0]["approving"] == f"lets todo {publish} be worked on"
    assert page["current_contract"]["reasons"] == ["gate_pending"]

    # Approving it makes the publish todo the next turn's work.
    cli(url, "gate", "approve", gid, "--gate-id", gate)
    c = cli(url, "quota", "should-run", gid, "--dry-run", "--json")
    assert c["decision"] == "run" and c["interaction_contract"]["agent_channel"]["ready_todos"][0]["id"] == publish
