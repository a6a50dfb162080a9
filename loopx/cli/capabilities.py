"""``loopx capabilities list|show NAME``: what each installed capability declares."""

from __future__ import annotations

import click

from loopx.cli.output import LoopxGroup, emit


def _quota_text(q: dict) -> str:
    parts = [f"{k} {v:g}" for k, v in q.items() if v]
    return ", ".join(parts) or "none"


def _line(c: dict) -> str:
    owns = ", ".join(c["owns"]) or "-"
    return f"{c['name']:<16} {c['version']:<10} owns {owns:<24} {c['summary']}"


def _detail(c: dict) -> str:
    origin = c.get("distribution") or c.get("plugin") or "-"
    rows = [
        f"{c['name']} {c['version']}  ({origin})",
        f"  {c['summary']}",
        f"  owns:     {', '.join(c['owns']) or '-'}",
        f"  reads:    {', '.join(c['reads']) or '-'}",
        f"  quota:    {_quota_text(c['quota'])} per run",
        f"  commands: {', '.join(c['commands']) or '-'}",
        f"  actions:  {', '.join(c['actions']) or '-'}",
    ]
    if c.get("user_commands"):
        rows.append(f"  user's:   {', '.join(c['user_commands'])} (refused inside a turn)")
    if c["repairs"]:
        rows.append(f"  repairs:  {', '.join(c['repairs'])}")
    rows.append(f"  serves:   every goal: {c['why']}" if c.get("default_on") else
                "  serves:   the goals that enable it (loopx project-prompt capabilities G --enable NAME)")
    if c.get("repair_argv"):
        import shlex

        rows.append(f"  repair:   {shlex.join(c['repair_argv'])}")
    rows.append(f"  doc:      {c['doc']}")
    return "\n".join(rows)


@click.group(cls=LoopxGroup)
def capabilities():
    """Installed capabilities: the state each owns, its quota needs, commands and actions."""


@capabilities.command("list")
def list_command():
    """List installed capabilities."""
    from loopx.seam import capabilities as caps

    found = [c.to_json() for c in caps.load().values()]
    emit(found, lambda cs: "\n".join(_line(c) for c in cs) or "no capabilities installed")


@capabilities.command()
@click.argument("name")
def show(name):
    """Show one capability's declaration."""
    from loopx.seam import capabilities as caps

    emit(caps.get(name).to_json(), _detail)
