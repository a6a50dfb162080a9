"""A turn's cost does not grow with the goal's history (issue 25): should-run that opens a run
sends a fixed, small set of SQL statements, none twice, whatever the goal has done before, and
the ready set is read as a page of its index, the same answer as the full computation."""

from __future__ import annotations

import collections
import random
import sys

import pytest

from loopx.values import clock
from loopx.domain import evidence, runs, todos
from loopx.views import inputs, quota
from loopx.store.sqlite import SqliteTx
from tests.test_turn_helpers import add_gate, ask, make_goal

#: Statements outside the state digest (loopx/ledger/integrity.py) a should-run that opens a run may send,
#: transaction control included: 16 of its own plus PostgreSQL's 3 of control was 19; the merge of
#: the worker and keyed-integrity branches added two, each needed, neither a repeat, so 20:
#:  - ``SELECT g.revision AS goal_revision, r.* FROM goals g LEFT JOIN runs r ...`` (claims.
#:    stop_leftovers): the goal's open runs read *before* the write transaction, so step processes
#:    a dead owner left running are killed (with a grace period) without holding the goal's lock.
#:    It replaces the transaction's own open-run read while the goal's revision has not moved, so
#:    the goal's open runs are read once (the transaction's read returns only after a race).
#:  - ``SELECT value FROM meta WHERE key = ?`` (keys.stored_id, once per transaction): whether the
#:    registry is keyed, and by which id, so the new events' hashes are keyed (HMAC) as the
#:    rollback anchor expects; it is not cached across transactions (another process may key it).
OUTSIDE_DIGEST = 20
#: The issue's bound on the whole should-run, digest included.
TOTAL = 25
#: Transaction control the store sends itself, not through the transaction object: SQLite
#: BEGIN IMMEDIATE + COMMIT; PostgreSQL BEGIN + pg_notify (wakes status servers) + COMMIT.
CONTROL = {"sqlite": 2, "postgres": 3}


class Counted:
    """Every statement a transaction object sends, and whether the state digest sent it."""

    def __init__(self):
        self.seen: list[tuple[str, bool]] = []

    def record(self, sql):
        frame, digest = sys._getframe(2), False
        while frame is not None:
            if frame.f_code.co_filename.endswith("loopx/ledger/integrity.py"):
                digest = True
                break
            frame = frame.f_back
        self.seen.append((" ".join(sql.split()), digest))

    def outside(self) -> list[str]:
        return [sql for sql, digest in self.seen if not digest]

    def digest(self) -> list[str]:
        return [sql for sql, digest in self.seen if digest]


@pytest.fixture
def counted(monkeypatch):
    from loopx.store import postgres

    found = Counted()
    for cls in (SqliteTx, postgres.PostgresTx):
        for name in ("execute", "executemany", "query", "one", "tuples"):
            original = getattr(cls, name, None)
            if original is None:
                continue

            def wrapper(self, sql, *args, _original=original):
                found.record(sql)
                return _original(self, sql, *args)

            monkeypatch.setattr(cls, name, wrapper)
    return found


def _with_history(reg, g, turns: int) -> None:
    """``turns`` whole turns on ``g``: should-run, claim, evidence, done, finish (with usage)."""
    for i in range(turns):
        c = ask(reg, g, agent="worker")["interaction_contract"]
        todo = c["agent_channel"]["ready_todos"][0]["id"]
        todos.claim(reg, "user", goal_id=g, todo_id=todo, agent="worker", run_id=c["run_id"])
        evidence.record(reg, "user", goal_id=g, kind="note", summary=f"step {i}", run_id=c["run_id"])
        todos.settle(reg, "user", "done", goal_id=g, todo_id=todo)
        todos.add(reg, "user", goal_id=g, text=f"next {i}")
        runs.finish(reg, "user", run_id=c["run_id"], outcome="ok", tokens=10, cost=0.01, handoff=f"did {i}")


def _opening(reg, counted, g) -> list[str]:
    counted.seen.clear()
    out = ask(reg, g, agent="me")
    assert out["decision"] == "run" and out["reasons"] == ["ready_work"], out
    assert out["interaction_contract"]["quota"]["used"]["turns"] >= 1
    return list(counted.seen)


def test_should_run_that_opens_a_run_sends_few_statements_none_twice(reg, counted):
    fresh = make_goal(reg, limits={"max_turns": 1000}, todo_texts=("a", "b"))["goal"]
    busy = make_goal(reg, limits={"max_turns": 1000}, todo_texts=("a", "b"))["goal"]
    _with_history(reg, busy, 12)
    on_fresh = _opening(reg, counted, fresh)
    on_busy = _opening(reg, counted, busy)
    control = CONTROL[reg.store.dialect]
    for seen in (on_fresh, on_busy):
        outside = [sql for sql, digest in seen if not digest]
        assert len(outside) + control <= OUTSIDE_DIGEST, "\n".join(outside)
        repeated = [sql for sql, n in collections.Counter(outside).items() if n > 1]
        assert not repeated, repeated
    # The history changes nothing: the same statements (ids and times aside) on both goals.
    assert len(on_busy) == len(on_fresh)


