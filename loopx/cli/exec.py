"""``loopx exec``: run an allowed action under a run and record it as evidence."""

from __future__ import annotations

import os
import sys

import click

from loopx.cli.op_options import op_option
from loopx.cli.output import AGENT_HELP, LoopxCommand, actor, agent_claim, check_inside, emit, open_registry


def _exec_text(ev: dict) -> str:
    d = ev["data"]
    out = d["output_tail"].rstrip("\n")
    head = f"{ev['summary']}  (evidence {ev['id']}, output {d['output_bytes']} bytes, {d['output_sha256'][:19]}…)"
    return (out + "\n" if out else "") + head


@click.command("exec", cls=LoopxCommand, context_settings={"ignore_unknown_options": True})
@op_option("exec_step", "run_id")
@op_option("exec_step", "action")
@click.option("--agent", default=None, help=AGENT_HELP)
@op_option("exec_step", "timeout_seconds")
@click.option("--unconfined", is_flag=True, default=False,
              help="Run the command without OS confinement (docs/security.md). Env LOOPX_UNCONFINED=1.")
@op_option("exec_step", "argv")
def exec_command(run_id, action_name, agent, timeout, unconfined, argv):
    """Run an allowed action (or an exact allowed command after `--`) and record it as evidence.

    Exit status 0 when the command succeeded, 1 when it failed or timed out (the evidence is
    recorded either way), 2 when LoopX refused to run it.
    """
    from loopx.domain import actions
    from loopx.sandbox import process

    who = actor()
    check_inside(run_id)
    with open_registry() as reg:
        def run():
            return actions.execute(reg, who, run_id=run_id, action=action_name, argv=list(argv) if argv else None,
                                   timeout=timeout, agent=agent_claim(agent))

        if process.in_step():
            ev = run()  # inside a turn: the turn's confinement applies
        else:
            # Run by hand (a harness loop): the command is confined like a turn's agent.
            from loopx.turn import confine, governed as turns
            from loopx.domain import runs
            from loopx.cli import run_inprocess

            with reg.read() as tx:
                the_run = runs.load_run(tx, run_id)
            backend = confine.check(unconfined)
            with turns.step(reg, run_id=the_run.id, goal_id=the_run.goal_id, agent=the_run.agent,
                                workdir=os.getcwd(), backend=backend, run_cli=run_inprocess):
                ev = run()
    emit(ev, _exec_text)
    if ev["data"]["exit_code"] != 0 or ev["data"]["timed_out"]:
        sys.exit(1)
