"""``loopx handoff``: what a run left for whoever acts next."""

from __future__ import annotations

import click

from loopx.cli.ids import goal_option
from loopx.cli.output import LoopxGroup, emit, open_registry


@click.group(cls=LoopxGroup)
def handoff():
    """Hand-off notes: what a run left for whoever acts next."""


@handoff.command()
@goal_option()
def show(goal_id):
    """The goal's latest hand-off note and the run that left it."""
    from loopx.domain.rewards import latest_handoff

    with open_registry() as reg:
        found = latest_handoff(reg, goal_id)

    def text(d):
        from loopx.ledger.artifacts import lines

        shown = "".join("\n  " + line for line in lines(d.get("artifacts") or []))
        if d["handoff"] is None:
            return f"no hand-off yet on {d['goal_id']}" + shown
        h, r = d["handoff"], d["run"]
        return f"{h['note']}\n  left by run {h['run_id']} ({r['agent']}, outcome {r['outcome']}) at {h['at']}" + shown

    emit(found, text)
