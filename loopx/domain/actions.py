"""Actions: the commands a user allowed for a goal, and ``exec``, which runs one under a run.

``action add`` is user-only. A contract lists each allowed, ungated action as a ``do`` step
``loopx exec --run-id R --agent A --action NAME`` (and a capability's command as
``loopx exec --run-id R --agent A -- loopx CMD ...``); ``exec`` runs only what a step of the
run's (fresh) contract runs and refuses anything else with ``action_not_allowed`` before any
process starts. What ran is recorded as the step's evidence: kind ``command``, written by the
core, naming the step.
"""

from __future__ import annotations

import json
import shlex

from loopx.ledger import log as ledger
from loopx.values.errors import LoopxError
from loopx.model import to_json
from loopx.ledger.registry import Registry
from loopx.values.validate import check_id, check_name, check_number

MAX_ARGS = 256
MAX_ARGV_BYTES = 8 * 1024
DEFAULT_TIMEOUT = 600.0
MAX_TIMEOUT = 7 * 24 * 3600.0


def action_from_row(row: dict):
    """A :class:`loopx.model.Action` from an ``actions`` row."""
    from loopx.model import Action

    return Action(goal_id=row["goal_id"], name=row["name"], argv=json.loads(row["argv"]),
                  created_at=row["created_at"], source=row["source"], gate_id=row.get("gate_id"))


def list_actions(tx, goal_id: str) -> list:
    """Every action of the goal, in the order they were added."""
    from loopx.store.queries.gates import goal_actions

    rows = goal_actions(tx, goal_id)
    return [action_from_row(r) for r in rows]


def action_rows(tx, goal_id: str) -> list:
    """The same as :func:`list_actions` (kept for callers of the old name)."""
    return list_actions(tx, goal_id)


def gated(tx, goal_id: str, actions: list, blocking: dict) -> dict[str, object]:
    """``{action name: Gate}`` for the actions an unapproved gate holds back."""
    from loopx.domain.gates import gate_from_row

    held = dict(blocking["actions"])
    own = {a.gate_id for a in actions if a.gate_id and a.name not in held}
    if own:
        from loopx.store.queries.gates import unapproved_gates_unordered

        rows = {r["id"]: r for r in unapproved_gates_unordered(tx, goal_id)}
        for a in actions:
            if a.name not in held and a.gate_id in rows:
                held[a.name] = gate_from_row(rows[a.gate_id])
    return held


def check_argv(argv) -> list[str]:
    """A command line: 1-256 arguments of valid UTF-8 text without NUL, 8 KiB at most in all."""
    argv = list(argv or ())
    if not argv:
        raise LoopxError("invalid_argument", "give the command after `--`, e.g. `-- pytest -q`")
    if len(argv) > MAX_ARGS:
        raise LoopxError("invalid_argument", f"a command has at most {MAX_ARGS} arguments")
    size = 0
    for arg in argv:
        if not isinstance(arg, str) or "\x00" in arg:
            raise LoopxError("invalid_argument", "command arguments must be text without NUL characters")
        try:
            size += len(arg.encode("utf-8"))
        except UnicodeEncodeError:
            raise LoopxError("invalid_argument", "command arguments must be valid UTF-8") from None
    if not argv[0]:
        raise LoopxError("invalid_argument", "the command name must not be empty")
    if size > MAX_ARGV_BYTES:
        raise LoopxError("invalid_argument", f"the command is {size} bytes; the limit is {MAX_ARGV_BYTES}")
    return argv


def add_in(w, *, name: str, argv, gate_id: str | None = None, source: str | None = None) -> None:
    """Inside a user's mutation: allow a command on the writer's goal under ``name`` (the gate, if
    named, must exist: ``gate_not_found``). :func:`add` is this in a transaction of its own."""
    check_name(name, what="--name")
    argv = check_argv(argv)
    if ledger.role(w.actor) != ledger.USER:
        raise LoopxError("actor_forbidden", f"only a user may allow commands; {w.actor} may not add an action")
    body = {"name": name, "argv": argv}
    if gate_id is not None:
        from loopx.domain.gates import load_gate

        load_gate(w.tx, w.goal_id, check_id("gate", gate_id))
        body["gate_id"] = gate_id
    if source is not None:
        body["source"] = source
    w.emit("action.added", body)


def add(reg: Registry, actor: str, *, goal_id: str, name: str, argv, gate_id: str | None = None,
        operation_id: str | None = None) -> dict:
    """Allow a command for a goal under ``name`` (user only); adding a name again replaces it."""
    check_id("goal", goal_id)
    check_name(name, what="--name")  # refused before the transaction begins
    argv = check_argv(argv)
    if gate_id is not None:
        check_id("gate", gate_id)
    if ledger.role(actor) != ledger.USER:
        raise LoopxError("actor_forbidden", f"only a user may allow commands; {actor} may not add an action")

    def work(w):
        add_in(w, name=name, argv=argv, gate_id=gate_id)
        return to_json(load_action(w.tx, goal_id, name))

    return reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id,
                      request={"op": "action.add", "goal": goal_id, "name": name, "argv": argv, "gate": gate_id})


