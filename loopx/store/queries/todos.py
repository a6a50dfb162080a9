"""Todos as :mod:`loopx.domain.todos` reads them (the ready set's index is :mod:`.projections`')."""

from __future__ import annotations


def goal_todos(tx, goal_id: str) -> list[dict]:
    """Every todo row of the goal, by priority then creation order."""
    return tx.query("SELECT * FROM todos WHERE goal_id = ? ORDER BY priority, created_seq", (goal_id,))


def todo_row(tx, goal_id: str, todo_id: str) -> dict | None:
    """The todo ``todo_id`` of ``goal_id``."""
    return tx.one("SELECT * FROM todos WHERE id = ? AND goal_id = ?", (todo_id, goal_id))


def todo_count(tx, goal_id: str) -> int:
    """How many todos the goal has."""
    return tx.one("SELECT COUNT(*) AS n FROM todos WHERE goal_id = ?", (goal_id,))["n"]


def todo_statuses(tx, goal_id: str, ids: list[str]) -> list[dict]:
    """``id, status`` of the goal's todos among ``ids`` (not empty)."""
    return tx.query(f"SELECT id, status FROM todos WHERE goal_id = ? AND id IN ({', '.join('?' for _ in ids)})",
                    (goal_id, *ids))


def todo_exists(tx, goal_id: str, todo_id: str) -> bool:
    """Whether the goal has the todo ``todo_id``."""
    return tx.one("SELECT id FROM todos WHERE goal_id = ? AND id = ?", (goal_id, todo_id)) is not None
