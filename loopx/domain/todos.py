"""Todos: the goal's plan, with priorities, dependencies, and claims that carry a lease.

The *ready set* is what an agent may pick up now: open todos whose dependencies are all done,
that no unapproved gate holds, and that no other agent holds under a lease that has not expired.
A claim is a lease (an expiry) and an epoch; the epoch goes up each time a new agent takes the
todo, so a holder that lost its lease can be told so (``lease_lost``) when it reports back.

Users change todos at any time; executors only inside an open run of the goal (``--run-id``).
"""

from __future__ import annotations

import json

from loopx.ledger import log as ledger
from loopx.values.errors import LoopxError
from loopx.model import TODO_PRIORITIES, Claim, Todo, to_json
from loopx.ledger.registry import Registry
from loopx.values.validate import check_id, check_number, check_text, new_id

DEFAULT_TTL_SECONDS = 2700
MAX_TTL_SECONDS = 7 * 24 * 3600
MAX_DEPENDENCIES = 100
SETTLE = {"done": ("todo.done", "done"), "block": ("todo.blocked", "blocked"), "reopen": ("todo.reopened", "open")}


def todo_from_row(row: dict) -> Todo:
    """A :class:`Todo` from a ``todos`` row (the claim is spread over ``claim_*`` columns)."""
    from loopx.ledger.todo_ready import split

    claim = None
    deps, actions = split(json.loads(row["depends_on"]))
    if row["claim_agent"] is not None:
        claim = Claim(agent=row["claim_agent"], run_id=row["claim_run_id"],
                      expires_at=row["claim_expires_at"], epoch=row["epoch"])
    return Todo(
        id=row["id"],
        goal_id=row["goal_id"],
        text=row["text"],
        priority=row["priority"],
        depends_on=deps,
        status=row["status"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        note=row["note"],
        claim=claim,
        epoch=row["epoch"],
        actions=actions,
    )


def list_todos(tx, goal_id: str) -> list[Todo]:
    """Every todo of the goal, by priority (P0 first) then creation order."""
    from loopx.store.queries.todos import goal_todos

    return [todo_from_row(r) for r in goal_todos(tx, goal_id)]


def load_todo(tx, goal_id: str, todo_id: str) -> Todo:
    """The todo ``todo_id`` of ``goal_id`` (``todo_not_found`` otherwise)."""
    from loopx.store.queries.todos import todo_row

    row = todo_row(tx, goal_id, todo_id)
    if row is None:
        raise LoopxError("todo_not_found", f"goal {goal_id} has no todo {todo_id}")
    return todo_from_row(row)


def count(tx, goal_id: str) -> int:
    """How many todos the goal has, whatever their status."""
    from loopx.store.queries.todos import todo_count

    return todo_count(tx, goal_id)


def _gated_todos(tx, goal_id: str) -> dict[str, str]:
    """``{todo id: status}`` of the open todos an unapproved gate holds (:func:`held_by_gates`)."""
    return {t: g.status for t, (g, _action) in held_by_gates(tx, goal_id).items()}


def held_by_gates(tx, goal_id: str) -> dict[str, tuple]:
    """``{todo id: (Gate, action name or None)}``: the todos an unapproved gate holds - a gate on
    ``todo:ID``, or one that holds back an action the todo names (its work cannot run). A pending
    gate is named before a rejected one (it is the one a user can still decide)."""
    from loopx.ledger import todo_ready
    from loopx.domain.actions import gated, list_actions
    from loopx.domain.gates import blocking

    found = blocking(tx, goal_id)
    out: dict[str, tuple] = {t: (g, None) for t, g in found["todos"].items()}
    held = gated(tx, goal_id, list_actions(tx, goal_id), found)
    if held:
        for todo_id, name in todo_ready.naming_actions(tx, goal_id, held).items():
            gate = held[name]
            if todo_id not in out or (out[todo_id][0].status == "rejected" and gate.status == "pending"):
                out[todo_id] = (gate, name)
    return out


def held_line(gate, action: str | None) -> str:
    """Why a gate holds a todo, for people: ``blocked by gate G (pending): action publish is held back``."""
    text = f"blocked by gate {gate.id} ({gate.status}: {gate.title})"
    return text + (f": action {action} is held back" if action else "")


def _statuses(tx, goal_id: str, ids) -> dict[str, str]:
    """``{id: status}`` of the goal's todos among ``ids`` (a todo's dependencies: not the whole list)."""
    ids = list(dict.fromkeys(ids))
    if not ids:
        return {}
    from loopx.store.queries.todos import todo_statuses

    return {r["id"]: r["status"] for r in todo_statuses(tx, goal_id, ids)}


def why_not_ready(todo: Todo, *, statuses: dict[str, str], gated: dict[str, tuple], held: bool) -> tuple[str, str] | None:
    """``None`` when ``todo`` is ready; else ``(code, message)`` saying why not. ``gated``: what
    :func:`held_by_gates` returns; ``held``: whether a claim keeps it (:func:`loopx.ledger.todo_ready.claim_holds`)."""
    if todo.status != "open":
        return "todo_not_open", f"todo {todo.id} is {todo.status}"
    waiting = [d for d in todo.depends_on if statuses.get(d) != "done"]
    if waiting:
        return "todo_not_ready", f"todo {todo.id} waits for {', '.join(waiting)} to be done"
    if todo.id in gated:
        gate, action = gated[todo.id]
        code = "gate_pending" if gate.status == "pending" else "todo_not_ready"
        return code, f"todo {todo.id} is {held_line(gate, action)}"
    if held:
        c = todo.claim
        return "todo_claimed", f"todo {todo.id} is claimed by {c.agent} until {c.expires_at} (epoch {c.epoch})"
    return None


def ready(tx, goal_id: str, *, agent: str | None, now: str) -> list[Todo]:
    """The ready set for ``agent`` at ``now``, by priority (P0 first) then creation order.

    Open, every dependency done, no pending or rejected gate on ``todo:ID``, and not held by
    another agent's claim (:func:`loopx.ledger.todo_ready.free_sql`: a lease that expires after ``now``,
    for a run still open; the agent's own claims stay in). The same set, read the same way, as
    the page ``quota should-run`` offers.
    """
    from loopx.ledger import todo_ready

    rows = todo_ready.first_ready(tx, goal_id, agent=agent, now=now, exclude=set(_gated_todos(tx, goal_id)),
                                  limit=None)
    return [todo_from_row(r) for r in rows]


def _run_for(w, run_id: str | None, *, fresh: bool):
    """Check the run a todo command names; executors must name an open run of this goal."""
    if run_id is None:
        if ledger.role(w.actor) == ledger.EXECUTOR:
            raise LoopxError("run_not_open",
                             "an executor changes todos only inside an open run: pass --run-id")
        return None
    from loopx.domain import runs

    if ledger.role(w.actor) == ledger.EXECUTOR and fresh:
        # The goal row the writer locked is current until it writes (read once, not twice).
        return runs.check_fresh(w.tx, run_id, goal_id=w.goal_id, now=w.at,
                                goal_row=None if w.events else w.goal)
    run = runs.load_run(w.tx, run_id)
    if run.goal_id != w.goal_id:
        raise LoopxError("run_not_found", f"run {run_id} belongs to goal {run.goal_id}, not {w.goal_id}")
    if ledger.role(w.actor) == ledger.EXECUTOR and runs.state(run, w.at) != "open":
        raise LoopxError("run_not_open", f"run {run_id} is {runs.state(run, w.at)}; ask `loopx quota should-run`")
    return run


def _agent_for(run, agent: str | None) -> str | None:
    if agent is not None:
        agent = check_text(agent, what="--agent", limit="agent")
    if run is not None:
        from loopx.domain.runs import check_owner

        return check_owner(run, agent).agent
    return agent


def _check_deps(tx, goal_id: str, deps) -> list[str]:
    deps = list(dict.fromkeys(check_id("todo", d, option="--depends-on") for d in deps))
    if len(deps) > MAX_DEPENDENCIES:
        raise LoopxError("invalid_argument", f"at most {MAX_DEPENDENCIES} dependencies")
    for d in deps:
        load_todo(tx, goal_id, d)
    return deps


def _check_priority(priority: str) -> str:
    if priority not in TODO_PRIORITIES:
        raise LoopxError("invalid_argument", f"--priority must be one of {', '.join(TODO_PRIORITIES)}")
    return priority


def _check_actions(tx, goal_id: str, names) -> list[str]:
    """The actions a todo names: each an action of the goal (``action_not_found`` otherwise)."""
    from loopx.domain.actions import load_action
    from loopx.values.validate import check_name

    names = list(dict.fromkeys(check_name(n, what="--action") for n in names))
    if len(names) > MAX_DEPENDENCIES:
        raise LoopxError("invalid_argument", f"at most {MAX_DEPENDENCIES} actions")
    for n in names:
        load_action(tx, goal_id, n)
    return names


def add_in(w, *, text: str, priority: str = "P2", depends_on=(), todo_id: str | None = None,
           run_id: str | None = None, actions=()) -> str:
    """Inside a mutation: add a todo to the writer's goal (its dependencies and the ``actions`` that
    do it must exist; an executor names its open run); returns the todo id. :func:`add` is this in
    a transaction of its own."""
    from loopx.ledger.todo_ready import ACTION_PREFIX

    text = check_text(text, what="--text", limit="text")
    _check_priority(priority)
    todo_id = check_id("todo", todo_id) if todo_id else new_id("todo")
    _run_for(w, check_id("run", run_id) if run_id is not None else None, fresh=False)
    deps = _check_deps(w.tx, w.goal_id, depends_on)
    # The actions that do it are kept in the same list as `action:NAME` (loopx.ledger.todo_ready.split).
    deps += [ACTION_PREFIX + n for n in _check_actions(w.tx, w.goal_id, actions)]
    w.emit("todo.added", {"todo_id": todo_id, "text": text, "priority": priority, "depends_on": deps})
    return todo_id


def add(reg: Registry, actor: str, *, goal_id: str, text: str, depends_on=(), priority: str = "P2",
        run_id: str | None = None, operation_id: str | None = None, actions=()) -> dict:
    """Add a todo to the goal's plan; returns it. ``actions``: the goal's actions that do it (a turn
    on the todo runs exactly those, and the todo is done only when they ran)."""
    check_id("goal", goal_id)
    text = check_text(text, what="--text", limit="text")  # refused before the transaction begins
    _check_priority(priority)
    if run_id is not None:
        check_id("run", run_id)
    todo_id = new_id("todo")

    def work(w):
        add_in(w, text=text, priority=priority, depends_on=depends_on, todo_id=todo_id, run_id=run_id,
               actions=actions)
        return to_json(load_todo(w.tx, goal_id, todo_id))

    request = {"op": "todo.add", "goal": goal_id, "text": text, "priority": priority,
               "depends_on": list(depends_on), "run": run_id}
    if actions:
        request["actions"] = list(actions)
    return reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id, request=request)


