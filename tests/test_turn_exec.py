"""``loopx exec`` and ``evidence add``: only what the contract allows runs, everything that ran
is recorded, and a stale contract stops doing but never stops recording."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from loopx.domain import actions, runs
from loopx.views import quota
from loopx.domain import goals as project_prompt
from loopx.values.errors import LoopxError
from tests.test_turn_helpers import PY, add_gate, ask, make_goal

ENV_PRINT = [PY, "-c", "import os; print(os.environ['LOOPX_ACTOR'], os.environ['LOOPX_RUN_ID'], "
             "os.environ['LOOPX_GOAL_ID'])"]


def _run(loopx, acts, **kw):
    """A goal with ``acts`` made through the CLI, and an open run for agent ``me``; -> (goal, run)."""
    g = loopx("project_prompt", "create", "--title", "Exec", "--json").json["id"]
    loopx("todo", "add", "--goal-id", g, "--text", "step")
    for name, argv in acts.items():
        assert loopx("action", "add", "--goal-id", g, "--name", name, "--", *argv).code == 0
    out = loopx("quota", "should-run", "--goal-id", g, "--agent", "me", "--json").json
    assert out["decision"] == "run", out
    return g, out["interaction_contract"]["run_id"]


def test_exec_runs_an_allowed_action_as_the_executor_and_records_it(loopx):
    g, r = _run(loopx, {"env": ENV_PRINT})
    res = loopx("exec", "--run-id", r, "--action", "env", "--json")
    assert res.code == 0, res
    ev = res.json
    d = ev["data"]
    expected = f"executor {r} {g}\n"
    assert d["output_tail"] == expected and d["exit_code"] == 0 and d["timed_out"] is False
    assert d["output_sha256"] == "sha256:" + hashlib.sha256(expected.encode()).hexdigest()
    assert d["output_bytes"] == len(expected) and d["duration_seconds"] >= 0
    assert (ev["kind"], ev["run_id"], ev["goal_id"], d["action"]) == ("command", r, g, "env")
    listed = loopx("evidence", "list", "--run-id", r, "--json").json
    # Its start was recorded (the step's claim, loopx.domain.claims) before it ran, then its result.
    assert [e["kind"] for e in listed] == ["step_started", "command"] and listed[1]["id"] == ev["id"]


def test_an_exact_command_runs_only_if_it_is_an_allowed_action(loopx, tmp_path):
    marker = tmp_path / "ran"
    touch = [PY, "-c", f"open({str(marker)!r}, 'w').write('x')"]
    g, r = _run(loopx, {"ok": [PY, "-c", "print('fine')"]})
    assert loopx("exec", "--run-id", r, "--", PY, "-c", "print('fine')").code == 0
    refused = loopx("--json", "exec", "--run-id", r, "--", *touch)
    assert refused.code == 2 and refused.json["error"]["code"] == "action_not_allowed"
    unknown = loopx("--json", "exec", "--run-id", r, "--action", "nope")
    assert unknown.json["error"]["code"] == "action_not_allowed"
    assert not marker.exists()  # nothing ran
    assert [e["kind"] for e in loopx("evidence", "list", "--run-id", r, "--json").json] == ["step_started", "command"]


def test_a_gated_action_is_not_allowed(loopx, tmp_path):
    marker = tmp_path / "deployed"
    g = loopx("project_prompt", "create", "--title", "Gated", "--json").json["id"]
    loopx("todo", "add", "--goal-id", g, "--text", "step")
    loopx("action", "add", "--goal-id", g, "--name", "deploy", "--", PY, "-c", f"open({str(marker)!r}, 'w')")
    loopx("gate", "add", "--goal-id", g, "--title", "Deploy", "--scope", "production", "--blocks", "action:deploy")
    r = loopx("quota", "should-run", "--goal-id", g, "--json").json["interaction_contract"]["run_id"]
    res = loopx("--json", "exec", "--run-id", r, "--action", "deploy")
    assert res.json["error"]["code"] == "action_not_allowed" and not marker.exists()


@pytest.mark.parametrize("change", ["gate", "pause", "limits", "action"])
def test_a_stale_contract_refuses_doing_but_never_recording(reg, tmp_path, change):
    marker = tmp_path / "ran"
    ids = make_goal(reg, acts={"touch": [PY, "-c", f"open({str(marker)!r}, 'a').write('x')"]})
    g = ids["goal"]
    r = ask(reg, g)["interaction_contract"]["run_id"]
    if change == "gate":
        add_gate(reg, g)
    elif change == "pause":
        project_prompt.transition(reg, "user", "pause", g)
    elif change == "limits":
        quota.set_limits(reg, "user", goal_id=g, values={"max_turns": 10})
    else:
        actions.add(reg, "user", goal_id=g, name="touch", argv=[PY, "-c", "print('changed')"])
    with pytest.raises(LoopxError) as err:
        actions.execute(reg, "executor", run_id=r, action="touch")
    assert err.value.code == "contract_stale"
    assert not marker.exists()
    from loopx.domain import evidence, todos

    with pytest.raises(LoopxError) as err:
        todos.claim(reg, "executor", goal_id=g, todo_id=ids["todos"][0], run_id=r)
    assert err.value.code == "contract_stale"
    note = evidence.record(reg, "executor", run_id=r, kind="note", summary="stopped: the contract changed")
    assert note["run_id"] == r
    assert runs.finish(reg, "executor", run_id=r, outcome="partial")["status"] == "finished"


def test_asking_again_after_a_change_renews_the_contract_of_the_same_run(reg):
    g = make_goal(reg, limits={"max_turns": 3}, acts={"t": [PY, "-c", "pass"]})["goal"]
    c1 = ask(reg, g)["interaction_contract"]
    quota.set_limits(reg, "user", goal_id=g, values={"max_turns": 4})
    c2 = ask(reg, g)["interaction_contract"]
    assert c2["run_id"] == c1["run_id"] and c2["fingerprint"] != c1["fingerprint"]
    assert c2["expires_at"] == c1["expires_at"]
    assert quota.show(reg, g)["used"]["turns"] == 1  # no new turn for a renewal
    ev = actions.execute(reg, "executor", run_id=c1["run_id"], action="t")
    assert ev["data"]["exit_code"] == 0


def test_exec_timeout_kills_the_command_and_records_it(loopx):
    g, r = _run(loopx, {"slow": [PY, "-c", "import time; print('start', flush=True); time.sleep(60)"]})
    started = time.monotonic()
    res = loopx("exec", "--run-id", r, "--action", "slow", "--timeout", "1", "--json")
    assert time.monotonic() - started < 30
    assert res.code == 1
    d = res.json["data"]
    assert d["timed_out"] is True and d["exit_code"] != 0 and d["output_tail"] == "start\n"
    assert "timed out" in res.json["summary"]


def test_failing_and_loud_commands_keep_a_bounded_tail_and_hash_everything(loopx):
    script = "import sys; sys.stdout.write('x' * 100000 + 'END'); sys.stdout.flush(); sys.stderr.write('bye'); sys.exit(3)"
    g, r = _run(loopx, {"loud": [PY, "-c", script]})
    res = loopx("exec", "--run-id", r, "--action", "loud", "--json")
    assert res.code == 1
    d = res.json["data"]
    whole = ("x" * 100000 + "ENDbye").encode()
    assert d["exit_code"] == 3 and d["output_bytes"] == len(whole)
    assert d["output_sha256"] == "sha256:" + hashlib.sha256(whole).hexdigest()
    assert len(d["output_tail"].encode()) <= 4096 and d["output_tail"].endswith("ENDbye")


def test_a_missing_program_is_recorded_not_crashed(loopx):
    g, r = _run(loopx, {"ghost": ["/nonexistent/loopx-ghost-program"]})
    res = loopx("exec", "--run-id", r, "--action", "ghost", "--json")
    assert res.code == 1 and res.json["data"]["exit_code"] == 127


def test_evidence_add_with_data_and_file(loopx, tmp_path):
    g, r = _run(loopx, {})
    f = tmp_path / "report.txt"
    f.write_bytes(b"forecast: 42\n")
    res = loopx("evidence", "add", "--run-id", r, "--kind", "file", "--summary", "the report",
                "--data", json.dumps({"rows": 3}), "--file", str(f), "--json", env={"LOOPX_ACTOR": "executor"})
    assert res.code == 0, res
    ev = res.json
    assert ev["data"] == {"rows": 3} and ev["file_path"] == str(f)
    assert ev["file_sha256"] == "sha256:" + hashlib.sha256(b"forecast: 42\n").hexdigest()
    assert ev["actor"] == "executor"
    for bad in (["--data", "{nope"], ["--data", "NaN"], ["--data", "3"], ["--file", str(tmp_path / "missing")]):
        r2 = loopx("evidence", "add", "--run-id", r, "--kind", "note", "--summary", "s", *bad, "--json")
        assert r2.json["error"]["code"] == "invalid_argument", bad
    # An executor records only inside a run; nobody records on a finished run.
    r3 = loopx("evidence", "add", "--goal-id", g, "--kind", "note", "--summary", "s", "--json",
               env={"LOOPX_ACTOR": "executor"})
    assert r3.json["error"]["code"] == "run_not_open"
    assert loopx("evidence", "add", "--goal-id", g, "--kind", "note", "--summary", "a user's note").code == 0
    loopx("run", "finish", "--run-id", r, "--outcome", "ok")
    r4 = loopx("evidence", "add", "--run-id", r, "--kind", "note", "--summary", "late", "--json")
    assert r4.json["error"]["code"] == "run_not_open"


def test_run_id_comes_from_the_environment_of_exec_children(loopx):
    g, r = _run(loopx, {})
    res = loopx("evidence", "add", "--kind", "note", "--summary", "from a child", "--json",
                env={"LOOPX_ACTOR": "executor", "LOOPX_RUN_ID": r})
    assert res.code == 0 and res.json["run_id"] == r


def test_action_list_and_remove(loopx):
    g = loopx("project_prompt", "create", "--title", "Acts", "--json").json["id"]
    loopx("action", "add", "--goal-id", g, "--name", "test", "--", "pytest", "-q", "tests/unit")
    loopx("gate", "add", "--goal-id", g, "--title", "t", "--blocks", "action:test")
    listed = loopx("action", "list", "--goal-id", g, "--json").json
    assert listed[0]["argv"] == ["pytest", "-q", "tests/unit"] and listed[0]["held_by"]["status"] == "pending"
    assert "pytest -q tests/unit" in loopx("action", "list", "--goal-id", g).out
    assert loopx("action", "remove", "--goal-id", g, "--name", "test").code == 0
    assert loopx("action", "list", "--goal-id", g, "--json").json == []
    gone = loopx("--json", "action", "remove", "--goal-id", g, "--name", "test")
    assert gone.json["error"]["code"] == "action_not_found"
    bad = loopx("--json", "action", "add", "--goal-id", g, "--name", "Bad Name", "--", "true")
    assert bad.json["error"]["code"] == "invalid_argument"


def test_a_listed_loopx_step_the_user_alone_may_run_is_refused_and_recorded(loopx):
    """A step that is itself a `loopx` command is served by the step's broker without a process of
    its own (`Broker.run_step`): listed by mistake, a user-only command is still refused there."""
    g = loopx("project_prompt", "create", "--title", "Exec", "--json").json["id"]
    assert loopx("action", "add", "--goal-id", g, "--name", "publish", "--", "echo", "pub").code == 0
    gate = loopx("gate", "add", g, "--title", "Ship", "--scope", "production", "--blocks", "action:publish",
                 "--json").json["id"]
    assert loopx("action", "add", "--goal-id", g, "--name", "sneak", "--", "loopx", "gate", "approve", "--goal-id", g,
                 "--gate-id", gate).code == 0
    loopx("todo", "add", "--goal-id", g, "--text", "step")
    r = loopx("quota", "should-run", "--goal-id", g, "--agent", "me", "--json").json["interaction_contract"]["run_id"]
    res = loopx("exec", "--run-id", r, "--action", "sneak", "--json")
    assert res.code == 1 and res.json["data"]["exit_code"] == 2, res
    assert "actor_forbidden" in res.json["data"]["output_tail"], res.json["data"]
    assert [x["status"] for x in loopx("gate", "list", g, "--json").json] == ["pending"]
    kinds = [e["kind"] for e in loopx("evidence", "list", "--goal-id", g, "--json").json]
    assert "refused" in kinds and "command" in kinds, kinds
