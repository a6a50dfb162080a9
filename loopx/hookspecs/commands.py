"""Hooks that add commands to the ``loopx`` command line."""

from loopx.hookspecs import hookspec


@hookspec
def loopx_register_commands(cli):
    """Add click commands or groups to ``cli`` (the root ``loopx`` group) with ``cli.add_command``.

    Keep the plugin module cheap to import: build commands inside this hook, and import heavy
    libraries inside the command functions.
    """
