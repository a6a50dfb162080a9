"""The repairs' statements: what each repair event does to a goal's current state
(:mod:`loopx.ledger.events.repair`), and what the repair API reads and rewrites (:mod:`loopx.domain.repairs`).

Cold: a repair, a rebuild or a replay of a repair event loads it.
"""

from __future__ import annotations

# --- what repair events do to current state (loopx.ledger.events.repair) ---


def release_lease(tx, todo_id: str, goal_id: str, at: str) -> None:
    """Clear the todo's claim (its epoch stays)."""
    tx.execute("UPDATE todos SET claim_agent = NULL, claim_run_id = NULL, claim_expires_at = NULL, updated_at = ?"
               " WHERE id = ? AND goal_id = ?", (at, todo_id, goal_id))


def todo_dependencies(tx, todo_id: str, goal_id: str) -> dict | None:
    """The todo's ``{"depends_on"}`` (JSON text), or None."""
    return tx.one("SELECT depends_on FROM todos WHERE id = ? AND goal_id = ?", (todo_id, goal_id))


def set_todo_dependencies(tx, todo_id: str, goal_id: str, depends_on: str, at: str) -> None:
    """Set the todo's dependencies (JSON text)."""
    tx.execute("UPDATE todos SET depends_on = ?, updated_at = ? WHERE id = ? AND goal_id = ?",
               (depends_on, at, todo_id, goal_id))


def widen_gate(tx, gate_id: str, goal_id: str) -> None:
    """Make the gate block the whole goal."""
    tx.execute("UPDATE gates SET blocks = 'all' WHERE id = ? AND goal_id = ?", (gate_id, goal_id))


def unbind_evidence(tx, evidence_id: str, goal_id: str) -> None:
    """Drop the evidence's reference to its run."""
    tx.execute("UPDATE evidence SET run_id = NULL WHERE id = ? AND goal_id = ?", (evidence_id, goal_id))


def clear_goal_rows(tx, table: str, column: str, goal_id: str) -> None:
    """Delete every row of ``table`` whose ``column`` is the goal."""
    tx.execute(f"DELETE FROM {table} WHERE {column} = ?", (goal_id,))


def events_before(tx, goal_id: str, seq: int) -> list[dict]:
    """The goal's events before ``seq``, oldest first."""
    return tx.query("SELECT * FROM events WHERE goal_id = ? AND seq < ? ORDER BY seq", (goal_id, seq))


def put_row(tx, table: str, keys: tuple, row: dict) -> None:
    """Replace the row of ``table`` with ``row``'s key (``keys``: the key's columns) by ``row``
    (its column names checked by the caller)."""
    tx.execute(f"DELETE FROM {table} WHERE {' AND '.join(f'{k} = ?' for k in keys)}",
               tuple(row[k] for k in keys))
    cols = sorted(row)
    tx.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
               tuple(row[c] for c in cols))


# --- the repair API (loopx.domain.repairs) ---


def event_body(tx, goal_id: str, seq: int) -> dict | None:
    """The goal's event ``seq`` (``{"id", "body"}``), or None."""
    return tx.one("SELECT id, body FROM events WHERE goal_id = ? AND seq = ?", (goal_id, seq))


def set_event_body(tx, event_id: int, body: str) -> None:
    """Rewrite an event's stored body (the one sanctioned rewrite: a repair that re-chains)."""
    tx.execute("UPDATE events SET body = ? WHERE id = ?", (body, event_id))


def goal_revision(tx, goal_id: str) -> dict | None:
    """The goal's ``{"id", "status", "revision"}``, or None."""
    return tx.one("SELECT id, status, revision FROM goals WHERE id = ?", (goal_id,))


def event_kinds(tx, goal_id: str) -> list[dict]:
    """The goal's events as ``{"seq", "kind", "body"}``, oldest first."""
    return tx.query("SELECT seq, kind, body FROM events WHERE goal_id = ? ORDER BY seq", (goal_id,))


def goal_exists(tx, goal_id: str) -> bool:
    """Whether the goal has its row."""
    return tx.one("SELECT id FROM goals WHERE id = ?", (goal_id,)) is not None
