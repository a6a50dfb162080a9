"""``loopx worker``: a supervisor that runs turns for every goal that is due."""

from __future__ import annotations

import click

from loopx.cli.output import LoopxCommand, emit, open_registry


def _worker_text(out: dict) -> str:
    return (f"worker {out['worker_id']} stopped ({out.get('stopped_by') or 'idle'}): {out['turns']} turns,"
            f" busy {out['busy_seconds']}s of {out['wall_seconds']}s, clock jumps {out['clock_jumps']}")


@click.command(cls=LoopxCommand)
@click.option("--concurrency", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Turns at once (never two of one goal).")
@click.option("--executor", default="shell", show_default=True,
              help="Executor for goals without their own (`loopx config set executor.G NAME`).")
@click.option("--agent", default=None, help="Agent name of its turns (default worker:<worker id>).")
@click.option("--grace-seconds", type=float, default=30.0, show_default=True,
              help="On SIGTERM / Ctrl-C: how long a running step may go on before it is stopped.")
@click.option("--lease-seconds", type=float, default=60.0, show_default=True,
              help="A goal's lease; renewed at every heartbeat while its turn runs.")
@click.option("--beat-seconds", type=float, default=10.0, show_default=True, help="Heartbeat interval.")
@click.option("--retry-seconds", type=click.FloatRange(0, 86400), default=30.0, show_default=True,
              help="After a failed turn, try the goal again after this long (doubling, at most an hour).")
@click.option("--exit-when-idle", is_flag=True, help="Stop when no turn runs and none is due (scripts, tests).")
@click.option("--print-unit", is_flag=True, help="Print a systemd --user unit that runs this worker, and exit.")
@click.option("--workdir", type=click.Path(exists=True, file_okay=False), default=None,
              help="Where the goals' agents work (default: the current directory).")
def worker(concurrency, executor, agent, grace_seconds, lease_seconds, beat_seconds, retry_seconds, exit_when_idle,
           print_unit, workdir):
    """Take governed turns for every goal that should run, by cadence and budget, until stopped.

    Each goal gets its configured executor; SIGTERM / Ctrl-C lets running steps finish (up to
    --grace-seconds), closes their runs `interrupted` and exits. Heartbeats show in `loopx status`.

    """
    from loopx import worker as worker_mod
    from loopx.cli.output import REGISTRY_KEY
    from loopx.errors import LoopxError

    url = click.get_current_context().meta.get(REGISTRY_KEY)
    if print_unit:
        click.echo(worker_mod.unit(url, concurrency, executor, grace_seconds, workdir), nl=False)
        return
    for value, what in ((lease_seconds, "--lease-seconds"), (beat_seconds, "--beat-seconds")):
        if not 0.05 <= value <= 86400:
            raise LoopxError("invalid_argument", f"{what} must be between 0.05 and 86400")
    if beat_seconds >= lease_seconds:
        raise LoopxError("invalid_argument", "--beat-seconds must be shorter than --lease-seconds (leases are renewed at each beat)")
    with open_registry() as reg:  # refuses a registry that does not exist
        from loopx import executors

        executors.get(executor)
        reg.store.schema_version()
    w = worker_mod.Worker(url, concurrency=concurrency, executor=executor, agent=agent, lease_seconds=lease_seconds,
                          beat_seconds=beat_seconds, grace_seconds=grace_seconds, exit_when_idle=exit_when_idle,
                          retry_seconds=retry_seconds, workdir=workdir)
    out = w.run()
    emit(out, _worker_text)
    if out.get("stopped_by"):
        import signal

        raise SystemExit(128 + int(signal.Signals[out["stopped_by"]]))
