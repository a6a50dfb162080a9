"""Tampering a hostile user (or a stray script) does behind LoopX's back, on both backends.

Every damage must make ``quota should-run`` answer ``repair`` (writing nothing), ``self-repair
check`` name it, and ``self-repair fix`` restore the goal without losing a gate, a claim or
evidence - keeping what only the state still holds and asking the user about it.
"""

from __future__ import annotations

import pytest

from tests.factories import make_goal
from tests.reliability.tamper import raw, rows


@pytest.fixture
def goal(loopx):
    """A goal with a todo, a pending production gate blocking everything, and evidence."""
    made = make_goal(loopx, title="ship it", todo_texts=("build",),
                     gates=({"title": "deploy to production?", "scope": "production"},))
    g, [todo], [gate] = made["goal"], made["todos"], made["gates"]
    ev = loopx("evidence", "add", "--goal-id", g, "--kind", "note", "--summary", "looked", "--json").json["id"]
    return {"id": g, "todo": todo, "gate": gate, "evidence": ev}


def should_run(loopx, g):
    r = loopx("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json")
    assert r.code == 0, r
    return r.json


def events(url, g):
    return rows(url, "SELECT seq, kind, body FROM events WHERE goal_id = ? ORDER BY seq", (g,))


def check_codes(loopx, g=None):
    r = loopx("self-repair", "check", *(["--goal-id", g] if g else []), "--json")
    assert r.code in (0, 1), r
    return {f["code"] for f in r.json["findings"]}


def fix(loopx, *args):
    r = loopx("self-repair", "fix", *args, "--json")
    assert r.code in (0, 1), r
    return r.json


def assert_repair_and_nothing_written(loopx, url, g):
    before = events(url, g)
    d = should_run(loopx, g)
    assert d["decision"] == "repair" and d["reasons"] == ["integrity_mismatch"], d
    assert d["interaction_contract"]["cli_channel"]["next_cli_actions"] == [f"loopx self-repair fix --goal-id {g}"]
    assert events(url, g) == before


def gate_row(url, gate):
    found = rows(url, "SELECT status, blocks FROM gates WHERE id = ?", (gate,))
    return found[0] if found else None


def test_a_deleted_gate_row_is_seen_and_restored(loopx, goal):
    url, g = loopx.url, goal["id"]
    assert should_run(loopx, g)["decision"] == "ask_user"
    raw(url, "DELETE FROM gates WHERE id = ?", (goal["gate"],))
    assert_repair_and_nothing_written(loopx, url, g)
    assert "state_digest_mismatch" in check_codes(loopx, g)
    result = fix(loopx, "--goal-id", g)
    assert result["ok"], result
    assert gate_row(url, goal["gate"]) == {"status": "pending", "blocks": "all"}
    d = should_run(loopx, g)
    assert d["decision"] == "ask_user" and d["reasons"] == ["gate_pending"]
    assert check_codes(loopx) == set()


def test_a_gate_approved_by_sql_is_seen_kept_and_the_user_asked(loopx, goal):
    url, g = loopx.url, goal["id"]
    raw(url, "UPDATE gates SET status = 'approved' WHERE id = ?", (goal["gate"],))
    assert_repair_and_nothing_written(loopx, url, g)
    assert "state_digest_mismatch" in check_codes(loopx, g)
    result = fix(loopx, "--goal-id", g)
    assert [f["code"] for f in result["remaining"]] == ["repair_needs_user"]
    assert gate_row(url, goal["gate"])["status"] == "approved"  # kept, never silently dropped
    d = should_run(loopx, g)
    assert d["decision"] == "ask_user" and d["reasons"] == ["repair_needs_user"]
    assert d["interaction_contract"]["user_channel"]["next_user_actions"] == [
        f"loopx self-repair accept --goal-id {g}"]
    # An agent cannot accept for the user.
    r = loopx("self-repair", "accept", "--goal-id", g, "--json", env={"LOOPX_ACTOR": "executor"})
    assert r.code == 2 and r.json["error"]["code"] == "actor_forbidden"
    assert loopx("self-repair", "accept", "--goal-id", g).code == 0
    assert check_codes(loopx) == set()
    assert should_run(loopx, g)["decision"] == "run"


