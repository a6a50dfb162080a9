"""The ``notifications`` table (:mod:`loopx.views.notify`): one row per delivery of a notification, on
one channel, with its outcome; and the goals a check looks at.
"""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]


def last_notification(tx, goal_id: str) -> Row | None:
    """The goal's newest delivery (dedupe_key, at, status), or None."""
    return tx.one("SELECT dedupe_key, at, status FROM notifications WHERE goal_id = ? ORDER BY id DESC LIMIT 1",
                  (goal_id,))


def record_delivery(tx, goal_id: str, reason: str, key: str, at: str, channel: str, status: str, attempts: int,
                    detail: str) -> None:
    """One delivery of the notification ``key`` on ``channel`` (``detail``: its JSON text)."""
    tx.execute("INSERT INTO notifications (goal_id, reason, dedupe_key, at, channel, status, attempts, detail)"
               " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
               (goal_id, reason, key, at, channel, status, attempts, detail))


def pending_deliveries(tx, goal_id: str) -> list[Row]:
    """The goal's deliveries of its needs still to be tried again, oldest first."""
    return tx.query("SELECT id, dedupe_key, at, channel, attempts, detail FROM notifications"
                    " WHERE goal_id = ? AND status = 'pending' AND dedupe_key LIKE 'n-%' ORDER BY id", (goal_id,))


def delivery_tried(tx, row_id: int, status: str, attempts: int, detail: str) -> None:
    """A delivery tried again: its status, attempts and detail (JSON text)."""
    tx.execute("UPDATE notifications SET status = ?, attempts = ?, detail = ? WHERE id = ?",
               (status, attempts, detail, row_id))


def delivery_given_up(tx, row_id: int, detail: str) -> None:
    """A pending delivery nobody needs any more: failed, with why in its detail (JSON text)."""
    tx.execute("UPDATE notifications SET status = 'failed', detail = ? WHERE id = ?", (detail, row_id))


def open_goal_ids(tx) -> list[str]:
    """The ids of every open goal."""
    return [r["id"] for r in tx.query("SELECT id FROM goals WHERE status = 'open'")]


def goal_title(tx, goal_id: str) -> Row | None:
    """``{"title"}`` of the goal, or None when there is no such goal."""
    return tx.one("SELECT title FROM goals WHERE id = ?", (goal_id,))


def was_notified(tx, key: str) -> bool:
    """Whether any delivery of the notification ``key`` was recorded."""
    return tx.one("SELECT 1 AS x FROM notifications WHERE dedupe_key = ? LIMIT 1", (key,)) is not None


def recent_deliveries(tx, limit: int) -> list[Row]:
    """The ``limit`` newest deliveries, newest first."""
    return tx.query("SELECT * FROM notifications ORDER BY id DESC LIMIT ?", (limit,))
