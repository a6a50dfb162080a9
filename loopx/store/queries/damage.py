"""What the damage detectors read (:mod:`loopx.domain.damage`): none of these writes. Off ``quota
should-run``'s path: should-run's hooks get the cheap probe's answer from the read of the goal
before them (:func:`loopx.store.queries.usage.goal_with_probe`).
"""

from __future__ import annotations

from typing import Any

from loopx.store.queries.usage import PROBE_COLUMNS

Row = dict[str, Any]

_CHEAP_PROBE = f"SELECT g.id, g.status, g.revision,{PROBE_COLUMNS} FROM goals g WHERE g.id = ?"


def cheap_probe(tx, goal_id: str) -> Row | None:
    """The goal's id, status and revision with the probe's columns (None if there is no such goal)."""
    return tx.one(_CHEAP_PROBE, (goal_id,))


def last_event_seq(tx, goal_id: str) -> Row | None:
    """``{"last"}``: the goal's newest event number (None without events)."""
    return tx.one("SELECT MAX(seq) AS last FROM events WHERE goal_id = ?", (goal_id,))


def missing_dependency_edges(tx, goal_id: str) -> list[Row]:
    """``(todo_id, dep_id)`` of the goal's dependency edges whose todo it does not have."""
    return tx.query("SELECT d.todo_id, d.dep_id FROM todo_deps d WHERE d.goal_id = ? AND NOT EXISTS"
                    " (SELECT 1 FROM todos t WHERE t.id = d.dep_id AND t.goal_id = d.goal_id)", (goal_id,))


def todos_depending(tx, goal_id: str, todo_ids) -> list[Row]:
    """``(id, depends_on)`` of the goal's todos among ``todo_ids``, oldest first."""
    return tx.query("SELECT id, depends_on FROM todos WHERE goal_id = ? AND id IN ({})"
                    " ORDER BY created_seq".format(", ".join("?" for _ in todo_ids)), (goal_id, *todo_ids))


def pending_gates(tx, goal_id: str) -> list[Row]:
    """``(id, blocks)`` of the goal's pending gates, by id."""
    return tx.query("SELECT id, blocks FROM gates WHERE goal_id = ? AND status = 'pending' ORDER BY id", (goal_id,))


def has_todo(tx, goal_id: str, todo_id: str) -> bool:
    """Whether the goal has the todo ``todo_id``."""
    return tx.one("SELECT id FROM todos WHERE goal_id = ? AND id = ?", (goal_id, todo_id)) is not None


def expired_claims(tx, goal_id: str, now: str) -> list[Row]:
    """The goal's open todos whose claim expired at ``now`` (id, claim_agent, claim_expires_at), oldest first."""
    return tx.query("SELECT id, claim_agent, claim_expires_at FROM todos WHERE goal_id = ? AND status = 'open'"
                    " AND claim_expires_at IS NOT NULL AND claim_expires_at <= ? ORDER BY created_seq",
                    (goal_id, now))


def expired_open_runs(tx, goal_id: str, now: str) -> list[Row]:
    """The goal's runs still open past their expiry at ``now`` (id, agent, expires_at), oldest first."""
    return tx.query("SELECT id, agent, expires_at FROM runs WHERE goal_id = ? AND status = 'open' AND expires_at <= ?"
                    " ORDER BY opened_at, id", (goal_id, now))


def evidence_without_run(tx, goal_id: str) -> list[Row]:
    """``(id, run_id)`` of the goal's evidence bound to a run the goal does not have."""
    return tx.query(
        "SELECT e.id, e.run_id FROM evidence e WHERE e.goal_id = ? AND e.run_id IS NOT NULL AND NOT EXISTS"
        " (SELECT 1 FROM runs r WHERE r.id = e.run_id AND r.goal_id = e.goal_id) ORDER BY e.created_at, e.id",
        (goal_id,))


def event_span(tx, goal_id: str) -> Row | None:
    """``{"n", "first", "last"}``: how many events the goal's ledger holds, its first and last number."""
    return tx.one("SELECT COUNT(*) AS n, MIN(seq) AS first, MAX(seq) AS last FROM events WHERE goal_id = ?",
                  (goal_id,))


def goals_without_row(tx) -> list[Row]:
    """``{"goal_id"}`` of the goals with events but no goal row, by id."""
    return tx.query("SELECT DISTINCT e.goal_id FROM events e WHERE NOT EXISTS"
                    " (SELECT 1 FROM goals g WHERE g.id = e.goal_id) ORDER BY e.goal_id")


def goal_to_check(tx, goal_id: str) -> Row | None:
    """The goal's id, status and revision (None if there is no such goal)."""
    return tx.one("SELECT id, status, revision FROM goals WHERE id = ?", (goal_id,))


def goals_to_check(tx) -> list[Row]:
    """Every goal's id, status and revision, oldest first."""
    return tx.query("SELECT id, status, revision FROM goals ORDER BY created_seq")
