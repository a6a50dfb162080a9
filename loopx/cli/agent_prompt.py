"""``loopx agent-prompt``: a turn's prompt for an agent host that drives LoopX itself."""

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
    from loopx.views.should_run import should_run
    from loopx.turn.executors import prompt

    with open_registry() as reg:
        contract = should_run(reg, actor(), goal_id=goal_id, agent=agent, ttl_seconds=ttl_seconds)
        if managed and contract["decision"] == "run":
            # As the turn does (loopx.turn.governed): the step runs in the goal's workspace, made on demand,
            # and the executor's prompt names it; so does this one.
            from loopx.domain import workspace

            workspace.for_turn(reg, actor(), contract["goal_id"], contract)
    text = prompt.build(contract, host=host, managed=managed)
    emit({"decision": contract["decision"], "reasons": contract["reasons"],
          "run_id": contract["interaction_contract"].get("run_id"), "host": host, "prompt": text},
         lambda out: out["prompt"].rstrip("\n"))
