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

from loopx.store.queries import projections as q
# The one definition of a free todo, named here too (loopx.views.needs_you, loopx.views.summary_all use it).
from loopx.store.queries.projections import free_params, free_sql  # noqa: F401

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
        for r in q.open_todos_naming(tx, goal_id, f'%"{ACTION_PREFIX}{name}"%'):
            if name in split(json.loads(r["depends_on"]))[1]:
                out.setdefault(r["id"], name)
    return out


def _deps_done(tx, goal_id: str, deps: list[str]) -> bool:
    deps = split(deps)[0]
    if not deps:
        return True
    return q.count_done(tx, goal_id, deps) == len(set(deps))


def refresh(tx, goal_id: str, todo_id: str) -> None:
    """Put ``todo_id`` in or out of ``todo_ready`` by its current row and its dependencies."""
    row = q.todo_readiness(tx, todo_id, goal_id)
    unblocked = row is not None and row["status"] == "open" and _deps_done(tx, goal_id, json.loads(row["depends_on"]))
    q.drop_ready(tx, goal_id, todo_id)
    if unblocked:
        q.insert_ready(tx, goal_id, todo_id, row["priority"], row["created_seq"])


def added(tx, goal_id: str, todo_id: str, deps: list[str]) -> None:
    """A todo was added (or gained ``deps``): record its edges, then its place in the ready set."""
    for dep in dict.fromkeys(split(deps)[0]):
        q.add_dep_edge(tx, goal_id, todo_id, dep)
    refresh(tx, goal_id, todo_id)


def resync(tx, goal_id: str, todo_id: str) -> None:
    """A todo row was rewritten as a whole (a repair put it back or edited its dependencies):
    its edges are made those of its ``depends_on`` again, then its place and its dependents'."""
    row = q.todo_depends_on(tx, todo_id, goal_id)
    q.drop_dep_edges(tx, goal_id, todo_id)
    if row is not None:
        for dep in dict.fromkeys(split(json.loads(row["depends_on"]))[0]):
            q.insert_dep_edge(tx, goal_id, todo_id, dep)
    settled(tx, goal_id, todo_id)


def changed(tx, event, todo_id: str) -> None:
    """For the ``apply(tx, event)`` of a plugin's event kind that changed a todo row of the event's
    goal itself: bring the index up to date for that todo and those waiting on it (:func:`resync`)."""
    resync(tx, event.goal_id, todo_id)


def settled(tx, goal_id: str, todo_id: str) -> None:
    """``todo_id`` changed status: its own place, and that of every todo waiting on it."""
    refresh(tx, goal_id, todo_id)
    for r in q.waiting_on(tx, goal_id, todo_id):
        refresh(tx, goal_id, r["todo_id"])


def claim_holds(tx, goal_id: str, todo_id: str, *, agent: str | None, now: str) -> bool:
    """Whether a claim keeps ``todo_id`` from ``agent`` at ``now`` (see :func:`free_sql`)."""
    return q.claim_held(tx, goal_id, todo_id, agent, now)


def first_ready(tx, goal_id: str, *, agent: str | None, now: str, exclude: set, limit: int | None) -> list[dict]:
    """The first ``limit`` (``None``: all) todos rows of the ready set for ``agent`` at ``now``, in
    its order (priority, then creation), leaving out the ids in ``exclude`` (gated todos); a todo
    a live claim holds (:func:`free_sql`) is left out too."""
    verified = getattr(tx, "_loopx_page", None)
    if (limit is not None and verified is not None and verified[:3] == (goal_id, agent, now)
            and (verified[3] >= limit + len(exclude) or len(verified[4]) < verified[3])):
        # The page loopx.ledger.state_macs.check_turn read and verified in this transaction, nothing
        # written since (loopx.ledger.registry.Writer forgets it on every event): the same rows, in order.
        return [row for row in verified[4][:limit + len(exclude)] if row["id"] not in exclude][:limit]
    # Gated todos are few (one gate each): ask for that many more and drop them here.
    page = q.ready_page(tx, goal_id, agent, now, None if limit is None else limit + len(exclude))
    found = [row for row in page if row["id"] not in exclude]
    return found if limit is None else found[:limit]


def any_todo(tx, goal_id: str) -> bool:
    """Whether the goal has any todo at all (one index probe)."""
    return q.has_todo(tx, goal_id)


def backfill(tx) -> int:
    """Schema step: the edges and the ready set of every todo. Returns the number of todos."""
    q.clear_ready_index(tx)
    status = {}
    rows = q.every_todo_readiness(tx)
    for r in rows:
        status[(r["goal_id"], r["id"])] = r["status"]
    edges, ready = [], []
    for r in rows:
        deps = list(dict.fromkeys(split(json.loads(r["depends_on"]))[0]))
        edges += [(r["goal_id"], r["id"], d) for d in deps]
        if r["status"] == "open" and all(status.get((r["goal_id"], d)) == "done" for d in deps):
            ready.append((r["goal_id"], r["id"], r["priority"], r["created_seq"]))
    for start in range(0, len(edges), 10_000):
        q.insert_dep_edges(tx, edges[start:start + 10_000])
    for start in range(0, len(ready), 10_000):
        q.insert_ready_rows(tx, ready[start:start + 10_000])
    return len(rows)