def depend(reg: Registry, actor: str, *, goal_id: str, todo_id: str, depends_on, run_id: str | None = None,
           operation_id: str | None = None) -> dict:
    """Make a todo wait for more todos; a dependency cycle is refused (``dependency_cycle``)."""
    check_id("goal", goal_id)
    check_id("todo", todo_id)
    if not depends_on:
        raise LoopxError("invalid_argument", "name at least one --on todo")
    if run_id is not None:
        check_id("run", run_id)

    def work(w):
        _run_for(w, run_id, fresh=False)
        todo = load_todo(w.tx, goal_id, todo_id)
        deps = _check_deps(w.tx, goal_id, depends_on)
        graph = {t.id: t.depends_on for t in list_todos(w.tx, goal_id)}
        for d in deps:
            path = _path(graph, d, todo_id)
            if path is not None:
                raise LoopxError("dependency_cycle",
                                 f"{todo_id} cannot wait for {d}: " + " -> ".join([todo_id, *path]))
        new = [d for d in deps if d not in todo.depends_on]
        if new:
            w.emit("todo.depends", {"todo_id": todo_id, "depends_on": new})
        return to_json(load_todo(w.tx, goal_id, todo_id))

    return reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id,
                      request={"op": "todo.depend", "goal": goal_id, "todo": todo_id,
                               "depends_on": list(depends_on), "run": run_id})


