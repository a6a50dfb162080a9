"""``loopx history``: a goal's ledger, every change, who made it and when."""

from __future__ import annotations

import json

import click

from loopx.cli.ids import goal_option
from loopx.cli.output import LoopxCommand, open_registry


def _event_line(e: dict) -> str:
    body = json.dumps(e["body"], ensure_ascii=False, sort_keys=True)
    if len(body) > 120:
        body = body[:117] + "..."
    line = f"{e['seq']:>5}  {e['at']}  {e['actor']:<12} {e['kind']:<22} {body}"
    return line + f"  [unknown kind: {e['unknown_kind']}]" if e.get("unknown_kind") else line


@click.command(cls=LoopxCommand)
@goal_option()
@click.option("--after", default=0, type=int, help="Only events after this sequence number (a cursor: the last"
                                                      " seq seen).")
@click.option("--limit", default=None, type=click.IntRange(1, None), help="At most this many events.")
def history(goal_id, after, limit):
    """A goal's ledger: every change, who made it, and when.

    Streamed as it is read, in bounded memory however long the ledger (`--format jsonl` prints
    one JSON document a line); page with `--limit N` and `--after SEQ`.
    """
    from loopx.domain import goals
    from loopx.cli.output import emit_stream

    with open_registry() as reg:
        emit_stream(goals.history_stream(reg, goal_id, after=after, limit=limit),
                    lambda e: "no events" if e is None else _event_line(e))
