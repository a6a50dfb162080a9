"""The benchmark's bulk fill: registries of any size, written as ledger events (not a benchmark itself).

Every goal is a real ledger: its events are appended to ``events`` (``executemany``, in batches
of goals) with the hash chain a command writes (``prev_hash``, ``hash``: the same
:func:`loopx.integrity.event_hash` of the same stored body text), applied to the current-state
tables by :func:`loopx.ledger.apply_many` - the same apply code every command and every replay
uses - and each goal is sealed (:func:`loopx.integrity.seal`: chain head and state digest) as
the last command on it would, so ``self-repair check`` passes on the result and should-run makes
the decision a real goal gets (``run``, not ``repair``). What is skipped is only per-command
overhead (one process and one transaction per event); event ids are given explicitly, as a
registry copy does. One difference from the CLI: a bulk run's contract document is a stub (the
fingerprint and times; no decision reads an old run's contract).

The mix per goal: created, limits set (``max_turns`` 3, ``max_tokens`` 50,000), three todos and
two allow-listed actions. One goal in ten has also had a finished run (one in thirty of all goals
a failed one, which needs attention); one in fifty waits on a pending gate; one in five thousand
has an open run whose lease has already expired (attention judged at read time).
"""

from __future__ import annotations

import json
import os
import time

from loopx import clock, integrity, ledger
from loopx.model import Event

FILL_VERSION = 2  # bump when the mix changes: cached registries of another version are rebuilt
BATCH_GOALS = 5000


def goal_events(i: int, at: str, past: str) -> list[tuple[str, str, dict]]:
    """``[(kind, actor, body)]`` of goal number ``i``."""
    rnd = os.urandom(40).hex()
    todo = [f"t-{rnd[k * 12:(k + 1) * 12]}" for k in range(3)]
    out = [
        ("goal.created", "user", {"title": f"goal {i}", "description": "benchmark goal",
                                  "criteria": ["a criterion"], "parallel_runs": False}),
        ("quota.set", "user", {"limits": {"max_turns": 3, "max_tokens": 50_000}}),
        ("todo.added", "user", {"todo_id": todo[0], "text": "first step", "priority": "P1", "depends_on": []}),
        ("todo.added", "user", {"todo_id": todo[1], "text": "second step", "priority": "P1", "depends_on": [todo[0]]}),
        ("todo.added", "user", {"todo_id": todo[2], "text": "third step", "priority": "P2", "depends_on": []}),
        ("action.added", "user", {"name": "test", "argv": ["pytest", "-q"]}),
        ("action.added", "user", {"name": "lint", "argv": ["ruff", "check", "."]}),
    ]
    if i % 10 == 0 or i % 30 == 0 or i % 5000 == 1:
        run_id, contract_id = f"r-{rnd[36:48]}", f"c-{rnd[48:60]}"
        expires = past if i % 5000 == 1 else clock.add_seconds(at, 3600)
        doc = {"contract_id": contract_id, "fingerprint": "sha256:bench", "issued_at": at, "expires_at": expires}
        out.append(("run.opened", "core", {"run_id": run_id, "agent": "bench", "expires_at": expires,
                                           "contract": doc}))
        if i % 5000 != 1:
            out.append(("run.finished", "core", {"run_id": run_id, "outcome": "failed" if i % 30 == 0 else "ok",
                                                 "tokens": 1200, "cost": 0.03, "handoff": "turn done"}))
    if i % 50 == 7:
        out.append(("gate.added", "user", {"gate_id": f"x-{rnd[60:72]}", "title": "approve the deploy",
                                           "scope": "production", "blocks": "all"}))
    return out


def fill(reg, n: int, *, progress=None) -> None:
    """Fill ``reg`` up to ``n`` goals, in batches of one transaction each (so an interrupted fill
    leaves whole batches, and calling this again resumes it)."""
    from loopx.validate import new_id

    def next_id(tx):
        row = tx.one("SELECT max(id) AS m FROM events")
        return int(row["m"] or 0) + 1

    if reg.store.dialect == "sqlite":
        # Goal ids are random, so every batch touches pages all over the indexes: keep them in
        # memory (the default 2 MB cache turns a million-goal fill into gigabytes of page reads).
        for pragma in ("cache_size = -1000000", "mmap_size = 4294967296", "wal_autocheckpoint = 50000"):
            reg.store._conn.execute(f"PRAGMA {pragma}")
    with reg.read() as tx:
        done = tx.one("SELECT count(*) AS n FROM goals")["n"]
    keep_ids = " OVERRIDING SYSTEM VALUE" if reg.store.dialect == "postgres" else ""
    insert = (f"INSERT INTO events (id, goal_id, seq, at, actor, kind, body, operation_id, prev_hash, hash){keep_ids}"
              " VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, ?)")
    started = time.monotonic()
    while done < n:
        count = min(BATCH_GOALS, n - done)

        def batch(tx, first=done, count=count):
            at = clock.now()
            past = clock.add_seconds(at, -60)
            event_id = next_id(tx)
            events, rows, goals = [], [], []
            for i in range(first, first + count):
                goal_id = new_id("goal")
                goals.append(goal_id)
                prev = integrity.GENESIS
                for seq, (kind, actor, body) in enumerate(goal_events(i, at, past), start=1):
                    events.append(Event(id=event_id, goal_id=goal_id, seq=seq, at=at, actor=actor, kind=kind,
                                        body=body, operation_id=None))
                    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
                    digest = integrity.event_hash(prev, goal_id, seq, at, actor, kind, text, None)
                    rows.append((event_id, goal_id, seq, at, actor, kind, text, prev, digest))
                    prev = digest
                    event_id += 1
            tx.executemany(insert, rows)
            ledger.apply_many(tx, events)
            for goal_id in goals:  # what the last command on each goal writes: its head and state digest
                integrity.seal(tx, goal_id)
            if tx.dialect == "postgres":
                tx.execute("SELECT setval(pg_get_serial_sequence('events', 'id'), (SELECT max(id) FROM events))")

        reg.store.write(batch)
        done += count
        if progress:
            rate = done / max(time.monotonic() - started, 1e-9)
            progress(f"  {done:,}/{n:,} goals ({rate:,.0f}/s)")
