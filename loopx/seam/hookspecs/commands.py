"""Hooks that add commands to the ``loopx`` command line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopx.seam.hookspecs import hookspec, spec_names

if TYPE_CHECKING:
    import click


@hookspec
def loopx_register_commands(cli: click.Group) -> None:
    """Add click commands or groups to ``cli`` (the root ``loopx`` group) with ``cli.add_command``.

    Keep the plugin module cheap to import: build commands inside this hook, and import heavy
    libraries inside the command functions.
    """


def __dir__() -> list[str]:
    return spec_names(globals())  # what pluggy's add_hookspecs looks at: the specifications only