def _path(graph: dict[str, list[str]], start: str, target: str) -> list[str] | None:
    """A dependency path from ``start`` to ``target`` (both included), or ``None``."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        if node == target:
            return path
        if node in seen:
            continue
        seen.add(node)
        stack.extend((n, [*path, n]) for n in graph.get(node, ()))
    return None


def claim(reg: Registry, actor: str, *, goal_id: str, todo_id: str, agent: str | None = None,
          run_id: str | None = None, ttl_seconds: float = DEFAULT_TTL_SECONDS,
          operation_id: str | None = None) -> dict:
    """Claim a ready todo for ``agent`` under a lease of ``ttl_seconds``.

    The holder claiming again extends its lease (same epoch); another agent gets
    ``todo_claimed`` until the lease expires, then takes it over with the next epoch.
    """
    from loopx.values import clock

    check_id("goal", goal_id)
    check_id("todo", todo_id)
    if run_id is not None:
        check_id("run", run_id)
    ttl = check_number(ttl_seconds, what="--ttl-seconds", minimum=1, maximum=MAX_TTL_SECONDS)

    def work(w):
        run = _run_for(w, run_id, fresh=True)
        who = _agent_for(run, agent)
        if who is None:
            raise LoopxError("invalid_argument", "say who claims the todo: --agent NAME (or --run-id)")
        todo = load_todo(w.tx, goal_id, todo_id)
        from loopx.ledger import todo_ready

        refusal = why_not_ready(todo, statuses=_statuses(w.tx, goal_id, todo.depends_on),
                                gated=held_by_gates(w.tx, goal_id),
                                held=todo_ready.claim_holds(w.tx, goal_id, todo_id, agent=who, now=w.at))
        if refusal is not None:
            raise LoopxError(*refusal)
        same = todo.claim is not None and todo.claim.agent == who
        epoch = todo.epoch if same else todo.epoch + 1
        w.emit("todo.claimed", {"todo_id": todo_id, "agent": who, "run_id": run_id, "epoch": epoch,
                                "expires_at": clock.add_seconds(w.at, ttl)})
        return to_json(load_todo(w.tx, goal_id, todo_id))

    return reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id,
                      request={"op": "todo.claim", "goal": goal_id, "todo": todo_id, "agent": agent,
                               "run": run_id, "ttl": ttl})


def settle_in(w, verb: str, *, todo_id: str, note: str | None = None, run_id: str | None = None,
              agent: str | None = None, epoch: int | None = None) -> None:
    """Inside a mutation: ``done``, ``block`` or ``reopen`` a todo of the writer's goal, under the
    rules of :func:`settle` (``todo_not_open``, ``lease_lost``, ``step_failed``...)."""
    from loopx.store.queries.goals import goal_status

    if verb not in SETTLE:
        raise LoopxError("invalid_argument", f"a todo is done, blocked or reopened, not {verb!r}")
    kind, _target = SETTLE[verb]
    check_id("todo", todo_id)
    note = check_text(note, what="--note", limit="note", required=False)
    epoch = check_number(epoch, what="--epoch", minimum=0, integer=True)
    goal_id = w.goal_id
    # Settling a todo records what already happened, like `evidence add`: never refused
    # for a stale contract, only for a run that is no longer open.
    run = _run_for(w, check_id("run", run_id) if run_id is not None else None, fresh=False)
    # The goal row the writer locked, unless something this mutation wrote came first.
    status = w.goal["status"] if w.goal is not None and not w.events else goal_status(w.tx, goal_id)
    if status == "closed":
        if run is None or run.status != "open":
            raise LoopxError("goal_closed", f"goal {goal_id} is closed")
    who = _agent_for(run, agent)
    todo = _check_status(load_todo(w.tx, goal_id, todo_id), verb)
    if epoch is not None and epoch != todo.epoch:
        raise LoopxError("lease_lost", f"your claim on todo {todo_id} (epoch {epoch}) was lost; "
                         f"it is at epoch {todo.epoch}" + _holder(todo))
    if who is not None and todo.claim is not None and todo.claim.agent != who:
        raise LoopxError("lease_lost", f"{who} does not hold todo {todo_id}" + _holder(todo))
    if verb == "done" and run is not None:
        _check_steps(w.tx, run, todo_id)
    w.emit(kind, {"todo_id": todo_id, "note": note} if note else {"todo_id": todo_id})


def _check_status(todo: Todo, verb: str) -> Todo:
    """The one rule for which todos a verb applies to: ``reopen`` a done or blocked one, the others
    an open one (``todo_not_open``)."""
    if verb == "reopen":
        if todo.status == "open":
            raise LoopxError("todo_not_open", f"todo {todo.id} is already open")
    elif todo.status != "open":
        raise LoopxError("todo_not_open", f"todo {todo.id} is {todo.status}; reopen it first")
    return todo


def done_in(w, *, todo_id: str, note: str | None = None) -> None:
    """Inside a mutation: mark an open todo of the writer's goal done (``todo_not_open`` otherwise),
    for work a capability did itself: the status rule of :func:`settle`, without its caller's
    rules (no agent, epoch or run is named; the capability checks a live claim itself)."""
    note = check_text(note, what="--note", limit="note", required=False)
    _check_status(load_todo(w.tx, w.goal_id, check_id("todo", todo_id)), "done")
    w.emit("todo.done", {"todo_id": todo_id, "note": note} if note else {"todo_id": todo_id})


def block_in(w, *, todo_id: str, note: str | None = None) -> None:
    """Inside a mutation: set an open todo of the writer's goal aside as ``blocked`` (``todo_not_open``
    otherwise), for a capability whose todo can no longer be done as asked (Issue-Fix's publish of
    a commit a user rejected): never done, out of the ready set until someone reopens it."""
    note = check_text(note, what="--note", limit="note", required=False)
    _check_status(load_todo(w.tx, w.goal_id, check_id("todo", todo_id)), "block")
    w.emit("todo.blocked", {"todo_id": todo_id, "note": note} if note else {"todo_id": todo_id})


def reopen_in(w, *, todo_id: str, note: str | None = None) -> None:
    """Inside a mutation: open a done or blocked todo of the writer's goal again, unclaimed, for a
    capability whose own work found it undone (as :func:`done_in`: no caller's rules). An open one
    stays as it is (nothing written): safe to repeat, unlike ``todo reopen``."""
    note = check_text(note, what="--note", limit="note", required=False)
    if load_todo(w.tx, w.goal_id, check_id("todo", todo_id)).status != "open":
        w.emit("todo.reopened", {"todo_id": todo_id, "note": note} if note else {"todo_id": todo_id})


def settle(reg: Registry, actor: str, verb: str, *, goal_id: str, todo_id: str, note: str | None = None,
           run_id: str | None = None, agent: str | None = None, epoch: int | None = None,
           operation_id: str | None = None) -> dict:
    """``done``, ``block`` or ``reopen`` a todo, with an optional note.

    When the caller says who it is (``--agent``, or the agent of ``--run-id``) and the todo is
    now held by another agent, or ``epoch`` is not the current claim epoch, the caller's lease
    was lost: ``lease_lost``, and nothing changes. A user without an agent decides freely.
    """
    if verb not in SETTLE:
        raise LoopxError("invalid_argument", f"a todo is done, blocked or reopened, not {verb!r}")
    check_id("goal", goal_id)
    check_id("todo", todo_id)
    note = check_text(note, what="--note", limit="note", required=False)  # refused before the transaction
    if run_id is not None:
        check_id("run", run_id)
    epoch = check_number(epoch, what="--epoch", minimum=0, integer=True)

    def work(w):
        settle_in(w, verb, todo_id=todo_id, note=note, run_id=run_id, agent=agent, epoch=epoch)
        return to_json(load_todo(w.tx, goal_id, todo_id))

    # Marking a todo done under a run records what happened in it, like `evidence add`: still
    # accepted when a step of that run closed the goal (Issue-Fix's publish does). Nothing else
    # changes the todos of a closed goal.
    return reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id,
                      allow_closed=verb == "done" and run_id is not None,
                      request={"op": f"todo.{verb}", "goal": goal_id, "todo": todo_id, "note": note,
                               "run": run_id, "agent": agent, "epoch": epoch})


def _check_steps(tx, run, todo_id: str) -> None:
    """Refuse (``step_failed``) to mark a todo done under a run whose ``do`` steps did not all succeed."""
    from loopx.domain import runs
    from loopx.values import steps

    res = runs.run_results(tx, run)
    _check_own_actions(tx, run, todo_id, res)
    bad = [r for r in res if r["status"] != "ok"]
    if bad:
        raise LoopxError("step_failed", f"todo {todo_id} stays open: " + "; ".join(steps.describe(r) for r in bad)
                         + f" in run {run.id}. Run the step again, or finish the run "
                         f"(`loopx run finish --run-id {run.id}`): its hand-off will say why")


def _check_own_actions(tx, run, todo_id: str, res: list[dict]) -> None:
    """Refuse to mark a todo done under a run in which an action it names did not run and succeed:
    ``gate_pending`` when a gate held the action back (the todo stays open, blocked by that gate),
    ``step_failed`` otherwise."""
    todo = load_todo(tx, run.goal_id, todo_id)
    if not todo.actions:
        return
    ran = {r["step"]: r for r in res}
    for name in todo.actions:
        r = ran.get(f"action:{name}")
        if r is not None and r["status"] == "ok":
            continue
        if r is None:
            held = held_by_gates(tx, run.goal_id).get(todo_id)
            if held is not None:
                gate, _ = held
                code = "gate_pending" if gate.status == "pending" else "step_failed"
                raise LoopxError(code, f"todo {todo_id} stays open: {held_line(gate, held[1] or name)}; "
                                 f"its action {name} was not a step of run {run.id}")
            raise LoopxError("step_failed", f"todo {todo_id} stays open: its action {name} was not a step of "
                             f"run {run.id}")
        # A listed step that failed or never ran: the general check below says which.


def _holder(todo: Todo) -> str:
    c = todo.claim
    return f"; held by {c.agent} until {c.expires_at} (epoch {c.epoch})" if c else ""


def list_for(reg: Registry, goal_id: str, *, ready_only: bool = False, agent: str | None = None) -> list[dict]:
    """``todo list``: the goal's todos (only the ready set for ``agent`` with ``ready_only``)."""
    from loopx.values import clock
    from loopx.domain.goals import load_goal

    check_id("goal", goal_id)
    if agent is not None:
        agent = check_text(agent, what="--agent", limit="agent")
    with reg.read() as tx:
        load_goal(tx, goal_id)
        found = ready(tx, goal_id, agent=agent, now=clock.now()) if ready_only else list_todos(tx, goal_id)
        held = held_by_gates(tx, goal_id) if not ready_only else {}
        return [with_hold(to_json(t), held) for t in found]


def with_hold(todo: dict, held: dict) -> dict:
    """A todo's JSON with ``blocked_by`` (the gate holding it, from :func:`held_by_gates`) when open and held."""
    found = held.get(todo["id"]) if todo["status"] == "open" else None
    if found is not None:
        gate, action = found
        todo["blocked_by"] = {"gate_id": gate.id, "status": gate.status, "action": action,
                              "text": held_line(gate, action)}
    return todo
