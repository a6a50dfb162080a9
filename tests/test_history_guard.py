"""Every edit or deletion of a stored event is seen by the next should-run (issue 39).

should-run re-hashes only a goal's newest events (its cost stays flat in history), so an event
further back edited or deleted by hand used to be seen by ``self-repair check`` alone. Here the
attacker edits the registry as a user with ``sqlite3`` / ``psql`` would (a connection of their own,
the real ``sqlite3`` shell where it is installed, a script that imports LoopX but has no key), then
a real ``loopx quota should-run`` process decides (loopx/ledger/history_guard.py).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.factories import make_goal
from tests.reliability.tamper import raw, rows
from tests.test_keyed_integrity import attacker, check_codes, decide, in_process, ok, proc  # noqa: F401 - fixture

pytestmark = pytest.mark.slow  # real should-run processes on long histories, seconds each: not in the quick tier

#: Enough events that the one edited is far outside the newest few should-run re-hashes.
TODOS = tuple(f"step {i}" for i in range(12))
MIDDLE = 4


def _goal(proc) -> str:
    """A goal with a long history, made in this process by the same commands (its set-up: the
    decisions that must see the tampering are real processes)."""
    return make_goal(in_process(proc.url), title="long history", todo_texts=TODOS)["goal"]


def _sql(url: str, script: str) -> None:
    """Run ``script`` (one or more statements) as someone at the database's own shell: the real
    ``sqlite3`` program when it is installed, else a connection of their own (psql's part here)."""
    if not url.startswith("postgres") and shutil.which("sqlite3"):
        p = subprocess.run(["sqlite3", url], input=script, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and not p.stderr, p.stderr
        return
    for statement in filter(None, (s.strip() for s in script.split(";\n"))):
        raw(url, statement)


def _edit_body(url: str, g: str) -> str:
    if url.startswith("postgres"):
        return (f"UPDATE events SET body = jsonb_set(CAST(body AS jsonb), '{{text}}', '\"rm -rf /\"')::text"
                f" WHERE goal_id = '{g}' AND seq = {MIDDLE}")
    return f"UPDATE events SET body = json_set(body, '$.text', 'rm -rf /') WHERE goal_id = '{g}' AND seq = {MIDDLE}"


#: What the decision's message says for each finding (loopx.ledger.integrity's problems).
SAYS = {"history_changed": "of its stored events were edited or deleted outside LoopX",
        "schema_altered": "the registry's triggers or event tables were changed outside LoopX"}


def _repair(proc, g: str, finding: str) -> dict:
    """should-run answers repair, and its message names the goal and what was found."""
    d = decide(proc, g)
    assert d["decision"] == "repair" and d["reasons"] == ["integrity_mismatch"], d
    said = d["interaction_contract"]["agent_channel"]["primary_action"]
    assert f"goal {g}: " in said and SAYS[finding] in said, said
    return d


def test_an_event_body_edited_far_back_is_seen_by_the_next_should_run(proc):
    g = _goal(proc)
    assert decide(proc, g)["decision"] == "run"
    _sql(proc.url, _edit_body(proc.url, g) + ";\n")
    assert "rm -rf /" in rows(proc.url, "SELECT body FROM events WHERE goal_id = ? AND seq = ?", (g, MIDDLE))[0]["body"]
    _repair(proc, g, "history_changed")
    # and it stays so: a write on the goal meanwhile seals it untrusted rather than blessing it
    code, out, err = proc("todo", "add", "--goal-id", g, "--text", "one more")
    assert code == 0, (out, err)
    assert decide(proc, g)["decision"] == "repair"


def test_a_middle_event_deleted_is_seen_and_a_self_repair_does_not_leave_the_goal_stuck(proc):
    g = _goal(proc)
    _sql(proc.url, f"DELETE FROM events WHERE goal_id = '{g}' AND seq = {MIDDLE};\n")
    _repair(proc, g, "history_changed")
    assert {"history_changed", "chain_broken"} <= check_codes(proc)
    code, out, err = proc("self-repair", "fix", "--goal-id", g)
    assert code == 0, (out, err)
    assert "history_changed" in {r["code"] for r in out["repaired"]}
    d = decide(proc, g)
    assert d["decision"] == "run" and d["reasons"] == ["ready_work"], d
    assert check_codes(proc) == set()


def test_an_event_re_hashed_with_loopxs_own_code_but_no_key_is_seen(proc, tmp_path):
    """The editor imports LoopX and recomputes the edited event's hash the way LoopX does - without
    the key, which is not theirs to read."""
    g = _goal(proc)
    out = attacker(proc.url, tmp_path, f"""
        from loopx.ledger import integrity
        from tests.reliability.tamper import raw, rows
        url, g = {proc.url!r}, {g!r}
        row = rows(url, "SELECT * FROM events WHERE goal_id = ? AND seq = ?", (g, {MIDDLE}))[0]
        row["body"] = row["body"].replace("step", "wipe the disk, then step")
        raw(url, "UPDATE events SET body = ?, hash = ? WHERE id = ?", (row["body"], integrity.row_hash(row), row["id"]))
        print("edited")
    """)
    assert out == "edited"
    _repair(proc, g, "history_changed")


def _drop_counting(url: str) -> str:
    if url.startswith("postgres"):
        return "DROP TRIGGER events_changed ON events;\n"
    return "DROP TRIGGER events_changed_update;\nDROP TRIGGER events_changed_delete;\n"


def test_the_counting_trigger_dropped_then_an_event_edited_is_seen(proc):
    g = _goal(proc)
    _sql(proc.url, _drop_counting(proc.url) + _edit_body(proc.url, g) + ";\n")
    assert rows(proc.url, "SELECT n FROM event_changes WHERE goal_id = ?", (g,)) == []  # nothing counted it
    _repair(proc, g, "schema_altered")
    # The repair puts LoopX's triggers back; the goal whose event was edited meanwhile stays in
    # repair (an edited event's original is gone: a person restores a backup).
    code, out, err = proc("self-repair", "fix")
    assert code in (0, 1), (out, err)
    assert "schema_altered" in {r["code"] for r in out["repaired"]}
    assert "event_tampered" in {r["code"] for r in out["remaining"]}
    assert decide(proc, g)["decision"] == "repair"
    other = _goal(proc)  # the triggers count again
    _sql(proc.url, _edit_body(proc.url, other).replace(f"'{g}'", f"'{other}'") + ";\n")
    _repair(proc, other, "history_changed")


def test_a_trigger_altered_or_added_is_seen_and_a_trigger_dropped_alone_is_repaired(proc):
    g = _goal(proc)
    if proc.url.startswith("postgres"):
        _sql(proc.url, "ALTER TABLE events DISABLE TRIGGER events_changed;\n"
                       "ALTER TABLE events ENABLE TRIGGER events_changed;\n")
    else:
        _sql(proc.url, "CREATE TRIGGER quiet AFTER INSERT ON events BEGIN SELECT 1; END;\n")
    _repair(proc, g, "schema_altered")
    code, out, err = proc("self-repair", "fix")
    assert code == 0, (out, err)
    d = decide(proc, g)
    assert d["decision"] == "run", d


@pytest.mark.parametrize("attempt", ["lower", "delete", "replace"])
def test_the_count_cannot_be_put_back(proc, attempt):
    g = _goal(proc)
    _sql(proc.url, _edit_body(proc.url, g) + ";\n")
    sql = {"lower": f"UPDATE event_changes SET n = 0 WHERE goal_id = '{g}'",
           "delete": f"DELETE FROM event_changes WHERE goal_id = '{g}'",
           "replace": (f"INSERT OR REPLACE INTO event_changes (goal_id, n) VALUES ('{g}', 1)"
                       if not proc.url.startswith("postgres") else "TRUNCATE event_changes")}[attempt]
    with pytest.raises(Exception, match="counts up|never deleted|never truncated"):
        raw(proc.url, sql)
    raw(proc.url, "DELETE FROM state_dirty")  # the change log is bookkeeping: emptying it hides nothing
    _repair(proc, g, "history_changed")


def test_loopxs_own_repairs_that_rewrite_events_do_not_trip_it(proc):
    """A key change re-chains every event (an UPDATE of each row): the seal records the new count."""
    g = _goal(proc)
    ok(proc("registry", "rekey"))
    assert rows(proc.url, "SELECT n FROM event_changes WHERE goal_id = ?", (g,))[0]["n"] >= len(TODOS)
    d = decide(proc, g)
    assert d["decision"] == "run", d
    assert check_codes(proc) == set()
