"""Goals and where their work happens: the rows :mod:`loopx.domain.goals`, :mod:`loopx.domain.workspace` and
:mod:`loopx.views.quota` read, and schema v8's adoption of capabilities."""

from __future__ import annotations


def goal_row(tx, goal_id: str) -> dict | None:
    """The ``goals`` row of ``goal_id``."""
    return tx.one("SELECT * FROM goals WHERE id = ?", (goal_id,))


def goal_created_seq(tx, goal_id: str) -> dict | None:
    """The goal's ``created_seq`` (its place in the listing) as a row."""
    return tx.one("SELECT created_seq FROM goals WHERE id = ?", (goal_id,))


def goal_page(tx, status: str, before: int | None, limit: int) -> list[dict]:
    """Goals newest first: of ``status`` (``active``: open or paused; ``all``: any), created before
    ``before`` (a ``created_seq``, if given), at most ``limit``."""
    where, params = [], []
    if status == "active":
        where.append("status IN ('open', 'paused')")
    elif status != "all":
        where.append("status = ?")
        params.append(status)
    if before is not None:
        where.append("created_seq < ?")
        params.append(before)
    sql = "SELECT * FROM goals"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY created_seq DESC LIMIT ?"
    params.append(limit)
    return tx.query(sql, params)


def goals_with_capability_state(tx) -> list[dict]:
    """The goals not closed that some capability keeps state for (goal_id), by id."""
    return tx.query("SELECT DISTINCT s.goal_id FROM capability_state s JOIN goals g ON g.id = s.goal_id"
                    " WHERE g.status <> 'closed' ORDER BY s.goal_id")


def capability_state_writers(tx, goal_id: str) -> list[dict]:
    """The actors that wrote ``capability.state_set`` on the goal (actor)."""
    return tx.query("SELECT DISTINCT actor FROM events WHERE goal_id = ? AND kind = 'capability.state_set'",
                    (goal_id,))


def goal_status(tx, goal_id: str) -> str:
    """The goal's status."""
    return tx.one("SELECT status FROM goals WHERE id = ?", (goal_id,))["status"]


def goal_exists(tx, goal_id: str) -> bool:
    """Whether there is a goal ``goal_id``."""
    return tx.one("SELECT 1 AS x FROM goals WHERE id = ?", (goal_id,)) is not None


def workspace_record(tx, goal_id: str) -> dict | None:
    """The goal's ``goal_workspaces`` row (project, root, path, branch, base, kind)."""
    return tx.one("SELECT project, root, path, branch, base, kind FROM goal_workspaces WHERE goal_id = ?",
                  (goal_id,))
