"""``loopx turn``: one governed turn through an executor provider."""

from __future__ import annotations

import click

from loopx.cli.output import LoopxCommand, actor, emit, open_registry
from loopx.cli.turn_common import turn_options, turn_text


@click.command(cls=LoopxCommand)
@turn_options
@click.option("--worker-lease", default=None, hidden=True,
              help="WORKER:TOKEN - set by loopx worker: open the run only under this goal lease.")
@click.option("--workdir", default=None, hidden=True,
              help="Set by loopx worker: the agents' working directory (the turn itself starts in LoopX's own).")
def turn(goal_id, executor, agent, ttl_seconds, unconfined, grace_seconds, worker_lease, workdir):
    """One governed turn: should-run, the executor under the contract, evidence, run finish.

    SIGTERM or Ctrl-C lets the running step finish (up to --grace-seconds), starts no other,
    and closes the run `interrupted` with the interruption as evidence.
    """
    import os

    from loopx.domain import claims
    from loopx.sandbox import interrupt
    from loopx.turn import governed as turns
    from loopx.cli import run_inprocess

    if workdir is not None:
        # Started isolated (loopx.sandbox.selfrun): everything of LoopX is imported from where it is
        # installed, never from here; this directory is only where the agent works.
        os.chdir(workdir)
    owner = None
    if worker_lease is not None:
        from loopx.values.errors import LoopxError

        from loopx.values.validate import ascii_whole

        wid, _, token = worker_lease.rpartition(":")
        if not wid or ascii_whole(token) is None:
            raise LoopxError("invalid_argument", "--worker-lease is WORKER:TOKEN")
        owner = claims.owner_here(worker=wid, lease_token=ascii_whole(token))
    with interrupt.handling(grace_seconds), open_registry() as reg:
        parent = os.environ.get("LOOPX_WORKER_PID")
        if owner is not None and parent and parent.isdigit():
            # A worker's turn dies with its worker (docs/worker.md): SIGTERM when it is gone, taken
            # as any stop - the running step gets its grace period, the run closes `interrupted`.
            interrupt.die_with_parent(int(parent))
        out = turns.turn(reg, actor(), goal_id=goal_id, executor=executor, agent=agent, ttl_seconds=ttl_seconds,
                             owner=owner, unconfined=unconfined, run_cli=run_inprocess)
        emit(out, turn_text)
        code = interrupt.exit_code()
    if not code and out["run_id"] is not None and out["outcome"] != "ok":
        # A harness (`while loopx turn ...`) must see a turn that did not succeed (docs/agents.md).
        code = TURN_EXIT.get(out["outcome"], 1)
    if code:
        raise SystemExit(code)


#: ``loopx turn``'s exit status when a turn ran but its outcome is not ``ok`` (an interrupted turn
#: exits 130 / 143, as a process stopped by that signal would).
TURN_EXIT = {"failed": 1, "partial": 3}
