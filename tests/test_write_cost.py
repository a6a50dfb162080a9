"""What one write costs (issue 25): the writes of a turn read no row twice that the writer already
holds, and what is remembered to save work (an encoder, a digest this process sealed) gives the
same answer as the work it saves - a digest edited behind LoopX's back is still caught."""

from __future__ import annotations

import json
import random

from loopx import evidence, integrity, jsonsafe, todos
from loopx.store.sqlite import SqliteTx
from tests.test_turn_helpers import ask, make_goal


def _counting(monkeypatch) -> list[str]:
    from loopx.store import postgres

    seen: list[str] = []
    for cls in (SqliteTx, postgres.PostgresTx):
        for name in ("execute", "executemany", "query", "one", "tuples"):
            original = getattr(cls, name, None)
            if original is None:
                continue

            def wrapper(self, sql, *args, _original=original):
                seen.append(" ".join(sql.split()))
                return _original(self, sql, *args)

            monkeypatch.setattr(cls, name, wrapper)
    return seen


def test_claim_and_done_under_a_run_read_the_goal_row_once(reg, monkeypatch):
    g = make_goal(reg, todo_texts=("a", "b"))["goal"]
    c = ask(reg, g, agent="worker")["interaction_contract"]
    todo = c["agent_channel"]["ready_todos"][0]["id"]
    seen = _counting(monkeypatch)
    claimed = todos.claim(reg, "executor", goal_id=g, todo_id=todo, agent="worker", run_id=c["run_id"])
    assert claimed["claim"]["agent"] == "worker"
    goal_reads = [s for s in seen if s.startswith("SELECT") and " FROM goals " in f"{s} " and "g.revision" not in s]
    # The writer's lock reads the goal's row; checking the run's contract is fresh reuses it.
    assert len(goal_reads) == 1, goal_reads
    seen.clear()
    done = todos.settle(reg, "executor", "done", goal_id=g, todo_id=todo, run_id=c["run_id"], agent="worker")
    assert done["status"] == "done"
    goal_reads = [s for s in seen if s.startswith("SELECT") and " FROM goals " in f"{s} "]
    assert len(goal_reads) == 1, goal_reads


def _digest_edited(reg, g, change) -> list[str]:
    with reg.read() as tx:
        recorded = tx.one("SELECT state_digest FROM goal_heads WHERE goal_id = ?", (g,))["state_digest"]
    reg.store.write(lambda tx: tx.execute("UPDATE goal_heads SET state_digest = ? WHERE goal_id = ?",
                                          (change(recorded), g)))
    with reg.read() as tx:
        return [p.code for p in integrity.verify_head(tx, g)]


def test_a_digest_this_process_sealed_then_edited_is_caught(reg):
    g = make_goal(reg, todo_texts=("a",))["goal"]
    evidence.record(reg, "user", goal_id=g, kind="note", summary="sealed here")
    with reg.read() as tx:
        assert integrity.verify_head(tx, g) == []

    def fewer_rows(text):  # the counts changed, the tag left as it was
        fmt, total, counts, tag = text.split(" ")
        counts = json.loads(counts)
        counts["todos"] = counts.get("todos", 0) + 1
        return " ".join((fmt, total, json.dumps(counts, sort_keys=True, separators=(",", ":")), tag))

    assert "state_digest_mismatch" in _digest_edited(reg, g, fewer_rows)
    evidence.record(reg, "user", goal_id=g, kind="note", summary="again")  # sealed untrusted: still found
    with reg.read() as tx:
        assert "state_digest_mismatch" in [p.code for p in integrity.verify_head(tx, g)]


def _value(rng, depth=0):
    pick = rng.random()
    if depth > 4 or pick < 0.35:
        return rng.choice([None, True, False, 0, -7, 2**63 - 1, 2**70, 1.5, -0.0, 1e300, 1 / 3, "", "é\"\\\n☃😀",
                           "x" * rng.randrange(40)])
    if pick < 0.65:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {rng.choice(["a", "b", "Z", "é", "☃", "", f"k{rng.randrange(30)}"]): _value(rng, depth + 1)
            for _ in range(rng.randrange(6))}


def test_the_reused_encoders_write_exactly_what_json_dumps_writes():
    rng = random.Random(25)
    for _ in range(3000):
        v = _value(rng)
        assert jsonsafe.canonical(v) == json.dumps(v, sort_keys=True, separators=(",", ":"))
        assert jsonsafe.compact(v) == json.dumps(v, separators=(",", ":"))
        assert jsonsafe.plain(v) == json.dumps(v)
        assert jsonsafe.plain_sorted(v) == json.dumps(v, sort_keys=True)
    assert jsonsafe.compact("lone \"string\" é") == json.dumps("lone \"string\" é", separators=(",", ":"))
