"""A todo is done only when its work ran: a todo names the actions that do it (`todo add --action`),
a turn on it runs exactly those, and a gate holding one back keeps the todo open - shown as
`blocked by gate ...` - until a user approves; the next turn then runs it. Real processes: the
shell executor's confined turn, the README's harness loop, `summary-all`, `todo done` refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import loopx_env

PY = sys.executable


def cli(url, cwd, *args, actor=None):
    """One real ``loopx`` process: ``(exit status, parsed JSON or the text)``."""
    extra = {"LOOPX_ACTOR": actor} if actor else {}
    p = subprocess.run([PY, "-m", "loopx", *[str(a) for a in args]], env=loopx_env(url, **extra), cwd=cwd,
                       capture_output=True, text=True, timeout=120)
    out = p.stdout
    if "--json" in args:
        out = json.loads(p.stdout) if p.stdout.strip() else None
    return p.returncode, out if out is not None else p.stderr


def goal_with_a_publish_gate(url, work: Path) -> dict:
    """The README's shape: count and publish actions, a production gate on publish, and two todos
    that name the action that does each."""
    (work / "revenue.csv").write_text("month,revenue\n2026-01,100\n")
    _, g = cli(url, work, "project-prompt", "create", "--title", "Revenue report", "--json")
    gid = g["id"]
    cli(url, work, "action", "add", gid, "--name", "count", "--", "wc", "-l", "revenue.csv")
    cli(url, work, "action", "add", gid, "--name", "publish", "--", "cp", "revenue.csv", "report.csv")
    _, gate = cli(url, work, "gate", "add", gid, "--title", "Publish the report", "--scope", "production",
                  "--blocks", "action:publish", "--json")
    _, count = cli(url, work, "todo", "add", gid, "--text", "Count the rows", "--priority", "P1",
                   "--action", "count", "--json")
    _, publish = cli(url, work, "todo", "add", gid, "--text", "Publish the report", "--action", "publish", "--json")
    assert publish["actions"] == ["publish"] and publish["depends_on"] == []
    return {"goal": gid, "gate": gate["id"], "count": count["id"], "publish": publish["id"]}


def workdir(tmp_path: Path) -> Path:
    """Where the turn works: not the registry's directory (a confined step never writes that)."""
    work = tmp_path / "work"
    work.mkdir()
    return work


def workspace(url, work, gid) -> Path:
    """The goal's workspace: its steps run there (made from ``work``, the project, on its first
    turn), so what a step writes is there, not in ``work``."""
    _, ws = cli(url, work, "workspace", "show", gid, "--json")
    return Path(ws["workspace"])


def todo(url, work, gid, todo_id) -> dict:
    _, found = cli(url, work, "todo", "list", gid, "--json")
    return next(t for t in found if t["id"] == todo_id)


@pytest.mark.slow
def test_a_todo_whose_action_a_gate_holds_back_stays_open_until_approved_then_its_step_runs(sqlite_url, tmp_path):
    url, work = sqlite_url, workdir(tmp_path)
    made = goal_with_a_publish_gate(url, work)
    gid = made["goal"]

    # Turn 1: the count todo, with only its own action.
    code, t = cli(url, work, "turn", gid, "--executor", "shell", "--json")
    assert code == 0 and t["outcome"] == "ok", t
    assert f"held back: action publish (gate {made['gate']} pending)" in t["handoff"]
    assert todo(url, work, gid, made["count"])["status"] == "done"
    ws = workspace(url, work, gid)
    assert (ws / "revenue.csv").exists() and not (ws / "report.csv").exists()

    # The publish todo is not offered while its action is held back: it stays open, blocked by the gate.
    held = todo(url, work, gid, made["publish"])
    assert held["status"] == "open" and held["blocked_by"]["gate_id"] == made["gate"]
    code, text = cli(url, work, "todo", "list", gid)
    assert f"blocked by gate {made['gate']}" in text and "action publish is held back" in text
    code, view = cli(url, work, "status", "--goal-id", gid, "--json")
    [item] = [x for x in view["todos"]["items"] if x["id"] == made["publish"]]
    assert item["blocked_by"]["gate_id"] == made["gate"]
    code, text = cli(url, work, "status", "--goal-id", gid)
    assert f"Publish the report  (blocked by gate {made['gate']}" in text
    code, t = cli(url, work, "turn", gid, "--executor", "shell", "--json")
    assert t["decision"] == "ask_user" and t["reasons"] == ["gate_pending"], t
    assert todo(url, work, gid, made["publish"])["status"] == "open"

    # The user's channel: the decision first, with what approving does; never `close`.
    _, c = cli(url, work, "quota", "should-run", gid, "--dry-run", "--json")
    uc = c["interaction_contract"]["user_channel"]
    assert uc["next_user_actions"][0].startswith(f"loopx gate approve --goal-id {gid} --gate-id {made['gate']}")
    assert uc["next_user_actions"][1].startswith("loopx gate reject")
    assert not any("close" in a for a in uc["next_user_actions"])
    assert uc["decisions"][0]["approving"] == f"lets action publish run (`cp revenue.csv report.csv`) for todo {made['publish']}"

    # Approved: the next turn runs that step, and only then is the todo done.
    assert cli(url, work, "gate", "approve", gid, "--gate-id", made["gate"])[0] == 0
    code, t = cli(url, work, "turn", gid, "--executor", "shell", "--json")
    assert code == 0 and t["outcome"] == "ok" and t["reasons"] == ["ready_work"], json.dumps(t, indent=1)
    assert (ws / "report.csv").read_text() == "month,revenue\n2026-01,100\n"
    assert todo(url, work, gid, made["publish"])["status"] == "done"


