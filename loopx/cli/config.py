"""``loopx config``: settings kept in the registry (the worker's executors, where notifications go)."""

from __future__ import annotations

import click

from loopx.cli.output import LoopxCommand, LoopxGroup, actor, emit, open_registry


@click.group(cls=LoopxGroup)
def config():
    """Settings kept in the registry: the worker's executors and where notifications go."""


@config.command("set", cls=LoopxCommand)
@click.argument("key")
@click.argument("value")
def config_set(key, value):
    """Set KEY to VALUE (user only).

    Keys: executor, executor.<goal id> (an executor name, or `none`), notify.command,
    notify.webhook, notify.min_interval_seconds (docs/worker.md); limits.memory_mb,
    limits.processes, limits.cpu_seconds (each step's limits, a number or `none`; docs/security.md).
    """
    from loopx.domain import supervision

    if (key == "executor" or key.startswith("executor.")) and value != "none":
        from loopx.turn import executors

        executors.get(value)  # a name no provider has is refused now, not at the worker's next turn
    with open_registry() as reg:
        out = supervision.set_setting(reg, actor(), key, value)
    emit(out, lambda r: f"{r['key']} = {r['value']}")


@config.command("unset", cls=LoopxCommand)
@click.argument("key")
def config_unset(key):
    """Remove KEY (user only).

    """
    from loopx.domain import supervision

    with open_registry() as reg:
        out = supervision.set_setting(reg, actor(), key, None)
    emit(out, lambda r: f"{r['key']} unset")


@config.command("list", cls=LoopxCommand)
def config_list():
    """Every setting.

    """
    from loopx.domain import supervision

    with open_registry(readonly=True) as reg, reg.read() as tx:
        out = supervision.settings(tx)
    emit(out, lambda r: "\n".join(f"{k} = {v}" for k, v in r.items()) or "no settings")
