"""The latest hand-off (what every contract carries) costs the same whatever a goal's history:
finished runs that left no hand-off are not walked (issue 25; schema v10's partial index)."""

from __future__ import annotations

import sqlite3

import pytest


class _Tx:
    """Just enough of a read transaction for :func:`loopx.domain.runs.latest_handoff_note`."""

    def __init__(self, conn):
        self.conn = conn

    def one(self, sql, params=()):
        cur = self.conn.execute(sql, params)
        cols = [c[0] for c in cur.description]
        row = cur.fetchone()
        return None if row is None else dict(zip(cols, row))


def _add_runs(conn, goal_id: str, n: int, *, handoff_first: bool) -> None:
    rows = []
    for i in range(n):
        at = f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}.{i:06d}Z"
        rows.append((f"r-{goal_id}-{i:06d}", goal_id, "a1", "finished", "c", "f", at, at, at, "ok", 0, 0.0,
                     "the first one left a note" if handoff_first and i == 0 else None))
    conn.executemany("INSERT INTO runs (id, goal_id, agent, status, contract_id, fingerprint, opened_at, expires_at,"
                     " finished_at, outcome, tokens, cost, handoff) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    conn.commit()


def _vm_steps(conn, goal_id: str) -> tuple[str | None, int]:
    from loopx.domain import runs

    steps = [0]

    def count():
        steps[0] += 1
        return 0

    conn.set_progress_handler(count, 1)
    try:
        note = runs.latest_handoff_note(_Tx(conn), goal_id)
    finally:
        conn.set_progress_handler(None, 1)
    return note, steps[0]


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_the_latest_handoff_is_found_without_walking_runs_that_left_none(registry_url):
    from loopx.ledger.registry import Registry

    with Registry.open(registry_url):
        pass  # a registry at the current schema
    path = registry_url.split("sqlite:///", 1)[-1] if registry_url.startswith("sqlite:") else registry_url
    conn = sqlite3.connect(path)
    # Two goals' runs: a short history, and a long one where only the oldest run left a note.
    _add_runs(conn, "g-short", 10, handoff_first=True)
    _add_runs(conn, "g-long", 5000, handoff_first=True)
    short_note, short = _vm_steps(conn, "g-short")
    long_note, long = _vm_steps(conn, "g-long")
    assert short_note == long_note == "the first one left a note"
    # Without the index the read steps over every run without a note (thousands of VM steps).
    assert long <= short + 20, (short, long)
    plan = " ".join(r[-1] for r in conn.execute(
        "EXPLAIN QUERY PLAN SELECT id, handoff, finished_at FROM runs WHERE goal_id = ? AND status = 'finished'"
        " AND handoff IS NOT NULL ORDER BY finished_at DESC, id DESC LIMIT 1", ("g-long",)))
    assert "runs_with_handoff" in plan and "TEMP B-TREE" not in plan, plan