@pytest.mark.slow
def test_an_agent_cannot_close_a_todo_whose_action_was_held_back(sqlite_url, tmp_path):
    url, work = sqlite_url, workdir(tmp_path)
    made = goal_with_a_publish_gate(url, work)
    gid = made["goal"]
    # A run for the count todo; the agent also tries to mark the publish todo done under it.
    _, c = cli(url, work, "quota", "should-run", gid, "--json", actor="executor")
    run_id = c["interaction_contract"]["run_id"]
    steps = [s["id"] for s in c["interaction_contract"]["cli_channel"]["steps"]]
    assert steps == ["claim", "action:count", "done", "finish"]  # only the claimed todo's own action
    code, err = cli(url, work, "todo", "done", gid, "--todo-id", made["publish"], "--run-id", run_id, "--json",
                    actor="executor")
    assert code == 2 and err["error"]["code"] == "gate_pending", err
    assert f"blocked by gate {made['gate']}" in err["error"]["message"]
    assert todo(url, work, gid, made["publish"])["status"] == "open"


def test_todo_add_refuses_an_action_the_goal_does_not_have(sqlite_url, tmp_path):
    _, g = cli(sqlite_url, tmp_path, "project-prompt", "create", "--title", "G", "--json")
    code, err = cli(sqlite_url, tmp_path, "todo", "add", g["id"], "--text", "x", "--action", "nope", "--json")
    assert code == 2 and err["error"]["code"] == "action_not_found"
    assert cli(sqlite_url, tmp_path, "todo", "list", g["id"], "--json")[1] == []


HARNESS = r'''
set -e
export LOOPX_ACTOR=executor
loopx --format json quota should-run --goal-id $GOAL_ID > contract.json
jq -r '.decision' contract.json
RUN_ID=$(jq -r '.interaction_contract.run_id // empty' contract.json)
jq -r '.interaction_contract.cli_channel.next_cli_actions[]' contract.json > steps.txt
while IFS= read -r cmd; do
  echo "Executing: $cmd"
  eval "$cmd" || {
    echo "Stopped: that step failed, so the steps after it would build on a failure."
    [ -z "$RUN_ID" ] || loopx run finish --run-id "$RUN_ID"
    break
  }
done < steps.txt
unset LOOPX_ACTOR
'''


@pytest.mark.slow
def test_the_readme_harness_loop_and_summary_all_on_a_goal_whose_gated_action_was_held_back(sqlite_url, tmp_path):
    url, work = sqlite_url, workdir(tmp_path)
    made = goal_with_a_publish_gate(url, work)
    gid = made["goal"]
    env = loopx_env(url, GOAL_ID=gid, PATH=f"{Path(PY).parent}:/usr/bin:/bin")

    def harness():
        p = subprocess.run(["bash", "-c", HARNESS], env=env, cwd=work, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return p.stdout

    out = harness()
    assert out.startswith("run\n") and "--action count" in out and "--action publish" not in out
    out = harness()  # nothing the agent may do: the publish todo waits for the gate
    assert out.startswith("ask_user\n") and "Executing" not in out
    code, text = cli(url, work, "summary-all", gid)
    assert f"Publish the report  (blocked by gate {made['gate']} (pending" in text, text
    _, summary = cli(url, work, "summary-all", gid, "--json")
    [s] = summary["goals"] if "goals" in summary else [summary]
    assert [t["id"] for t in s["todos"]["open"]] == [made["publish"]]
    assert s["todos"]["open"][0]["blocked_by"]["gate_id"] == made["gate"]
    assert s["runs"]["by_outcome"]["ok"] == 1

    assert cli(url, work, "gate", "approve", gid, "--gate-id", made["gate"])[0] == 0
    out = harness()
    assert out.startswith("run\n") and "--action publish" in out and (work / "report.csv").exists()
    _, summary = cli(url, work, "summary-all", gid, "--json")
    [s] = summary["goals"] if "goals" in summary else [summary]
    assert s["todos"]["open"] == [] and s["todos"]["by_status"]["done"] == 2
    assert s["runs"]["by_outcome"]["ok"] == 2
