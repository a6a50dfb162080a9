"""``loopx mcp``: LoopX over the Model Context Protocol, for agent hosts."""

from __future__ import annotations

import click

from loopx.cli.output import LoopxCommand


@click.command("mcp", cls=LoopxCommand)
def mcp_command():
    """Serve LoopX over the Model Context Protocol on stdio, as the executor (needs the MCP SDK: `pip install '.[mcp]'` from the checkout).

    Tools: should_run, goal_status, todo_add, todo_claim, todo_done, evidence_add, exec_step,
    run_finish, gate_request. Goals are resources (loopx://goals/{goal_id}). Nothing a user
    alone may do is offered. See docs/agents.md for the Claude Code and Codex configuration.
    """
    try:
        import mcp.server.lowlevel  # noqa: F401
    except ImportError:
        from loopx.values.errors import LoopxError

        raise LoopxError("executor_unavailable", "loopx mcp needs the MCP SDK: pip install 'mcp>=2.3,<3'") from None
    from loopx.mcp_server import serve

    from loopx.cli.output import REGISTRY_KEY

    serve(registry_url=click.get_current_context().meta.get(REGISTRY_KEY))
