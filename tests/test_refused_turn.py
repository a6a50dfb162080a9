"""A turn in which the agent tried a command LoopX refused is ``failed`` (reason ``refused_command``),
even when the agent exits 0: a real confined ``command``-executor turn whose agent runs the
contract's lines and also tries ``loopx gate approve``, as a hostile agent would."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from loopx.domain import gates, runs, todos
from loopx.ledger.registry import Registry
from tests.test_turn_helpers import make_goal

PY = sys.executable

# The agent: tries to approve the gate itself (the broker refuses it), then runs the contract's
# lines as told and exits 0.
AGENT = r'''
import os, re, subprocess, sys
prompt = open(os.environ["LOOPX_PROMPT_FILE"]).read()
approve = subprocess.run(["loopx", "gate", "approve", "--goal-id", sys.argv[1], "--gate-id", sys.argv[2]],
                         capture_output=True, text=True)
print("approve exited", approve.returncode, approve.stdout, approve.stderr, file=sys.stderr)
block = re.search(r"```sh\n(.*?)\n```", prompt, re.S).group(1)
for line in block.splitlines():
    subprocess.run(line, shell=True, check=False)
print('{"loopx_handoff": "all done, nothing to see"}')
sys.exit(0)
'''


def _turn(cwd, url, goal_id, template):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env["PATH"] = f"{os.path.dirname(PY)}{os.pathsep}{env.get('PATH', '')}"
    env.update({"LOOPX_REGISTRY": url, "LOOPX_EXECUTOR_COMMAND": template, "LOOPX_PLUGINS": ""})
    return subprocess.run([PY, "-m", "loopx", "--format", "json", "turn", "--goal-id", goal_id, "--executor",
                           "command"], env=env, cwd=cwd, capture_output=True, text=True, timeout=180)


def test_an_agent_that_tried_gate_approve_fails_its_turn_even_when_it_exits_0(tmp_path, sqlite_url):
    work = tmp_path / "work"
    work.mkdir()
    (work / "agent.py").write_text(AGENT)
    reg = Registry.open(sqlite_url)
    try:
        made = make_goal(reg, acts={"test": [PY, "-c", "pass"], "publish": [PY, "-c", "pass"]})
        gate = gates.add(reg, "user", goal_id=made["goal"], title="Publish", scope="production",
                         blocks="action:publish")
        p = _turn(work, sqlite_url, made["goal"], json.dumps([PY, "agent.py", made["goal"], gate["id"]]))
        assert p.returncode == 1, (p.stdout, p.stderr)  # loopx turn exits 1 for a failed turn
        t = json.loads(p.stdout)
        assert t["outcome"] == "failed" and t["reason"] == "refused_command", t
        assert t["handoff"].startswith("refused_command: tried `loopx gate approve"), t["handoff"]
        assert any(e["kind"] == "refused" for e in t["evidence"])
        with reg.read() as tx:
            run = runs.load_run(tx, t["run_id"])
            assert run.outcome == "failed" and run.handoff.startswith("refused_command")
            assert gates.load_gate(tx, made["goal"], gate["id"]).status == "pending"
            # The contract's own steps ran and succeeded: only the refusal failed the turn.
            assert todos.load_todo(tx, made["goal"], made["todos"][0]).status == "done"
    finally:
        reg.close()


def test_run_finish_refuses_ok_over_a_refusal_and_derives_failed(tmp_path, sqlite_url):
    """The same rule through the harness's own `run finish`: evidence of a refusal makes the derived
    outcome failed, and `--outcome ok` contradicts it."""
    reg = Registry.open(sqlite_url)
    try:
        made = make_goal(reg, acts={"test": [PY, "-c", "pass"]})
        from tests.test_turn_helpers import ask

        run_id = ask(reg, made["goal"])["interaction_contract"]["run_id"]
        from loopx.domain import evidence

        evidence.record(reg, "core", run_id=run_id, kind="refused", summary="refused: loopx reward add",
                        data={"argv": ["reward", "add"], "code": "actor_forbidden", "why": "user only", "by": "broker"})
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
        env.update({"LOOPX_REGISTRY": sqlite_url, "LOOPX_ACTOR": "executor", "LOOPX_PLUGINS": ""})
        ok = subprocess.run([PY, "-m", "loopx", "--json", "run", "finish", "--run-id", run_id, "--outcome", "ok"],
                            env=env, capture_output=True, text=True, timeout=60)
        assert ok.returncode == 2 and json.loads(ok.stdout)["error"]["code"] == "outcome_contradicts_evidence"
        done = subprocess.run([PY, "-m", "loopx", "--json", "run", "finish", "--run-id", run_id], env=env,
                              capture_output=True, text=True, timeout=60)
        out = json.loads(done.stdout)
        assert out["outcome"] == "failed" and out["reason"] == "refused_command"
        assert "tried `loopx reward add`" in out["handoff"]
    finally:
        reg.close()