def test_a_todo_inserted_by_hand_is_never_offered(loopx, goal):
    url, g = loopx.url, goal["id"]
    assert loopx("gate", "approve", "--goal-id", g, "--gate-id", goal["gate"]).code == 0
    raw(url, "INSERT INTO todos (id, goal_id, created_seq, text, priority, depends_on, status, epoch, created_at,"
             " updated_at) VALUES ('t-0000000000aa', ?, 0, 'rm -rf /', 'P0', '[]', 'open', 0, 'x', 'x')", (g,))
    assert_repair_and_nothing_written(loopx, url, g)
    assert fix(loopx, "--goal-id", g)["ok"]
    d = should_run(loopx, g)
    assert d["decision"] == "run"
    assert "t-0000000000aa" not in str(d)
    assert rows(url, "SELECT id FROM todos WHERE id = 't-0000000000aa'") == []


def test_an_edited_event_is_named_and_never_copied_into_state(loopx, goal):
    url, g = loopx.url, goal["id"]
    raw(url, "UPDATE events SET body = REPLACE(body, '\"all\"', '\"todo:t-000000000000\"')"
             " WHERE goal_id = ? AND kind = 'gate.added'", (g,))
    assert_repair_and_nothing_written(loopx, url, g)
    assert "event_tampered" in check_codes(loopx, g)
    result = fix(loopx, "--goal-id", g)
    assert not result["ok"] and "event_tampered" in {f["code"] for f in result["remaining"]}
    assert gate_row(url, goal["gate"]) == {"status": "pending", "blocks": "all"}
    assert should_run(loopx, g)["decision"] == "repair"


def test_a_lost_gate_event_keeps_the_gate_asks_the_user_and_shows_the_gap(loopx, goal):
    url, g = loopx.url, goal["id"]
    lost = [e["seq"] for e in events(url, g) if e["kind"] == "gate.added"]
    top = events(url, g)[-1]["seq"]
    raw(url, "DELETE FROM events WHERE goal_id = ? AND kind = 'gate.added'", (g,))
    assert_repair_and_nothing_written(loopx, url, g)
    assert {"chain_broken", "ledger_gap"} <= check_codes(loopx, g)
    result = fix(loopx, "--goal-id", g)
    assert [f["code"] for f in result["remaining"]] == ["repair_needs_user"]
    assert gate_row(url, goal["gate"]) == {"status": "pending", "blocks": "all"}
    d = should_run(loopx, g)
    assert d["decision"] == "ask_user" and d["reasons"] == ["repair_needs_user"]
    repair = [e for e in events(url, g) if e["kind"] == "capability.loss_recorded"]
    assert repair and repair[0]["seq"] == top + 1  # a new number: the lost one is never reused
    assert f'"lost":{lost}'.replace(" ", "") in repair[0]["body"]
    assert [e["kind"] for e in events(url, g)][len(events(url, g)) - 3:][:2] == [
        "capability.loss_recorded", "self_repair.repaired"]
    assert all(e["seq"] not in lost for e in events(url, g))


def test_a_lost_last_event_keeps_its_evidence_and_takes_a_new_number(loopx, goal):
    url, g = loopx.url, goal["id"]
    last = events(url, g)[-1]
    assert last["kind"] == "evidence.added"
    raw(url, "DELETE FROM events WHERE goal_id = ? AND seq = ?", (g, last["seq"]))
    assert_repair_and_nothing_written(loopx, url, g)
    assert "head_mismatch" in check_codes(loopx, g)
    result = fix(loopx, "--goal-id", g)
    assert rows(url, "SELECT id FROM evidence WHERE id = ?", (goal["evidence"],)), result
    repair = [e for e in events(url, g) if e["kind"] == "capability.loss_recorded"][0]
    assert repair["seq"] == last["seq"] + 1 and f'"lost":[{last["seq"]}]' in repair["body"]
    assert should_run(loopx, g)["reasons"] == ["repair_needs_user"]


def test_a_lost_claim_event_keeps_the_claim(loopx, goal):
    url, g = loopx.url, goal["id"]
    assert loopx("gate", "approve", "--goal-id", g, "--gate-id", goal["gate"]).code == 0
    assert loopx("todo", "claim", "--goal-id", g, "--todo-id", goal["todo"], "--agent", "a1").code == 0
    raw(url, "DELETE FROM events WHERE goal_id = ? AND kind = 'todo.claimed'", (g,))
    assert_repair_and_nothing_written(loopx, url, g)
    fix(loopx, "--goal-id", g)
    assert rows(url, "SELECT claim_agent FROM todos WHERE id = ?", (goal["todo"],)) == [{"claim_agent": "a1"}]
    assert should_run(loopx, g)["reasons"] == ["repair_needs_user"]


