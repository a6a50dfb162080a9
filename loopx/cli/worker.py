"""``loopx worker`` (run every goal that should run) and ``loopx config`` (the settings it reads)."""

from __future__ import annotations

import click

from loopx.cli.output import LoopxCommand, LoopxGroup, actor, emit, open_registry


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
def worker(concurrency, executor, agent, grace_seconds, lease_seconds, beat_seconds, retry_seconds, exit_when_idle,
           print_unit):
    """Take governed turns for every goal that should run, by cadence and budget, until stopped.

    Each goal gets its configured executor; SIGTERM / Ctrl-C lets running steps finish (up to
    --grace-seconds), closes their runs `interrupted` and exits. Heartbeats show in `loopx status`.

    """
    from loopx import worker as worker_mod
    from loopx.cli.output import REGISTRY_KEY
    from loopx.errors import LoopxError

    url = click.get_current_context().meta.get(REGISTRY_KEY)
    if print_unit:
        click.echo(worker_mod.unit(url, concurrency, executor, grace_seconds), nl=False)
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
                          retry_seconds=retry_seconds)
    out = w.run()
    emit(out, _worker_text)
    if out.get("stopped_by"):
        import signal

        raise SystemExit(128 + int(signal.Signals[out["stopped_by"]]))


@click.group(cls=LoopxGroup)
def config():
    """Settings kept in the registry: the worker's executors and where notifications go."""


@config.command("set", cls=LoopxCommand)
@click.argument("key")
@click.argument("value")
def config_set(key, value):
    """Set KEY to VALUE (user only).

    Keys: executor, executor.<goal id> (an executor name, or `none`), notify.command,
    notify.webhook, notify.min_interval_seconds (docs/worker.md).
    """
    from loopx import supervision

    if (key == "executor" or key.startswith("executor.")) and value != "none":
        from loopx import executors

        executors.get(value)  # a name no provider has is refused now, not at the worker's next turn
    with open_registry() as reg:
        out = supervision.set_setting(reg, actor(), key, value)
    emit(out, lambda r: f"{r['key']} = {r['value']}")


@config.command("unset", cls=LoopxCommand)
@click.argument("key")
def config_unset(key):
    """Remove KEY (user only).

    """
    from loopx import supervision

    with open_registry() as reg:
        out = supervision.set_setting(reg, actor(), key, None)
    emit(out, lambda r: f"{r['key']} unset")


@config.command("list", cls=LoopxCommand)
def config_list():
    """Every setting.

    """
    from loopx import supervision

    with open_registry(readonly=True) as reg, reg.read() as tx:
        out = supervision.settings(tx)
    emit(out, lambda r: "\n".join(f"{k} = {v}" for k, v in r.items()) or "no settings")


@click.group(cls=LoopxGroup)
def notify():
    """Notifications to a person: what was sent, and a check by hand."""


@notify.command("list", cls=LoopxCommand)
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
def notify_list(limit):
    """The latest deliveries (goal, reason, channel, status, attempts), newest first.

    """
    from loopx import notify as notify_mod

    with open_registry(readonly=True) as reg:
        out = notify_mod.list_recent(reg, limit=limit)
    emit(out, lambda rows: "\n".join(f"{r['at']}  {r['goal_id']}  {r['reason']:<18} {r['channel']:<10} {r['status']}"
                                     f" ({r['attempts']} attempt(s))" for r in rows) or "nothing sent yet")


@notify.command("check", cls=LoopxCommand)
@click.option("--goal-id", "goal_ids", multiple=True, help="A goal to look at (repeat it; default: every open goal).")
def notify_check(goal_ids):
    """Look now for goals that came to need a person and notify (what `loopx worker` does as it runs).

    """
    from loopx import notify as notify_mod

    with open_registry() as reg:
        if not goal_ids:
            with reg.read() as tx:
                goal_ids = [r["id"] for r in tx.query("SELECT id FROM goals WHERE status = 'open'")]
        out = notify_mod.check_goals(reg, list(goal_ids))
    emit(out, lambda rows: "\n".join(f"sent {r['id']}: {r['goal_id']} {r['reason']}" for r in rows) or "nothing new")
