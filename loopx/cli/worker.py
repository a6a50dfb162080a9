"""``loopx worker``: a supervisor that runs turns for every goal that is due."""

from __future__ import annotations

import click

from loopx.cli.output import LoopxGroup, emit, open_registry


def _worker_text(out: dict) -> str:
    return (f"worker {out['worker_id']} stopped ({out.get('stopped_by') or 'idle'}): {out['turns']} turns,"
            f" busy {out['busy_seconds']}s of {out['wall_seconds']}s, clock jumps {out['clock_jumps']}")


@click.group(cls=LoopxGroup, invoke_without_command=True)
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
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Its log on stderr, one line per turn start/end, lease, notification, fault: text or JSON Lines.")
@click.pass_context
def worker(ctx, concurrency, executor, agent, grace_seconds, lease_seconds, beat_seconds, retry_seconds, exit_when_idle,
           print_unit, workdir, log_format):
    """Take governed turns for every goal that should run, by cadence and budget, until stopped.

    Each goal gets its configured executor; SIGTERM / Ctrl-C or `loopx worker stop` lets running
    steps finish (up to --grace-seconds), closes their runs `interrupted` and exits. It logs one
    line per event to stderr (--log-format); `loopx worker list` shows the live workers.

    """
    if ctx.invoked_subcommand is not None:
        return
    from loopx import worker as worker_mod
    from loopx.cli.output import REGISTRY_KEY
    from loopx.values.errors import LoopxError

    url = click.get_current_context().meta.get(REGISTRY_KEY)
    if print_unit:
        from loopx.worker_unit import unit

        click.echo(unit(url, concurrency, executor, grace_seconds, workdir), nl=False)
        _warn_relative_notify_command()
        return
    for value, what in ((lease_seconds, "--lease-seconds"), (beat_seconds, "--beat-seconds")):
        if not 0.05 <= value <= 86400:
            raise LoopxError("invalid_argument", f"{what} must be between 0.05 and 86400")
    if beat_seconds >= lease_seconds:
        raise LoopxError("invalid_argument", "--beat-seconds must be shorter than --lease-seconds (leases are renewed at each beat)")
    from loopx.turn import executors

    executors.get(executor)
    try:
        with open_registry() as reg:  # refuses a registry that does not exist, a wrong URL or password
            reg.store.schema_version()
    except LoopxError as exc:
        from loopx.values.worker_log import waits_at_start

        if not waits_at_start(exc):
            raise
        # The database is down (or the disk full) right now: the worker starts anyway, backs off and
        # logs a `fault` line per try until it can reach the registry (docs/worker.md).
    w = worker_mod.Worker(url, concurrency=concurrency, executor=executor, agent=agent, lease_seconds=lease_seconds,
                          beat_seconds=beat_seconds, grace_seconds=grace_seconds, exit_when_idle=exit_when_idle,
                          retry_seconds=retry_seconds, workdir=workdir, log_format=log_format)
    out = w.run()
    emit(out, _worker_text)
    if out.get("stopped_by") not in (None, "request"):  # a stop asked through the registry is a success
        import signal

        raise SystemExit(128 + int(signal.Signals[out["stopped_by"]]))


def _warn_relative_notify_command() -> None:
    """A ``notify.command`` runs in ``/``: one that starts with a relative path would not be found there."""
    import shlex

    from loopx.domain.supervision import settings

    try:
        with open_registry(readonly=True) as reg, reg.read() as tx:
            command = settings(tx).get("notify.command") or ""
        first = shlex.split(command)[0] if command.strip() else ""
    except Exception:  # no registry yet, or a command shlex cannot read: nothing to say
        return
    if "/" in first and not first.startswith(("/", "~")):
        click.echo(f"loopx: warning: notify.command starts with the relative path {first!r}, which the worker "
                   "runs in / (not here): set it with an absolute path (loopx config set notify.command ...)",
                   err=True)


def _list_text(rows: list[dict]) -> str:
    from loopx.cli.status import fault_lines

    if not rows:
        return "no live worker (start one: loopx worker; see docs/worker.md)"
    lines = []
    for w in rows:
        lines.append(f"{w['id']}  pid {w['pid']} on {w['host']}, since {w['started_at']}, last beat {w['last_beat_at']}"
                     + (", stop requested" if w.get("stop_requested") else ""))
        lines += fault_lines(w)
        turns = w.get("turns") or [{"goal": g} for g in w["goals"]]
        for t in turns:
            since = f" since {t['started_at']}" if t.get("started_at") else ""
            how = f" ({t['executor']})" if t.get("executor") else ""
            lines.append(f"  turn on {t['goal']}{how}{since}")
        if not turns:
            lines.append("  idle")
    return "\n".join(lines)


@worker.command("list")
@click.option("--all", "show_all", is_flag=True, help="Also the workers that stopped or died lately.")
def list_workers(show_all):
    """The live workers: id, host, pid, last heartbeat and the turns each runs now.

    """
    from loopx.domain.supervision import workers

    with open_registry(readonly=True) as reg, reg.read() as tx:
        rows = workers(tx)
    emit([w for w in rows if show_all or w["state"] == "running"], _list_text)


@worker.command("stop")
@click.argument("worker_id", required=False)
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Wait until the worker records that it stopped (its running steps finish first).")
@click.option("--timeout", type=click.FloatRange(0, 86400), default=120.0, show_default=True,
              help="With --wait: how long to wait.")
def stop(worker_id, wait, timeout):
    """Ask a running worker to stop, gracefully, wherever it runs (its only one when no WORKER_ID).

    The request is kept in the registry; the worker reads it at once (or at its next heartbeat),
    starts no new turn, lets its running steps finish and exits 0.

    """
    import time

    from loopx.cli.output import actor
    from loopx.values.errors import LoopxError
    from loopx.domain.supervision import request_stop, workers

    who = actor()
    with open_registry() as reg:
        with reg.read() as tx:
            live = [w for w in workers(tx) if w["state"] == "running"]
        if worker_id is None:
            if len(live) != 1:
                names = ", ".join(w["id"] for w in live) or "none"
                raise LoopxError("worker_not_found", f"name the worker to stop (running: {names})")
            worker_id = live[0]["id"]
        else:
            match = [w["id"] for w in live if w["id"].startswith(worker_id)]
            if len(match) != 1:
                raise LoopxError("worker_not_found", f"no single running worker {worker_id!r} (see `loopx worker list`)")
            worker_id = match[0]
        asked = request_stop(reg, worker_id, by=who)
        out = {"worker_id": worker_id, "stop_requested": asked, "stopped": False}
        deadline = time.monotonic() + timeout
        while wait:
            with reg.read() as tx:
                row = next((w for w in workers(tx, limit=1000) if w["id"] == worker_id), None)
            if row is None or row["state"] != "running":
                out["stopped"], out["state"] = True, row["state"] if row else "gone"
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)  # a person waits on a process in another place: nothing to be woken by
    emit(out, lambda o: f"worker {o['worker_id']}: " + ("stopped" if o["stopped"] else "stop requested"))
    if wait and not out["stopped"]:
        raise SystemExit(1)
