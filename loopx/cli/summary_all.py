"""``loopx summary-all`` (also ``summary_all``): each goal's runs, rewards, quota, gates and todos."""

from __future__ import annotations

import click

from loopx.cli.ids import goal_option
from loopx.cli.output import LoopxCommand, emit, open_registry


@click.command("summary_all", cls=LoopxCommand)
@goal_option(required=False, help="One goal (default: every goal).")
def summary_all(goal_id):
    """Runs, evidence, rewards, quota, open gates and todos, and the latest hand-off, per goal."""
    from loopx.views import summary_all as summaries

    with open_registry() as reg:
        found = summaries.summarize(reg, goal_id)
    emit(found, summaries.to_text)
