"""Gates and the actions they hold back: what :mod:`loopx.domain.gates` and :mod:`loopx.domain.actions` read."""

from __future__ import annotations


def goal_gates(tx, goal_id: str, pending_only: bool) -> list[dict]:
    """The goal's gate rows in the order they were asked for (only pending ones with ``pending_only``)."""
    sql = "SELECT * FROM gates WHERE goal_id = ?"
    params: list = [goal_id]
    if pending_only:
        sql += " AND status = 'pending'"
    sql += " ORDER BY created_at, id"
    return tx.query(sql, params)


def unapproved_gates(tx, goal_id: str) -> list[dict]:
    """The goal's pending and rejected gate rows, in the order they were asked for."""
    return tx.query(
        "SELECT * FROM gates WHERE goal_id = ? AND status IN ('pending', 'rejected') ORDER BY created_at, id",
        (goal_id,),
    )


def unapproved_gates_unordered(tx, goal_id: str) -> list[dict]:
    """The goal's pending and rejected gate rows (any order)."""
    return tx.query("SELECT * FROM gates WHERE goal_id = ? AND status IN ('pending', 'rejected')", (goal_id,))


def gate_row(tx, goal_id: str, gate_id: str) -> dict | None:
    """The gate ``gate_id`` of ``goal_id``."""
    return tx.one("SELECT * FROM gates WHERE id = ? AND goal_id = ?", (gate_id, goal_id))


def goal_actions(tx, goal_id: str) -> list[dict]:
    """Every action row of the goal, in the order they were added."""
    return tx.query("SELECT * FROM actions WHERE goal_id = ? ORDER BY created_at, name", (goal_id,))


def action_row(tx, goal_id: str, name: str) -> dict | None:
    """The action ``name`` of ``goal_id``."""
    return tx.one("SELECT * FROM actions WHERE goal_id = ? AND name = ?", (goal_id, name))


def action_exists(tx, goal_id: str, name: str) -> bool:
    """Whether the goal allows an action ``name``."""
    return tx.one("SELECT name FROM actions WHERE goal_id = ? AND name = ?", (goal_id, name)) is not None


def action_argvs(tx, goal_id: str) -> list[dict]:
    """The goal's actions (name, argv as JSON text)."""
    return tx.query("SELECT name, argv FROM actions WHERE goal_id = ?", (goal_id,))
