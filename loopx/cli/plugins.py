"""``loopx plugins``: installed plugins and their hooks; install and uninstall them."""

from __future__ import annotations

import click

from loopx.cli.output import LoopxGroup, emit


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
    from loopx.seam import plugin_install

    emit(plugin_install.install(list(specs), upgrade=upgrade, editable=editable), _changed_text)


@plugins_command.command()
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
def uninstall(names):
    """Uninstall plugin distributions from the environment LoopX runs in."""
    from loopx.seam import plugin_install

    emit(plugin_install.uninstall(list(names)), _changed_text)


def _list_plugins():
    from loopx.seam import plugins

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
