"""What one write costs (issue 25): the writes of a turn read no row twice that the writer already
holds, and what is remembered to save work (an encoder, a digest this process sealed) gives the
same answer as the work it saves - a digest edited behind LoopX's back is still caught."""

from __future__ import annotations

import json
import random

from loopx.domain import evidence, todos
from loopx.ledger import integrity
from loopx.values import jsonsafe
from loopx.ledger.events import body_text
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
    # A todo event refreshes the attention summary (one needs-you, issue 36), which reads its own
    # inputs (loopx.store.queries.attention.summary_inputs, the goal joined with usage and summary): a different read,
    # counted by its own test; here, the goal row the writer locks is read once.
    goal_reads = [s for s in seen if s.startswith("SELECT") and " FROM goals " in f"{s} " and "g.revision" not in s
                  and "LEFT JOIN goal_summary s" not in s]
    # The writer's lock reads the goal's row; checking the run's contract is fresh reuses it.
    assert len(goal_reads) == 1, goal_reads
    seen.clear()
    done = todos.settle(reg, "executor", "done", goal_id=g, todo_id=todo, run_id=c["run_id"], agent="worker")
    assert done["status"] == "done"
    goal_reads = [s for s in seen if s.startswith("SELECT") and " FROM goals " in f"{s} "
                  and "LEFT JOIN goal_summary s" not in s]
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


def _transactions(monkeypatch, reg) -> dict:
    """How many read and write transactions ``reg``'s store opens from now on."""
    opened = {"read": 0, "write": 0}
    store = type(reg.store)
    for name in ("read", "write"):
        original = getattr(store, name)

        def wrapper(self, *args, _original=original, _name=name, **kwargs):
            opened[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(store, name, wrapper)
    return opened


def test_evidence_add_and_run_finish_find_the_runs_goal_in_their_write(reg, monkeypatch):
    from loopx.domain import runs
    from loopx.values.errors import LoopxError

    g = make_goal(reg, todo_texts=("a",))["goal"]
    other = make_goal(reg, todo_texts=("a",))["goal"]
    run = ask(reg, g, agent="worker")["interaction_contract"]["run_id"]
    opened = _transactions(monkeypatch, reg)
    added = evidence.record(reg, "executor", run_id=run, kind="note", summary="s", agent="worker", operation_id="op-1")
    # SQLite: one write transaction, no read of its own first (PostgreSQL's snapshot is fixed by
    # its first statement, so there the run is still looked up in a read before the row lock).
    assert opened == {"read": 0 if reg.store.dialect == "sqlite" else 1, "write": 1}
    assert added["goal_id"] == g and added["run_id"] == run
    # A retry of the same operation answers the first result and writes nothing.
    again = evidence.record(reg, "executor", run_id=run, kind="note", summary="s", agent="worker", operation_id="op-1")
    assert again == added
    with reg.read() as tx:
        before = tx.one("SELECT MAX(seq) AS n FROM events WHERE goal_id = ?", (g,))["n"]
    refusals = [
        (dict(agent="someone"), "run_not_yours"),
        (dict(agent="worker", goal_id=other), "run_not_found"),
    ]
    for kw, code in refusals:
        try:
            evidence.record(reg, "executor", run_id=run, kind="note", summary="s", **kw)
        except LoopxError as exc:
            assert exc.code == code
        else:
            raise AssertionError(f"not refused: {kw}")
    try:
        runs.finish(reg, "executor", run_id=run, agent="someone")
    except LoopxError as exc:
        assert exc.code == "run_not_yours"
    else:
        raise AssertionError("finish by another agent not refused")
    with reg.read() as tx:
        assert tx.one("SELECT MAX(seq) AS n FROM events WHERE goal_id = ?", (g,))["n"] == before
    opened.update(read=0, write=0)
    done = runs.finish(reg, "executor", run_id=run, agent="worker", tokens=5)
    assert opened == {"read": 0 if reg.store.dialect == "sqlite" else 1, "write": 1}
    assert done["status"] == "finished" and done["goal_id"] == g


def test_the_cheap_damage_check_asks_once_on_a_sound_goal_and_still_finds_each_damage(reg, monkeypatch):
    from loopx.domain import damage

    g = make_goal(reg, todo_texts=("a", "b"))["goal"]
    with reg.read() as tx:
        a, b = [r["id"] for r in tx.query("SELECT id FROM todos WHERE goal_id = ? ORDER BY created_seq", (g,))]
    dep = todos.add(reg, "user", goal_id=g, text="after b", depends_on=[b])["id"]
    from loopx.domain import gates

    gate = gates.add(reg, "user", goal_id=g, title="a ok?", scope="other", blocks=f"todo:{a}")["id"]
    gates.add(reg, "user", goal_id=g, title="all ok?", scope="other", blocks="all")
    seen = _counting(monkeypatch)
    with reg.read() as tx:
        assert damage.cheap(tx, g) == []
    # Before every turn: one statement on a sound goal (the goal, its ledger's end, dependencies
    # and gates on missing todos asked together).
    assert len(seen) == 1, seen

    def damaged(*sql):
        reg.store.write(lambda tx: [tx.execute(s, p) for s, p in sql])
        with reg.read() as tx:
            return sorted((f.code, f.subject) for f in damage.cheap(tx, g))

    assert damaged(("UPDATE goals SET revision = 1 WHERE id = ?", (g,))) == [("revision_mismatch", g)]
    with reg.read() as tx:
        last = tx.one("SELECT MAX(seq) AS n FROM events WHERE goal_id = ?", (g,))["n"]
    assert damaged(("UPDATE goals SET revision = ? WHERE id = ?", (last, g)),
                   ("DELETE FROM todos WHERE id = ?", (b,))) == [("missing_dependency", dep)]
    assert damaged(("DELETE FROM todos WHERE id = ?", (a,))) == [("dangling_gate", gate), ("missing_dependency", dep)]


def test_a_runs_contract_is_encoded_once_and_filed_exactly_as_its_ledger_entry_holds_it(reg, monkeypatch):
    from loopx.ledger import log as ledger

    g = make_goal(reg, todo_texts=("a",))["goal"]
    encoded = []
    canonical = jsonsafe.canonical

    def counting(value):
        if isinstance(value, dict) and "agent_channel" in value:  # a contract document
            encoded.append(value["contract_id"])
        return canonical(value)

    monkeypatch.setattr(jsonsafe, "canonical", counting)
    c = ask(reg, g, agent="worker")["interaction_contract"]
    # The run.opened body (which holds it) is encoded; the contract's own column is cut from it.
    assert encoded == [], encoded
    with reg.read() as tx:
        filed = tx.one("SELECT document FROM contracts WHERE id = ?", (c["contract_id"],))["document"]
        body = tx.one("SELECT body FROM events WHERE goal_id = ? AND kind = 'run.opened'", (g,))["body"]
    assert filed == canonical(json.loads(body)["contract"]) and f'"contract":{filed},' in body

    # The cut is exact whatever the body holds around the member (random bodies, every position).
    rng = random.Random(7)
    for _ in range(2000):
        body = {rng.choice(["a", "contract", "zz", "é", "", "k\"", "contracts"]): _value(rng) for _ in range(4)}
        body["contract"] = _value(rng)
        event = ledger.Event(id=1, goal_id=g, seq=1, at="t", actor="core", kind="run.opened", body=body)
        body_text.hold(body, canonical(body))
        assert ledger.member_text(event, "contract") == canonical(body["contract"])
        body_text.hold({**body}, canonical(body))  # another body: encoded anew
        assert ledger.member_text(event, "contract") == canonical(body["contract"])
        body_text.release()