def remove(reg: Registry, actor: str, *, goal_id: str, name: str, operation_id: str | None = None) -> dict:
    """Take an action off the goal's allow-list (user only)."""
    check_id("goal", goal_id)
    check_name(name, what="--name")
    if ledger.role(actor) != ledger.USER:
        raise LoopxError("actor_forbidden", f"only a user may change the allow-list; {actor} may not")

    def work(w):
        gone = to_json(load_action(w.tx, goal_id, name))
        w.emit("action.removed", {"name": name})
        return gone

    return reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id,
                      request={"op": "action.remove", "goal": goal_id, "name": name})


def load_action(tx, goal_id: str, name: str):
    """The action ``name`` of ``goal_id`` (``action_not_found`` otherwise)."""
    from loopx.store.queries.gates import action_row

    row = action_row(tx, goal_id, name)
    if row is None:
        raise LoopxError("action_not_found", f"goal {goal_id} has no action {name}")
    return action_from_row(row)


def list_for(reg: Registry, goal_id: str) -> list[dict]:
    """``action list``: each action with the gate holding it back, if any."""
    from loopx.domain.gates import blocking
    from loopx.domain.goals import load_goal

    check_id("goal", goal_id)
    with reg.read() as tx:
        load_goal(tx, goal_id)
        actions = list_actions(tx, goal_id)
        held = gated(tx, goal_id, actions, blocking(tx, goal_id))
        out = []
        for a in actions:
            item = to_json(a)
            gate = held.get(a.name)
            item["held_by"] = None if gate is None else {"gate_id": gate.id, "status": gate.status}
            out.append(item)
        return out


def authorize(tx, run_id: str, *, action: str | None = None, argv=None) -> tuple[object, str | None, list[str], str]:
    """``(run, action name or None, argv, step id)`` if a ``do`` step of the run's fresh contract
    runs it, else a refusal.

    The steps decide (:func:`loopx.values.steps.exec_target`): ``--action NAME`` must be a step's
    action, and an exact command must be a step's command or the argv of a step's action.
    ``run_not_open`` / ``contract_stale`` come from :func:`loopx.domain.runs.check_fresh`;
    ``action_not_allowed`` when no step of the contract runs it.
    """
    from loopx.domain import runs
    from loopx.values import steps

    if (action is None) == (argv is None):
        raise LoopxError("invalid_argument", "give either --action NAME or a command after `--`, not both")
    run = runs.check_fresh(tx, run_id)
    _check_integrity(tx, run)
    doc = runs.load_contract(tx, run.contract_id)
    targets = [(s["id"], steps.exec_target(s)) for s in steps.of(doc)]
    by_action = {t[1]: step_id for step_id, t in targets if t and t[0] == "action"}
    allowed = {a.name: a for a in list_actions(tx, run.goal_id) if a.name in by_action}
    if action is not None:
        check_name(action, what="--action")
        if action not in allowed:
            raise LoopxError("action_not_allowed",
                             f"the contract of run {run_id} does not allow action {action!r}"
                             f" (allowed: {', '.join(sorted(allowed)) or 'none'})")
        return run, action, allowed[action].argv, by_action[action]
    argv = check_argv(argv)
    for a in allowed.values():
        if a.argv == argv:
            return run, a.name, argv, by_action[a.name]
    step_id = steps.command_step(doc, argv)
    if step_id is not None:  # a capability's command
        return run, None, argv, step_id
    raise LoopxError("action_not_allowed",
                     f"the contract of run {run_id} does not allow `{shlex.join(argv)[:200]}`; nothing was run")


def _check_integrity(tx, run) -> None:
    """Refuse (``integrity_mismatch``) to run anything for a goal whose ledger, state or open runs'
    contracts fail their keyed check: an edited contract must never widen what ``exec`` runs."""
    from loopx.values import clock
    from loopx.ledger import integrity

    # The head, the digest's tag and the change log, then the goal's open runs and their contracts
    # (with its gates, actions and usage) each against its MAC: one statement each.
    problems = integrity.verify_head(tx, run.goal_id) or integrity.verify_turn_rows(
        tx, run.goal_id, agent=None, now=clock.now(), limit=0)
    if problems:
        import shlex

        from loopx.domain import repairs

        codes = ", ".join(sorted({p.code for p in problems}))
        offered = repairs.advice(run.goal_id)
        raise LoopxError("integrity_mismatch", f"goal {run.goal_id} fails its integrity check ({codes}): nothing was"
                         " run; `loopx quota should-run` answers repair"
                         + (f" (`{shlex.join(offered[0])}`)" if offered else ""))


def time_left(tx, run) -> float:
    """Seconds ``run`` may still work: the smaller of its remaining lease and its goal's
    remaining wall-clock budget (other open runs' reservations and this run's time so far
    taken out). Executor providers bound their work by it too."""
    from loopx.values import clock
    from loopx.values.clock import seconds_between
    from loopx.domain.goals import load_goal
    from loopx.domain.runs import open_runs
    from loopx.domain.usage import remaining, usage

    now = clock.now()
    lease = seconds_between(now, run.expires_at)
    left = remaining(load_goal(tx, run.goal_id), usage(tx, run.goal_id))["wall_seconds"]
    if left is None:
        return max(0.0, lease)
    # What the goal's open runs will be charged: others their whole lease (reserved when they
    # opened), this one the time it has used so far.
    committed = sum(seconds_between(r.opened_at, r.expires_at if r.id != run.id else now)
                    for r in open_runs(tx, run.goal_id, now))
    return max(0.0, min(lease, left - committed))


