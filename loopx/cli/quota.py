"""``loopx quota``: the turn decision (``should-run``) and the budget (``set``, ``grant``, ``show``)."""

from __future__ import annotations

import click

from loopx.cli.ids import goal_option
from loopx.cli.op_options import op_option
from loopx.cli.output import LoopxGroup, actor, emit, open_registry, operation_option
from loopx.values.lasting import lasting


def contract_text(out: dict) -> str:
    """A should-run answer for people."""
    c = out["interaction_contract"]
    lines = [f"decision: {out['decision']}  ({', '.join(out['reasons'])})" + ("  [dry run: preview]" if out.get("dry_run") else "")]
    if out.get("preview"):
        lines.append(out["preview"])
    if c.get("run_id"):
        lines.append(f"run: {c['run_id']}  contract: {c.get('contract_id') or '-'}  expires: {c['expires_at']}")
    if c.get("next_eligible_at"):
        lines.append(f"next eligible at: {c['next_eligible_at']}")
    lines.append(f"do: {c['agent_channel']['primary_action']}")
    q = c["quota"]
    left = ", ".join(f"{k} {v}" for k, v in q["remaining"].items() if v is not None)
    if left:
        lines.append(f"remaining: {left}")
    for g in c["gates"]["pending"]:
        lines.append(f"gate {g['id']} [{g['status']}] {g['title']} (blocks {g['blocks']})")
    if c["agent_channel"].get("handoff"):
        lines.append(f"hand-off: {c['agent_channel']['handoff']}")
    if c["cli_channel"]["next_cli_actions"]:
        lines.append("agent actions:")
        lines += [f"  {a}" for a in c["cli_channel"]["next_cli_actions"]]
    for d in c["user_channel"].get("decisions") or []:
        lines.append(f"decide gate {d['gate_id']} ({d['title']}): approving {d['approving']}")
    if c["user_channel"]["next_user_actions"]:
        lines.append("user actions:" + ("  (action required)" if c["user_channel"]["action_required"] else ""))
        lines += [f"  {a}" for a in c["user_channel"]["next_user_actions"]]
    return "\n".join(lines)


def quota_text(q: dict) -> str:
    """A goal's quota for people."""
    from loopx.model.goal import BUDGETS as names
    lines = [f"quota of {q['goal_id']}"]
    for key, limit in names.items():
        cap = q["effective"][limit]
        granted = q["grants"].get(limit)
        extra = f" (incl. {granted} granted)" if granted else ""
        cap_text = "unlimited" if cap is None else f"{cap}{extra}"
        lines.append(f"  {key:<13} used {q['used'][key]:<10} of {cap_text}"
                     + ("  EXHAUSTED" if key in q["exhausted"] else ""))
    if q["limits"].get("cadence_seconds"):
        lines.append(f"  cadence       {q['limits']['cadence_seconds']}s between turns"
                     + (f"; next at {q['next_eligible_at']}" if q["next_eligible_at"] else ""))
    if q["open_runs"]:
        lines.append(f"  open runs: {', '.join(q['open_runs'])}")
    return "\n".join(lines)


@click.group(cls=LoopxGroup)
def quota():
    """Budgets and the turn decision: ask `quota should-run` before every turn."""


@quota.command("should-run")
@op_option("should_run", "goal_id")
@op_option("should_run", "agent")
@op_option("should_run", "ttl_seconds")
@click.option("--dry-run", is_flag=True, help="Preview the decision and contract; write nothing.")
@operation_option
def should_run(goal_id, agent, ttl_seconds, dry_run, operation_id):
    """Decide whether to take a turn now, and print the interaction contract to obey."""
    with lasting("loopx.views.should_run"):  # before every agent turn: see loopx.values.lasting
        from loopx.views.should_run import should_run

    with open_registry() as reg:
        out = should_run(reg, actor(), goal_id=goal_id, agent=agent, ttl_seconds=ttl_seconds, dry_run=dry_run,
                           operation_id=operation_id)
    emit(out, contract_text)


@quota.command("set")
@goal_option()
@click.option("--max-turns", type=int, default=None)
@click.option("--max-tokens", type=int, default=None)
@click.option("--max-cost", type=float, default=None, help="In USD.")
@click.option("--max-wall-seconds", type=float, default=None, help="Wall-clock seconds of all runs together.")
@click.option("--cadence-seconds", type=float, default=None, help="Least time between the starts of two turns.")
@click.option("--stuck-after", type=int, default=None,
              help="Ask a user after this many runs in a row failed at the same step (default 3; 0 = never).")
@click.option("--unset", multiple=True,
              type=click.Choice(["max_turns", "max_tokens", "max_cost", "max_wall_seconds", "cadence_seconds",
                                 "stuck_after"]),
              help="Make a limit unlimited again (repeatable).")
@operation_option
def set_command(goal_id, max_turns, max_tokens, max_cost, max_wall_seconds, cadence_seconds, stuck_after, unset,
                operation_id):
    """Set a goal's budget (user only)."""
    from loopx.views import quota as q

    values = {"max_turns": max_turns, "max_tokens": max_tokens, "max_cost": max_cost,
              "max_wall_seconds": max_wall_seconds, "cadence_seconds": cadence_seconds, "stuck_after": stuck_after}
    with open_registry() as reg:
        out = q.set_limits(reg, actor(), goal_id=goal_id, values=values, unset=unset, operation_id=operation_id)
    emit(out, quota_text)


@quota.command()
@goal_option()
@click.option("--turns", type=int, default=None)
@click.option("--tokens", type=int, default=None)
@click.option("--cost", type=float, default=None, help="In USD.")
@click.option("--wall-seconds", type=float, default=None)
@operation_option
def grant(goal_id, turns, tokens, cost, wall_seconds, operation_id):
    """Grant more budget after a pause-and-ask (user only)."""
    from loopx.views import quota as q

    amounts = {"turns": turns, "tokens": tokens, "cost": cost, "wall_seconds": wall_seconds}
    with open_registry() as reg:
        out = q.grant(reg, actor(), goal_id=goal_id, amounts=amounts, operation_id=operation_id)
    emit(out, quota_text)


@quota.command()
@goal_option()
def show(goal_id):
    """Limits, grants, usage (derived from the ledger) and what remains."""
    from loopx.views import quota as q

    with open_registry(readonly=False) as reg:
        emit(q.show(reg, goal_id), quota_text)
