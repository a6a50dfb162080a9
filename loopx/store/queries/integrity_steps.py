"""The statements of tamper evidence's schema steps (:mod:`loopx.ledger.integrity_steps`). Cold: a
migration loads it."""

from __future__ import annotations


def forget_all_dirty(tx) -> None:
    """Empty ``state_dirty`` (every goal's changed rows were just MACed afresh)."""
    tx.execute("DELETE FROM state_dirty")


def add_goal_capabilities_column(tx) -> None:
    """Schema v8: ``goals.capabilities``, ``'[]'`` for the goals that exist."""
    tx.execute("ALTER TABLE goals ADD COLUMN capabilities TEXT NOT NULL DEFAULT '[]'")


def chain_rows(tx, goal_id: str) -> list[dict]:
    """The goal's events with what their chain hash covers, and the hash they hold, oldest first."""
    return tx.query("SELECT id, goal_id, seq, at, actor, kind, body, operation_id, hash FROM events"
                    " WHERE goal_id = ? ORDER BY seq", (goal_id,))


def set_chain(tx, prev_hash: str, digest: str, event_id: int) -> None:
    """Set one event's ``prev_hash`` and ``hash``."""
    tx.execute("UPDATE events SET prev_hash = ?, hash = ? WHERE id = ?", (prev_hash, digest, event_id))
