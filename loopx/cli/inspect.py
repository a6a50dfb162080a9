"""``loopx history`` and ``loopx plugins``: looking at the ledger and the plugin seam."""

from __future__ import annotations

import json

import click

from loopx.cli.output import LoopxCommand, emit, open_registry


def _event_line(e: dict) -> str:
    body = json.dumps(e["body"], ensure_ascii=False, sort_keys=True)
    if len(body) > 120:
        body = body[:117] + "..."
    return f"{e['seq']:>5}  {e['at']}  {e['actor']:<12} {e['kind']:<22} {body}"


@click.command(cls=LoopxCommand)
@click.option("--goal-id", required=True)
@click.option("--after", default=0, type=int, help="Only events after this sequence number.")
@click.option("--limit", default=None, type=click.IntRange(1, 100000), help="At most this many events.")
def history(goal_id, after, limit):
    """A goal's ledger: every change, who made it, and when."""
    from loopx import project_prompt as goals

    with open_registry() as reg:
        events = goals.history(reg, goal_id, after=after, limit=limit)
    emit(events, lambda es: "\n".join(_event_line(e) for e in es) or "no events")


@click.command("plugins", cls=LoopxCommand)
def plugins_command():
    """Installed plugins and the hooks each implements."""
    from loopx import plugins

    found = plugins.describe()

    def text(items):
        lines = []
        for p in items:
            origin = "built-in" if p["builtin"] else (p.get("distribution") or "plugin")
            if p.get("error"):
                lines.append(f"{p['name']}  ({origin})  ERROR: {p['error']}")
            else:
                lines.append(f"{p['name']}  ({origin})  hooks: {', '.join(p['hooks']) or '-'}")
        return "\n".join(lines)

    emit(found, text)
