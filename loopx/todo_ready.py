"""The ready set as an index, kept by the todo events, so should-run reads a page of it.

A todo is *unblocked* when it is open and every todo it depends on is done. Two goal tables
(``loopx.store.schema.GOAL_TABLES``), written only by the ``todo.*`` apply functions - the code
a replay runs, so a rebuild makes the same rows:

* ``todo_deps`` - one row per dependency edge ``(todo_id, dep_id)``, indexed by ``dep_id``: when a
  todo is done or reopened, the todos waiting on it are found without reading every todo.
* ``todo_ready`` - one row per unblocked todo, with its ``priority`` and ``created_seq``, indexed
  in the ready set's order.

What remains of readiness depends on the clock, on runs or on gates (a claim another agent holds
under a live lease for a run still open, a pending or rejected ``todo:ID`` gate: :func:`free_sql`)
and is filtered when the page is read
(:func:`first_ready`): a page costs the todos it shows plus those skipped for a live claim or a
gate, never the goal's whole list.

A todo's ``depends_on`` list holds what it needs: the todos before it (their ids) and the actions
that do it (``action:NAME``, :func:`split`). Only todos are dependency edges here; the actions
matter when a gate holds one back (:func:`naming_actions`) and when the todo is marked done.
"""

from __future__ import annotations

import json

ACTION_PREFIX = "action:"


def split(needs) -> tuple[list[str], list[str]]:
    """``(todo ids, action names)`` of a todo's ``depends_on`` list."""
    todos, actions = [], []
    for n in needs:
        if n.startswith(ACTION_PREFIX):
            actions.append(n[len(ACTION_PREFIX):])
        else:
            todos.append(n)
    return todos, actions


def naming_actions(tx, goal_id: str, names) -> dict[str, str]:
    """``{todo id: action name}`` for the open todos that name one of the actions ``names``
    (asked only for the actions a gate holds back, which are few)."""
    out: dict[str, str] = {}
    for name in dict.fromkeys(names):
        # The list is JSON text; LIKE finds the candidates, the parsed list decides.
        for r in tx.query("SELECT id, depends_on FROM todos WHERE goal_id = ? AND status = 'open'"
                          " AND depends_on LIKE ?", (goal_id, f'%"{ACTION_PREFIX}{name}"%')):
            if name in split(json.loads(r["depends_on"]))[1]:
                out.setdefault(r["id"], name)
    return out


def _deps_done(tx, goal_id: str, deps: list[str]) -> bool:
    deps = split(deps)[0]
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
    for dep in dict.fromkeys(split(deps)[0]):
        tx.execute("INSERT INTO todo_deps (goal_id, todo_id, dep_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                   (goal_id, todo_id, dep))
    refresh(tx, goal_id, todo_id)


def resync(tx, goal_id: str, todo_id: str) -> None:
    """A todo row was rewritten as a whole (a repair put it back or edited its dependencies):
    its edges are made those of its ``depends_on`` again, then its place and its dependents'."""
    row = tx.one("SELECT depends_on FROM todos WHERE id = ? AND goal_id = ?", (todo_id, goal_id))
    tx.execute("DELETE FROM todo_deps WHERE goal_id = ? AND todo_id = ?", (goal_id, todo_id))
    if row is not None:
        for dep in dict.fromkeys(split(json.loads(row["depends_on"]))[0]):
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


def free_sql(alias: str, agent: str | None) -> str:
    """The one definition of "no claim keeps this todo from ``agent``", as an SQL condition on
    the ``todos`` row ``alias``; its parameters are :func:`free_params`.

    A claim holds a todo while its lease is valid *and*, for a claim taken under a run, while
    that run is open and not expired: a claim left by a run that failed, finished or expired
    holds nothing (whoever asks next is offered the todo). The agent's own claims never hold it
    back from that agent.
    """
    own = "" if agent is None else f" OR {alias}.claim_agent = ?"
    return (f"({alias}.claim_agent IS NULL OR {alias}.claim_expires_at IS NULL OR {alias}.claim_expires_at <= ?"
            f" OR ({alias}.claim_run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM runs claim_run"
            f" WHERE claim_run.id = {alias}.claim_run_id AND claim_run.status = 'open'"
            f" AND claim_run.expires_at > ?)){own})")


def free_params(agent: str | None, now: str) -> tuple:
    """The parameters of :func:`free_sql`, in order."""
    return (now, now) if agent is None else (now, now, agent)


def claim_holds(tx, goal_id: str, todo_id: str, *, agent: str | None, now: str) -> bool:
    """Whether a claim keeps ``todo_id`` from ``agent`` at ``now`` (see :func:`free_sql`)."""
    row = tx.one(f"SELECT 1 AS held FROM todos t WHERE t.goal_id = ? AND t.id = ? AND NOT {free_sql('t', agent)}",
                 (goal_id, todo_id, *free_params(agent, now)))
    return row is not None


def first_ready(tx, goal_id: str, *, agent: str | None, now: str, exclude: set, limit: int | None) -> list[dict]:
    """The first ``limit`` (``None``: all) todos rows of the ready set for ``agent`` at ``now``, in
    its order (priority, then creation), leaving out the ids in ``exclude`` (gated todos); a todo
    a live claim holds (:func:`free_sql`) is left out too."""
    verified = getattr(tx, "_loopx_page", None)
    if (limit is not None and verified is not None and verified[:3] == (goal_id, agent, now)
            and (verified[3] >= limit + len(exclude) or len(verified[4]) < verified[3])):
        # The page loopx.state_macs.check_turn read and verified in this transaction, nothing
        # written since (loopx.registry.Writer forgets it on every event): the same rows, in order.
        return [row for row in verified[4][:limit + len(exclude)] if row["id"] not in exclude][:limit]
    sql = (f"SELECT t.* FROM todo_ready r JOIN todos t ON t.id = r.todo_id"
           f" WHERE r.goal_id = ? AND {free_sql('t', agent)} ORDER BY r.priority, r.created_seq")
    params: tuple = (goal_id, *free_params(agent, now))
    if limit is not None:
        # Gated todos are few (one gate each): ask for that many more and drop them here.
        sql += " LIMIT ?"
        params += (limit + len(exclude),)
    found = [row for row in tx.query(sql, params) if row["id"] not in exclude]
    return found if limit is None else found[:limit]


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
        deps = list(dict.fromkeys(split(json.loads(r["depends_on"]))[0]))
        edges += [(r["goal_id"], r["id"], d) for d in deps]
        if r["status"] == "open" and all(status.get((r["goal_id"], d)) == "done" for d in deps):
            ready.append((r["goal_id"], r["id"], r["priority"], r["created_seq"]))
    for start in range(0, len(edges), 10_000):
        tx.executemany("INSERT INTO todo_deps (goal_id, todo_id, dep_id) VALUES (?, ?, ?)", edges[start:start + 10_000])
    for start in range(0, len(ready), 10_000):
        tx.executemany("INSERT INTO todo_ready (goal_id, todo_id, priority, created_seq) VALUES (?, ?, ?, ?)",
                       ready[start:start + 10_000])
    return len(rows)