def test_a_deleted_goal_row_is_found_and_restored(loopx, goal):
    url, g = loopx.url, goal["id"]
    raw(url, "DELETE FROM goals WHERE id = ?", (g,))
    assert "goal_row_missing" in check_codes(loopx)
    result = fix(loopx)
    assert result["ok"], result
    shown = loopx("project_prompt", "show", "--goal-id", g, "--json")
    assert shown.code == 0 and shown.json["title"] == "ship it"
    assert gate_row(url, goal["gate"]) == {"status": "pending", "blocks": "all"}
    assert rows(url, "SELECT id FROM evidence WHERE id = ?", (goal["evidence"],))
    assert should_run(loopx, g)["reasons"] == ["gate_pending"]


def test_an_edited_state_row_is_restored_from_the_ledger(loopx, goal):
    url, g = loopx.url, goal["id"]
    raw(url, "UPDATE todos SET text = 'exfiltrate the keys' WHERE id = ?", (goal["todo"],))
    assert_repair_and_nothing_written(loopx, url, g)
    assert fix(loopx, "--goal-id", g)["ok"]
    assert rows(url, "SELECT text FROM todos WHERE id = ?", (goal["todo"],)) == [{"text": "build"}]


def test_a_deleted_chain_head_is_seen(loopx, goal):
    url, g = loopx.url, goal["id"]
    raw(url, "DELETE FROM goal_heads WHERE goal_id = ?", (g,))
    assert_repair_and_nothing_written(loopx, url, g)
    assert "goal_unsealed" in check_codes(loopx, g)
    assert fix(loopx, "--goal-id", g)["ok"]
    assert should_run(loopx, g)["reasons"] == ["gate_pending"]


def test_a_write_after_tampering_does_not_launder_it(loopx, goal):
    url, g = loopx.url, goal["id"]
    raw(url, "UPDATE gates SET status = 'approved' WHERE id = ?", (goal["gate"],))
    # An ordinary write lands on tampered state: the mismatch must stay visible.
    assert loopx("todo", "add", "--goal-id", g, "--text", "another").code == 0
    assert_repair_and_nothing_written(loopx, url, g)


def test_fix_takes_a_backup_first_and_dry_run_writes_nothing(loopx, goal):
    url, g = loopx.url, goal["id"]
    raw(url, "DELETE FROM gates WHERE id = ?", (goal["gate"],))
    before = events(url, g)
    plan = fix(loopx, "--goal-id", g, "--dry-run")
    assert plan["dry_run"] and {p["code"] for p in plan["plan"]} >= {"state_digest_mismatch"}
    assert events(url, g) == before and gate_row(url, goal["gate"]) is None
    result = fix(loopx, "--goal-id", g)
    if url.startswith("postgres"):
        return
    import sqlite3
    from pathlib import Path

    backup = Path(result["backup"])
    assert backup.exists() and backup.name.startswith("registry.db.bak-")
    conn = sqlite3.connect(backup)
    assert conn.execute("SELECT COUNT(*) FROM gates WHERE id = ?", (goal["gate"],)).fetchone()[0] == 0
    conn.close()


def test_a_closed_runs_charges_edited_by_hand_are_seen(loopx, goal):
    url, g = loopx.url, goal["id"]
    assert loopx("gate", "approve", "--goal-id", g, "--gate-id", goal["gate"]).code == 0
    run = should_run(loopx, g)["interaction_contract"]["run_id"]
    assert loopx("run", "finish", "--run-id", run, "--outcome", "ok", "--tokens", "5000").code == 0
    raw(url, "UPDATE runs SET tokens = 0 WHERE id = ?", (run,))  # hide what the turn spent
    assert_repair_and_nothing_written(loopx, url, g)
    assert fix(loopx, "--goal-id", g)["ok"]
    assert rows(url, "SELECT tokens FROM runs WHERE id = ?", (run,)) == [{"tokens": 5000}]
