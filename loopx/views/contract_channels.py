"""What the interaction contract tells each side, built from a decision
(:class:`loopx.views.contract.Decision`): the user channel (the commands that unblock the goal and the
gates to decide), the agent's primary action, and the steps of the turn (:mod:`loopx.values.steps`).

:func:`loopx.views.contract.document` puts them together; everything here reads.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from loopx.domain.usage import effective_limits, remaining

if TYPE_CHECKING:
    from loopx.views.contract import Decision

TEXT_SHOWN = 160


def quoted(*argv) -> str:
    """One shell command line of ``argv`` (each item made a string)."""
    return shlex.join([str(a) for a in argv])


def short(text: str | None, limit: int) -> str | None:
    """``text`` cut to ``limit`` characters (the last one an ellipsis), or as it is."""
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def gate_json(gate) -> dict:
    """A gate as the contract shows it."""
    out = {"id": gate.id, "title": short(gate.title, TEXT_SHOWN), "scope": gate.scope, "blocks": gate.blocks,
           "status": gate.status}
    if gate.comment:
        out["comment"] = short(gate.comment, TEXT_SHOWN)
    return out


def quota_json(goal, used) -> dict:
    """The contract's ``quota``: the goal's limits, what is used and what remains."""
    import attrs

    from loopx.domain.usage import attrs_dict

    limits = attrs_dict(effective_limits(goal))
    # attrs.asdict, not to_json: a flat value needs no cattrs, which should-run never imports.
    return {"limits": limits, "used": attrs.asdict(used), "remaining": remaining(goal, used)}


def _grant_command(goal, budget: str) -> str:
    from loopx.model.goal import BUDGETS

    base = getattr(goal.limits, BUDGETS[budget])
    amount = base if base else 1
    if isinstance(amount, float) and amount.is_integer():
        amount = int(amount)
    return quoted("loopx", "quota", "grant", "--goal-id", goal.id, f"--{budget.replace('_', '-')}", amount)


def _decisions(d: Decision, gates_shown: list, inputs) -> list[dict]:
    """The pending gates a user can decide now, the one holding the work first: each with its
    approve and reject commands and what approving does."""
    from loopx.domain.gates import approving, decision_commands

    pending = [g for g in gates_shown if g.status == "pending"]
    if d.held is not None and d.held[0].status == "pending":
        pending = [d.held[0], *[g for g in pending if g.id != d.held[0].id]]
    names = {a.name: a for a in inputs.actions} if inputs is not None else {}
    out = []
    for gate in pending:
        todo_id = d.held[1] if d.held is not None and d.held[0].id == gate.id else None
        approve, reject = decision_commands(gate)
        out.append({"gate_id": gate.id, "title": short(gate.title, TEXT_SHOWN), "scope": gate.scope,
                    "approve": approve, "reject": reject,
                    "approving": approving(gate, actions=names, todo_id=todo_id)})
    return out


def user_channel(d: Decision, gates_shown: list, inputs=None) -> dict:
    """The contract's ``user_channel``: the commands a user runs next, the gates to decide first."""
    g = d.goal.id
    actions: list[str] = []
    reason = d.reasons[0]
    decisions = _decisions(d, gates_shown, inputs) if d.decision != "stop" else []
    # At a gate the decision comes first: approve and reject, then everything else.
    for item in decisions:
        actions += [item["approve"], item["reject"]]
    if reason == "goal_paused":
        actions.append(quoted("loopx", "project-prompt", "resume", "--goal-id", g))
    if d.veto and d.decision == "ask_user":
        actions += [str(a) for a in d.veto.get("user_actions") or []]
    if reason == "gate_rejected":
        # Not a dead end: a rejected gate can be decided again.
        actions += [quoted("loopx", "gate", "reopen", "--goal-id", g, "--gate-id", x.id)
                    for x in d.blocking["all"] if x.status == "rejected"]
        actions += [quoted("loopx", "gate", "list", "--goal-id", g),
                    quoted("loopx", "project-prompt", "close", "--goal-id", g, "--reason", "gate rejected")]
    if reason == "quota_exhausted":
        actions += [_grant_command(d.goal, b) for b in d.exhausted]
        actions.append(quoted("loopx", "quota", "show", "--goal-id", g))
    if reason == "no_ready_work":
        actions.append(quoted("loopx", "todo", "list", "--goal-id", g))
        if not decisions:  # closing with a gate pending would skip the work it holds
            actions.append(quoted("loopx", "project-prompt", "close", "--goal-id", g, "--reason", "done"))
    if reason == "gate_pending" and d.held is not None and d.held[1] is None:
        # An action waits for the gate but no open todo names it: approving alone runs nothing.
        actions.append(quoted("loopx", "todo", "add", "--goal-id", g, "--text", "what it is for", "--action",
                          d.held[2]))
    if reason == "repeated_failure":
        actions += [quoted("loopx", "run", "show", "--run-id", d.failure["run_id"]),
                    quoted("loopx", "project-prompt", "retry", "--goal-id", g)]
    out = {"action_required": d.decision == "ask_user", "next_user_actions": actions}
    if decisions:
        out["decisions"] = decisions
    return out


