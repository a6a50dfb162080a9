"""``loopx run``: runs, one agent turn each: finish, show, list."""

from __future__ import annotations

import click

from loopx.cli.ids import goal_option, id_option
from loopx.cli.op_options import op_option
from loopx.cli.output import AGENT_HELP, LoopxGroup, actor, agent_claim, check_inside, emit, open_registry, operation_option


def _run_text(r: dict) -> str:
    lines = [f"{r['id']}  [{r.get('state', r['status'])}]  agent {r['agent']}  opened {r['opened_at']}"]
    if r.get("finished_at"):
        lines.append(f"  finished {r['finished_at']}  outcome {r['outcome']}  tokens {r['tokens']}  cost {r['cost']}")
    if r.get("handoff"):
        lines.append(f"  hand-off: {r['handoff']}")
    for e in r.get("evidence", []):
        lines.append(f"  evidence {e['id']} [{e['kind']}] {e['summary']}")
    return "\n".join(lines)


@click.group(cls=LoopxGroup)
def run():
    """Runs: one agent turn each (opened by `quota should-run`)."""


@run.command()
@op_option("run_finish", "run_id")
@op_option("run_finish", "outcome")
@click.option("--force-outcome", default=None, metavar="REASON",
              help="With --outcome ok: record ok although a step failed, and why (kept as evidence).")
@op_option("run_finish", "tokens")
@op_option("run_finish", "cost")
@op_option("run_finish", "handoff")
@click.option("--agent", default=None, help=AGENT_HELP)
@operation_option
def finish(run_id, outcome, force_outcome, tokens, cost, handoff, agent, operation_id):
    """Close a run with its outcome, usage and hand-off note."""
    from loopx.domain import runs

    who = actor()
    check_inside(run_id)
    with open_registry() as reg:
        out = runs.finish(reg, who, run_id=run_id, outcome=outcome, tokens=tokens, cost=cost, handoff=handoff,
                          agent=agent_claim(agent), force_outcome=force_outcome, operation_id=operation_id)
    emit(out, lambda r: f"finished {r['id']}: {r['outcome']} after {r['wall_seconds']}s"
                        + (" (late: the run had expired)" if r.get("late") else "")
                        + (f"\n  hand-off: {r['handoff']}" if r.get("handoff") and r["outcome"] == "failed" else ""))


@run.command()
@id_option("run")
def show(run_id):
    """One run, its contract and its evidence."""
    from loopx.domain import runs

    with open_registry() as reg:
        out = runs.show(reg, run_id)
    emit(out, _run_text)


@run.command("list")
@goal_option()
@click.option("--limit", type=int, default=50)
def list_command_runs(goal_id, limit):
    """The goal's runs, newest first."""
    from loopx.domain import runs

    with open_registry() as reg:
        found = runs.list_runs(reg, goal_id, limit=limit)
    emit(found, lambda rs: "\n".join(_run_text(r) for r in rs) or "no runs")
