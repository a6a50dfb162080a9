"""``loopx agent-prompt`` and ``loopx mcp``: LoopX for agent hosts."""

from __future__ import annotations

import click

from loopx.cli.ids import goal_option
from loopx.cli.output import LoopxCommand, actor, emit, open_registry


@click.command(cls=LoopxCommand)
@goal_option()
@click.option("--host", type=click.Choice(["claude-code", "codex", "generic"]), default="generic", show_default=True,
              help="Whose tools the prompt names.")
@click.option("--agent", default=None, help="Who asks (default: env LOOPX_AGENT, else 'agent').")
@click.option("--ttl-seconds", type=float, default=None, help="How long an opened run stays open (default 3600).")
@click.option("--managed", is_flag=True,
              help="The exact text an executor provider sends (it finishes the run itself, so no finish step).")
def agent_prompt(goal_id, host, agent, ttl_seconds, managed):
    """Ask should-run, and print the turn's prompt for an agent host that drives LoopX itself.

    The text is built from the contract exactly as the claude-code / codex / command executors
    build theirs: the objective and criteria, the hand-off, the todo, the commands it may run
    (and nothing else), how to record evidence and how the turn ends. A `run` decision opens a
    run, as `quota should-run` does.
    """
    from loopx.should_run import should_run
    from loopx.executors import prompt

    with open_registry() as reg:
        contract = should_run(reg, actor(), goal_id=goal_id, agent=agent, ttl_seconds=ttl_seconds)
    text = prompt.build(contract, host=host, managed=managed)
    emit({"decision": contract["decision"], "reasons": contract["reasons"],
          "run_id": contract["interaction_contract"].get("run_id"), "host": host, "prompt": text},
         lambda out: out["prompt"].rstrip("\n"))


@click.command("mcp", cls=LoopxCommand)
def mcp_command():
    """Serve LoopX over the Model Context Protocol on stdio, as the executor (needs `pip install 'loopx[mcp]'`).

    Tools: should_run, goal_status, todo_add, todo_claim, todo_done, evidence_add, exec_step,
    run_finish, gate_request. Goals are resources (loopx://goals/{goal_id}). Nothing a user
    alone may do is offered. See docs/agents.md for the Claude Code and Codex configuration.
    """
    try:
        import mcp.server.lowlevel  # noqa: F401
    except ImportError:
        from loopx.errors import LoopxError

        raise LoopxError("executor_unavailable", "loopx mcp needs the MCP SDK: pip install 'loopx[mcp]'") from None
    from loopx.mcp_server import serve

    from loopx.cli.output import REGISTRY_KEY

    serve(registry_url=click.get_current_context().meta.get(REGISTRY_KEY))
