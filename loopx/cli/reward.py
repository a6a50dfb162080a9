"""``loopx reward``: a user's score and comment on one run (the human_reward overlay)."""

from __future__ import annotations

import json

import click

from loopx.cli.ids import goal_option, id_option
from loopx.cli.output import LoopxGroup, actor, emit, open_registry, operation_option


def reward_line(w: dict) -> str:
    """One reward for people."""
    return f"{w['id']}  {w['score']:+.2f}  run {w['run_id']}  by {w['author']} at {w['created_at']}" + (
        f"\n    {w['comment']}" if w.get("comment") else "")


@click.group(cls=LoopxGroup)
def reward():
    """The human_reward overlay: a user's score in [-1, 1] and comment on one run."""


@reward.command()
@goal_option()
@id_option("run")
@click.option("--score", required=True, type=float, help="From -1 (harmful) to 1 (exactly right).")
@click.option("--comment", default=None, help="What was good or bad; the agent reads it in its next contract.")
@operation_option
def add(goal_id, run_id, score, comment, operation_id):
    """Score a run of the goal (user only)."""
    from loopx.domain import rewards

    with open_registry() as reg:
        found = rewards.add(reg, actor(), goal_id=goal_id, run_id=run_id, score=score, comment=comment,
                            operation_id=operation_id)
    emit(found, reward_line)


@reward.command("list")
@goal_option()
def list_command(goal_id):
    """The goal's rewards, oldest first."""
    from loopx.domain import rewards

    with open_registry() as reg:
        found = rewards.list_for(reg, goal_id)
    emit(found, lambda ws: "\n".join(reward_line(w) for w in ws) or "no rewards")


@reward.command()
@goal_option(required=False, help="Only this goal's rewards (default: every goal).")
def export(goal_id):
    """Write one loopx.reward_record/1 JSON line per reward, for reward-model training.

    The format is documented in docs/reward-export.md; its JSON Schema ships as
    loopx/schemas/reward_record.json. The output is JSON lines whatever --format says.
    """
    from loopx.domain import rewards

    from contextlib import closing

    # closing(): the snapshot ends before the registry closes, even when the reader goes away.
    with open_registry() as reg, closing(rewards.export_records(reg, goal_id)) as records:
        # Check the goal before the first line, so a bad id is a clean error, not a torn stream.
        first = next(records, None)
        if first is None:
            return
        try:
            click.echo(json.dumps(first, ensure_ascii=False, sort_keys=True))
            for rec in records:
                click.echo(json.dumps(rec, ensure_ascii=False, sort_keys=True))
        except BrokenPipeError:
            # The reader stopped early (`| head`): not an error of ours. Point stdout at
            # /dev/null so the interpreter's final flush does not complain either.
            import os
            import sys

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