# The state digest's share (loopx/ledger/state_macs.py): the head, newest events and change log in one
# statement, the rows the decision reads with their MACs in one, and the seal's three (take the
# changed rows out of the change log, upsert their MACs, write the head).
def test_should_run_that_opens_a_run_sends_at_most_25_statements_digest_included(reg, counted):
    g = make_goal(reg, limits={"max_turns": 1000}, todo_texts=("a", "b"))["goal"]
    seen = _opening(reg, counted, g)
    texts = [sql for sql, _ in seen]
    assert len(texts) + CONTROL[reg.store.dialect] <= TOTAL, "\n".join(texts)
    assert len(set(texts)) == len(texts), [s for s, n in collections.Counter(texts).items() if n > 1]


def _full_ready(reg, g, agent, now):
    with reg.read() as tx:
        return [t.id for t in todos.ready(tx, g, agent=agent, now=now)]


def _page(reg, g, agent, now, limit=1000):
    with reg.read() as tx:
        seen = inputs.gather(tx, g)
        return [t.id for t in seen.ready(tx, agent, now, limit)]


def test_the_ready_page_is_the_full_ready_set_through_dependencies_claims_and_gates(reg):
    rnd = random.Random(25)
    g = make_goal(reg, parallel=True, todo_texts=())["goal"]
    made: list[str] = []
    for i in range(40):
        deps = rnd.sample(made, k=min(len(made), rnd.choice([0, 0, 1, 2])))
        made.append(todos.add(reg, "user", goal_id=g, text=f"t{i}", priority=rnd.choice(["P0", "P1", "P2"]),
                              depends_on=deps)["id"])
    run = ask(reg, g, agent="other")["interaction_contract"]["run_id"]
    for step in range(60):
        t = rnd.choice(made)
        verb = rnd.choice(["done", "done", "reopen", "block", "claim", "gate", "depends"])
        try:
            if verb in ("done", "reopen", "block"):
                todos.settle(reg, "user", verb, goal_id=g, todo_id=t)
            elif verb == "claim":
                todos.claim(reg, "user", goal_id=g, todo_id=t, agent="other", run_id=run)
            elif verb == "gate":
                add_gate(reg, g, blocks=f"todo:{t}")
            else:
                later = made[made.index(t) + 1:]
                if later:
                    todos.depend(reg, "user", goal_id=g, todo_id=rnd.choice(later), depends_on=[t])
        except Exception as err:  # a refusal (already done, a cycle...) changes nothing
            assert getattr(err, "code", None), err
        now = clock.now()
        for agent in ("me", "other"):
            assert _page(reg, g, agent, now) == _full_ready(reg, g, agent, now), (step, verb)
        assert _page(reg, g, "me", now, limit=3) == _full_ready(reg, g, "me", now)[:3]


@pytest.mark.slow
def test_a_goal_with_many_finished_todos_reads_a_page_not_the_list(sqlite_url):
    """SQLite's VM steps spent reading the ready set stay flat as done todos pile up."""
    from loopx.ledger.registry import Registry

    def steps_for(reg, g) -> int:
        ticks = [0]

        def tick():
            ticks[0] += 1
            return 0

        with reg.read() as tx:
            seen = inputs.gather(tx, g)
            reg.store._conn.set_progress_handler(tick, 100)
            try:
                page = seen.ready(tx, "me", clock.now(), 5)
            finally:
                reg.store._conn.set_progress_handler(None, 0)
        assert len(page) == 5
        return ticks[0]

    with Registry.open(sqlite_url) as reg:
        small = make_goal(reg, todo_texts=[f"s{i}" for i in range(8)])["goal"]
        big = make_goal(reg, todo_texts=())["goal"]

        def pile(w):
            from loopx import api

            for i in range(3000):
                t = api.todos.add_in(w, text=f"old {i}", priority="P0")
                api.todos.done_in(w, todo_id=t)
            for i in range(8):
                api.todos.add_in(w, text=f"new {i}", priority="P1")
            # and open todos waiting on an open one: never ready, never read
            first = api.todos.add_in(w, text="gate keeper", priority="P3")
            for i in range(2000):
                api.todos.add_in(w, text=f"waiting {i}", priority="P0", depends_on=[first])

        reg.mutate("user", pile, goal_id=big)
        assert steps_for(reg, big) <= 2 * steps_for(reg, small) + 2