def execute(reg: Registry, actor: str, *, run_id: str, action: str | None = None, argv=None,
            timeout: float = DEFAULT_TIMEOUT, cwd: str | None = None, agent: str | None = None) -> dict:
    """Run an allowed action or command under ``run_id`` and record the result as evidence.

    The child runs with ``LOOPX_ACTOR=executor``, ``LOOPX_RUN_ID``, ``LOOPX_GOAL_ID``,
    ``LOOPX_AGENT`` and the registry in its environment; after ``timeout`` seconds it (and its
    process group) is killed. The result is the step's own evidence: kind ``command``, written
    by the core (so no agent can forge it), naming the step, who ran it (``by``), the exit code,
    duration, output tail and output sha256. ``agent``: who runs it (``run_not_yours`` if the
    run is another agent's).
    """
    import os

    from loopx.domain import evidence, runs
    from loopx.sandbox import interrupt, process, selfrun
    from loopx.ledger import step_journal
    from loopx.sandbox.process import run_command

    check_id("run", run_id)
    timeout = float(check_number(timeout, what="--timeout", minimum=0.001, maximum=MAX_TIMEOUT))
    if actor == "dashboard":
        raise LoopxError("actor_forbidden", "the dashboard never writes")
    with reg.read() as tx:
        run, name, command, step_id = authorize(tx, run_id, action=action, argv=argv)
        bound = time_left(tx, run)
    runs.check_owner(run, agent)
    # Never past the run's lease nor the goal's wall-clock budget (whichever ends first).
    timeout = max(0.001, min(timeout, bound))
    # The step's claim and its recorded start, in one transaction: a second exec of this step
    # under this run (any process, any machine) is refused here, before anything runs.
    from loopx.domain.claims import claim_step

    claim_step(reg, run_id=run.id, step_id=step_id or name, action=name, by=actor, agent=agent)
    env = {"LOOPX_ACTOR": "executor", "LOOPX_RUN_ID": run.id, "LOOPX_GOAL_ID": run.goal_id,
           "LOOPX_AGENT": run.agent, "LOOPX_REGISTRY": reg.store.url, "LOOPX_STEP_ID": step_id or name}
    # A capability step runs the very LoopX that runs this exec, whatever PATH says, started as
    # LoopX starts itself (loopx.sandbox.selfrun): isolated, so nothing in the action's directory is imported.
    child = selfrun.argv(command[1:]) if command[0] == "loopx" else command
    # Journal first (loopx/ledger/step_journal.py): a step whose result cannot be recorded is still
    # recorded later, as "ran, result unknown"; no room for the journal, no step.
    intent = step_journal.intend(reg, run=run, step=step_id, action=name, argv=command, by=actor)
    try:
        step = process.STEP.get()
        broker = getattr(step, "broker", None) if command[0] == "loopx" else None
        if broker is not None:
            # Under a turn's broker a capability's step is a request to that broker whichever way it
            # goes: served here, without a confined client, its watcher and a second `loopx`.
            result = broker.run_step(command[1:], cwd=cwd or process.caller_dir() or os.getcwd(),
                                     step_id=step_id or name)
        else:
            result = run_command(child, env=env, timeout=timeout, cwd=cwd)
        data = {"action": name, "step": step_id, "argv": command, "by": actor, **result}
        stop = interrupt.describe()
        if stop and stop["forced"]:
            # Under a turn's broker this exec runs inside the turn's own process, so the grace
            # period's stop (loopx.sandbox.interrupt) ends the step, not this exec, and its result is still
            # recorded: marked as cut short, so the interruption records the step as stopped,
            # result unknown (loopx.domain.claims.close_interrupted), as when exec was a killed child.
            data["stopped_by"] = stop["signal"]
        status = "timed out" if result["timed_out"] else f"exit {result['exit_code']}"
        if result.get("limit_hit"):  # loopx/sandbox/limits.py: the stable reason, in the summary and the data
            status = f"{result['limit_hit']} ({status})"
        summary = f"{name or step_id}: {status} in {result['duration_seconds']:.2f}s"
        try:
            out = evidence.record(reg, "core", goal_id=run.goal_id, run_id=run.id, kind="command", summary=summary,
                                  data=data)
        except LoopxError as err:
            # A full disk: the result goes into the room its intent reserved (loopx/ledger/step_journal.py)
            # and is recorded, as it was, by the first write once there is space again.
            if err.code == "disk_full" and intent.keep(data=data, summary=summary):
                raise LoopxError("disk_full", f"{err.message}; the step's result ({status}) is kept in the step"
                                              " journal and recorded once there is space") from None
            raise
        intent.done()
        return out
    finally:
        intent.release()
