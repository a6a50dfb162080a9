"""``loopx notify``: notifications to a person, what was sent, and a check by hand."""

from __future__ import annotations

import click

from loopx.cli.output import LoopxCommand, LoopxGroup, emit, open_registry


@click.group(cls=LoopxGroup)
def notify():
    """Notifications to a person: what was sent, and a check by hand."""


@notify.command("list", cls=LoopxCommand)
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
def notify_list(limit):
    """The latest deliveries (goal, reason, channel, status, attempts), newest first.

    """
    from loopx.views import notify as notify_mod

    with open_registry(readonly=True) as reg:
        out = notify_mod.list_recent(reg, limit=limit)
    emit(out, lambda rows: "\n".join(f"{r['at']}  {r['goal_id']}  {r['reason']:<18} {r['channel']:<10} {r['status']}"
                                     f" ({r['attempts']} attempt(s))" for r in rows) or "nothing sent yet")


@notify.command("check", cls=LoopxCommand)
@click.option("--goal-id", "goal_ids", multiple=True, help="A goal to look at (repeat it; default: every open goal).")
def notify_check(goal_ids):
    """Look now for goals that came to need a person and notify (what `loopx worker` does as it runs).

    """
    from loopx.views import notify as notify_mod

    with open_registry() as reg:
        out = notify_mod.check_goals(reg, list(goal_ids) or notify_mod.open_goal_ids(reg))
    emit(out, lambda rows: "\n".join(f"sent {r['id']}: {r['goal_id']} {r['reason']}" for r in rows) or "nothing new")
