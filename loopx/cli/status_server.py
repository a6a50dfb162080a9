"""``loopx status-server``: the dashboard and the read-only status API."""

from __future__ import annotations

import json

import click

from loopx.cli.output import LoopxCommand, wants_json


@click.command("status-server", cls=LoopxCommand)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default).")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
              help="Port to bind (0 picks a free one).")
@click.option("--token", default=None, envvar="LOOPX_STATUS_TOKEN",
              help="Bearer token every request must carry; required to bind a non-loopback address.")
def status_server(host, port, token):
    """Serve the dashboard and the read-only status API (GET and HEAD only)."""
    from loopx import status_server as server
    from loopx.cli.output import REGISTRY_KEY

    import sys

    # This process only serves: hand the GIL between request threads more often than the
    # default 5 ms, which otherwise shows up directly in the tail latency under load.
    sys.setswitchinterval(0.0005)
    srv = server.make_server(click.get_current_context().meta.get(REGISTRY_KEY), host=host, port=port, token=token)
    # The first line says where it listens (port 0 picks one), so scripts and tests can read it.
    info = {"url": srv.url, "readonly": True, "token_required": token is not None}
    if wants_json():
        click.echo(json.dumps(info))
    else:
        click.echo(f"loopx status server on {info['url']} (read-only; Ctrl-C to stop)")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.shutdown_all()
