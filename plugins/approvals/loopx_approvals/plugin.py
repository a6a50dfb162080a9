"""The ``approvals`` plugin: ``loopx approvals serve``.

Imported on every ``loopx`` start-up: nothing heavy here; the server loads when the command runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopx import hookimpl

if TYPE_CHECKING:
    import click

    from loopx.api import registrars


@hookimpl
def loopx_register_commands(cli: click.Group) -> None:
    """Add ``loopx approvals serve``."""
    import click

    from loopx import api

    @click.group("approvals", cls=api.cli.LoopxGroup)
    def approvals() -> None:
        """Approve or reject gates and score runs from a browser (the status server stays read-only)."""

    @approvals.command("serve")
    @click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback unless --allow-remote).")
    @click.option("--port", type=int, default=8766, show_default=True, help="Port (0: any free one).")
    @click.option("--allow-remote", is_flag=True, help="Allow a non-loopback --host (put TLS in front of it).")
    @click.option("--token-file", default=None, help="Where to write the one-time login token (mode 0600).")
    def serve(host: str, port: int, allow_remote: bool, token_file: str | None) -> None:
        """Serve the approvals page; print a one-time login link.

        \b
        Example:
          loopx approvals serve --port 8766
        """
        from loopx_approvals.server import run

        run(host=host, port=port, allow_remote=allow_remote, token_file=token_file)

    cli.add_command(approvals)


@hookimpl
def loopx_register_capabilities(register: registrars.Capabilities) -> None:
    """Declare the ``approvals`` capability (see docs/capabilities/approvals.md)."""
    from loopx.api import Capability

    from loopx_approvals import __version__

    register(Capability(
        name="approvals",
        version=__version__,
        summary="Decide gates and score runs from a browser: own port, one-time login link, CSRF, loopback.",
        owns=[],
        reads=["goals", "gates", "runs", "quota"],
        quota={"turns": 0, "tokens": 0, "wall_seconds": 0},
        commands=["approvals"],
        user_commands=["approvals"],  # a page for a person to decide on, never served from inside a turn
        actions=[],
        doc="docs/capabilities/approvals.md",
    ))
