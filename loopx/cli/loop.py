"""``loopx loop``: governed turns until the decision is not ``run``."""

from __future__ import annotations

import click

from loopx.cli.output import LoopxCommand, actor, emit, open_registry
from loopx.cli.turn_common import turn_options, turn_text


def loop_text(out: dict) -> str:
    """A loop for people."""
    lines = [turn_text(t) for t in out["turns"]]
    if out["stopped"] == "interrupted":
        lines.append(f"stopped after {len(out['turns'])} turns: interrupted by {out['interrupted']['signal']}")
    elif out["stopped"] == "max_turns":
        lines.append(f"stopped after {len(out['turns'])} turns (--max-turns)")
    else:
        from loopx.cli.quota import contract_text

        lines.append(f"stopped after {len(out['turns'])} turns; the decision is now:")
        lines.append(contract_text(out["contract"]))
    return "\n".join(lines)


@click.command(cls=LoopxCommand)
@turn_options
@click.option("--max-turns", type=int, default=10, show_default=True, help="Stop after this many turns.")
def loop(goal_id, executor, agent, ttl_seconds, unconfined, grace_seconds, max_turns):
    """Governed turns until the decision is not `run` (or --max-turns).

    SIGTERM or Ctrl-C starts no new turn; the running one ends as `loopx turn` describes.
    """
    from loopx.sandbox import interrupt
    from loopx.turn import governed as turns
    from loopx.cli import run_inprocess

    with interrupt.handling(grace_seconds), open_registry() as reg:
        out = turns.loop(reg, actor(), goal_id=goal_id, executor=executor, agent=agent, max_turns=max_turns,
                             ttl_seconds=ttl_seconds, unconfined=unconfined, run_cli=run_inprocess)
        if out["stopped"] != "interrupted" and interrupt.requested():
            out.update(stopped="interrupted", interrupted=interrupt.describe())
        emit(out, loop_text)
        code = interrupt.exit_code()
    if code:
        raise SystemExit(code)
