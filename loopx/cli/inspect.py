"""``loopx history`` and ``loopx plugins``: looking at the ledger and the plugin seam."""

from __future__ import annotations

import json

import click

from loopx.cli.ids import goal_option
from loopx.cli.output import LoopxCommand, LoopxGroup, emit, open_registry


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
    from loopx import goals
    from loopx.cli.output import emit_stream

    with open_registry() as reg:
        emit_stream(goals.history_stream(reg, goal_id, after=after, limit=limit),
                    lambda e: "no events" if e is None else _event_line(e))


@click.group("plugins", cls=LoopxGroup, invoke_without_command=True)
@click.pass_context
def plugins_command(ctx):
    """Installed plugins and the hooks each implements; install and uninstall plugins.

    Without a subcommand, the same as `loopx plugins list`.
    """
    if ctx.invoked_subcommand is None:
        _list_plugins()


@plugins_command.command("list")
def list_plugins():
    """Installed plugins and the hooks each implements."""
    _list_plugins()


def _changed_text(out: dict) -> str:
    if not out["changed"]:
        return f"nothing changed in {out['python']}"
    lines = [f"changed in the environment of {out['python']}:"]
    for c in out["changed"]:
        verb = "installed" if c["before"] is None else "removed" if c["after"] is None else "upgraded"
        version = c["after"] or c["before"]
        if c["before"] and c["after"]:
            version = f"{c['before']} -> {c['after']}"
        plugins = f"  (loopx plugin: {', '.join(c['plugins'])})" if c["plugins"] else ""
        lines.append(f"  {verb:<9} {c['distribution']} {version}{plugins}")
    return "\n".join(lines)


@plugins_command.command()
@click.argument("specs", nargs=-1, required=True, metavar="NAME|PATH...")
@click.option("--upgrade", "-U", is_flag=True, help="Upgrade it if it is already installed.")
@click.option("--editable", "-e", is_flag=True, help="Install a local checkout in editable mode.")
def install(specs, upgrade, editable):
    """Install plugins into the Python environment LoopX runs in (`python -m pip install`)."""
    from loopx import plugin_install

    emit(plugin_install.install(list(specs), upgrade=upgrade, editable=editable), _changed_text)


@plugins_command.command()
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
def uninstall(names):
    """Uninstall plugin distributions from the environment LoopX runs in."""
    from loopx import plugin_install

    emit(plugin_install.uninstall(list(names)), _changed_text)


def _list_plugins():
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
