"""The ready set as an index, kept by the todo events, so should-run reads a page of it.

A todo is *unblocked* when it is open and every todo it depends on is done. Two goal tables
(``loopx.store.schema.GOAL_TABLES``), written only by the ``todo.*`` apply functions - the code
a replay runs, so a rebuild makes the same rows:

* ``todo_deps`` - one row per dependency edge ``(todo_id, dep_id)``, indexed by ``dep_id``: when a
  todo is done or reopened, the todos waiting on it are found without reading every todo.
* ``todo_ready`` - one row per unblocked todo, with its ``priority`` and ``created_seq``, indexed
  in the ready set's order.

What remains of readiness depends on the clock or on gates (a claim held by another agent, a
pending or rejected ``todo:ID`` gate) and is filtered when the page is read
(:func:`first_ready`): a page costs the todos it shows plus those skipped for a live claim or a
gate, never the goal's whole list.
"""

from __future__ import annotations

import json


def _deps_done(tx, goal_id: str, deps: list[str]) -> bool:
    if not deps:
        return True
    marks = ", ".join("?" for _ in deps)
    done = tx.one(f"SELECT COUNT(*) AS n FROM todos WHERE goal_id = ? AND status = 'done' AND id IN ({marks})",
                  (goal_id, *deps))
    return int(done["n"]) == len(set(deps))


def refresh(tx, goal_id: str, todo_id: str) -> None:
    """Put ``todo_id`` in or out of ``todo_ready`` by its current row and its dependencies."""
    row = tx.one("SELECT status, priority, created_seq, depends_on FROM todos WHERE id = ? AND goal_id = ?",
                 (todo_id, goal_id))
    unblocked = row is not None and row["status"] == "open" and _deps_done(tx, goal_id, json.loads(row["depends_on"]))
    tx.execute("DELETE FROM todo_ready WHERE goal_id = ? AND todo_id = ?", (goal_id, todo_id))
    if unblocked:
        tx.execute("INSERT INTO todo_ready (goal_id, todo_id, priority, created_seq) VALUES (?, ?, ?, ?)",
                   (goal_id, todo_id, row["priority"], row["created_seq"]))


def added(tx, goal_id: str, todo_id: str, deps: list[str]) -> None:
    """A todo was added (or gained ``deps``): record its edges, then its place in the ready set."""
    for dep in dict.fromkeys(deps):
        tx.execute("INSERT INTO todo_deps (goal_id, todo_id, dep_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                   (goal_id, todo_id, dep))
    refresh(tx, goal_id, todo_id)


def resync(tx, goal_id: str, todo_id: str) -> None:
    """A todo row was rewritten as a whole (a repair put it back or edited its dependencies):
    its edges are made those of its ``depends_on`` again, then its place and its dependents'."""
    row = tx.one("SELECT depends_on FROM todos WHERE id = ? AND goal_id = ?", (todo_id, goal_id))
    tx.execute("DELETE FROM todo_deps WHERE goal_id = ? AND todo_id = ?", (goal_id, todo_id))
    if row is not None:
        for dep in dict.fromkeys(json.loads(row["depends_on"])):
            tx.execute("INSERT INTO todo_deps (goal_id, todo_id, dep_id) VALUES (?, ?, ?)", (goal_id, todo_id, dep))
    settled(tx, goal_id, todo_id)


def changed(tx, event, todo_id: str) -> None:
    """For the ``apply(tx, event)`` of a plugin's event kind that changed a todo row of the event's
    goal itself: bring the index up to date for that todo and those waiting on it (:func:`resync`)."""
    resync(tx, event.goal_id, todo_id)


def settled(tx, goal_id: str, todo_id: str) -> None:
    """``todo_id`` changed status: its own place, and that of every todo waiting on it."""
    refresh(tx, goal_id, todo_id)
    for r in tx.query("SELECT todo_id FROM todo_deps WHERE goal_id = ? AND dep_id = ?", (goal_id, todo_id)):
        refresh(tx, goal_id, r["todo_id"])


def first_ready(tx, goal_id: str, *, agent: str | None, now: str, exclude: set, limit: int) -> list[dict]:
    """The first ``limit`` todos rows of the ready set for ``agent`` at ``now``, in its order
    (priority, then creation), leaving out the ids in ``exclude`` (gated todos)."""
    sql = ("SELECT t.* FROM todo_ready r JOIN todos t ON t.id = r.todo_id"
           " WHERE r.goal_id = ? AND (t.claim_agent IS NULL OR t.claim_expires_at IS NULL OR t.claim_expires_at <= ?"
           "{own}) ORDER BY r.priority, r.created_seq LIMIT ?")
    own, params = ("", [goal_id, now]) if agent is None else (" OR t.claim_agent = ?", [goal_id, now, agent])
    found: list[dict] = []
    # Gated todos are few (one gate each): ask for that many more and drop them here.
    rows = tx.query(sql.format(own=own), (*params, limit + len(exclude)))
    for row in rows:
        if row["id"] not in exclude:
            found.append(row)
    return found[:limit]


def any_todo(tx, goal_id: str) -> bool:
    """Whether the goal has any todo at all (one index probe)."""
    return tx.one("SELECT 1 AS x FROM todos WHERE goal_id = ? LIMIT 1", (goal_id,)) is not None


def backfill(tx) -> int:
    """Schema step: the edges and the ready set of every todo. Returns the number of todos."""
    tx.execute("DELETE FROM todo_deps")
    tx.execute("DELETE FROM todo_ready")
    status = {}
    rows = tx.query("SELECT id, goal_id, status, priority, created_seq, depends_on FROM todos")
    for r in rows:
        status[(r["goal_id"], r["id"])] = r["status"]
    edges, ready = [], []
    for r in rows:
        deps = list(dict.fromkeys(json.loads(r["depends_on"])))
        edges += [(r["goal_id"], r["id"], d) for d in deps]
        if r["status"] == "open" and all(status.get((r["goal_id"], d)) == "done" for d in deps):
            ready.append((r["goal_id"], r["id"], r["priority"], r["created_seq"]))
    for start in range(0, len(edges), 10_000):
        tx.executemany("INSERT INTO todo_deps (goal_id, todo_id, dep_id) VALUES (?, ?, ?)", edges[start:start + 10_000])
    for start in range(0, len(ready), 10_000):
        tx.executemany("INSERT INTO todo_ready (goal_id, todo_id, priority, created_seq) VALUES (?, ?, ?, ?)",
                       ready[start:start + 10_000])
    return len(rows)