def primary_action(d: Decision, run_id: str | None) -> str:
    """The one sentence that tells the agent what to do now."""
    g, reason = d.goal, d.reasons[0]
    title = short(g.title, 80)
    run = f"run {run_id}" if run_id else "the run a real call opens"
    if reason == "ready_work":
        top = d.ready[0]
        return (f"Goal {title!r}: do todo {top.id} ({short(top.text, TEXT_SHOWN)}) with only the steps below, "
                f"in order, stopping at the first that fails; then finish {run}.")
    if reason == "no_todos":
        return (f"Goal {title!r} has no plan yet: read it and add one todo per step, in your own words "
                f"(`loopx todo add --goal-id {g.id} --run-id {run_id or 'R'} --text TEXT`), then finish {run}.")
    if reason == "repeated_failure":
        f = d.failure
        from loopx.values.steps import last_line

        why = last_line(f.get("output_tail"))
        return (f"Stop: step {f['step']} failed in each of the last {f['runs']} runs (latest {f['run_id']}, "
                f"exit {f['exit_code']}" + (f": {why}" if why else "") + "); a user must look, fix the cause and "
                "let agents retry (`loopx project-prompt retry`).")
    if reason == "goal_closed":
        return "The goal is closed: stop."
    if reason == "goal_paused":
        return "The goal is paused: do nothing; ask again after a user resumes it."
    if d.decision == "repair":
        return str(d.veto.get("message") or "A capability found state that needs repair: run the repair actions.")
    if d.veto and d.decision == "ask_user":
        return "Stop and wait: a user must decide. " + str(d.veto.get("message") or "")
    if reason == "gate_pending" and d.held is not None:
        gate, todo_id, action = d.held
        what = f"todo {todo_id}" if todo_id else f"action {action}"
        return (f"Stop and wait: {what} is held by gate {gate.id} ({short(gate.title, TEXT_SHOWN)}); "
                f"a user must decide it.")
    if reason in ("gate_pending", "gate_rejected"):
        gate = d.blocking["all"][0]
        verb = "decide" if reason == "gate_pending" else "reconsider (it was rejected)"
        return f"Stop and wait: a user must {verb} gate {gate.id} ({short(gate.title, TEXT_SHOWN)})."
    if reason == "quota_exhausted":
        return f"Stop: the {', '.join(d.exhausted)} budget is exhausted; a user must grant more."
    if reason == "cadence":
        return f"Wait: the next turn is allowed at {d.next_eligible_at}."
    if reason == "run_in_progress":
        r = d.other_run
        return f"Wait: agent {r.agent} holds run {r.id} until {r.expires_at}."
    return "Stop: nothing is ready to do; a user must add work (`loopx todo add`) or unblock it."


def turn_steps(d: Decision, run_id: str | None, allowed: list, contributed: list[dict]) -> list[dict]:
    """The contract's steps (see :mod:`loopx.values.steps`); every line carries the agent."""
    from loopx.values.steps import chain

    g, a = d.goal.id, d.agent
    if d.decision == "repair":
        return chain([(f"repair:{i + 1}", "do", argv) for i, argv in enumerate(d.veto.get("argvs") or [])])
    if d.decision != "run":
        out = []
        if d.own_run is not None:
            # No outcome: `run finish` derives it from what the run's steps recorded.
            out.append(("finish", "finish", ["loopx", "run", "finish", "--run-id", d.own_run.id, "--agent", a,
                                             "--handoff", "stopped: " + d.reasons[0]]))
        if d.decision == "wait":
            out.append(("ask", "claim", ["loopx", "quota", "should-run", "--goal-id", g, "--agent", a]))
        return chain(out)
    if run_id is None:  # a dry run opens no run: there is nothing to act under
        return []
    exec_ = ["loopx", "exec", "--run-id", run_id, "--agent", a]
    out = []
    top = d.ready[0] if d.ready else None
    if top is not None:
        out.append(("claim", "claim", ["loopx", "todo", "claim", "--goal-id", g, "--todo-id", top.id, "--agent", a,
                                       "--run-id", run_id]))
    if top is not None and top.actions:
        # The todo names the actions that do it: its turn runs those, in its order, and no others.
        by_name = {x.name: x for x in allowed}
        allowed = [by_name[n] for n in top.actions if n in by_name]
    out += [(f"action:{x.name}", "do", [*exec_, "--action", x.name]) for x in allowed]
    for c in contributed:
        name = f"{c.get('capability') or c['plugin']}:{c.get('action') or c['argv'][1]}"
        out.append((name, "do", [*exec_, "--", *c["argv"]]))
    if top is not None:
        out.append(("done", "record", ["loopx", "todo", "done", "--goal-id", g, "--todo-id", top.id, "--run-id",
                                       run_id, "--agent", a]))
    out.append(("finish", "finish", ["loopx", "run", "finish", "--run-id", run_id, "--agent", a]))
    return chain(out)
