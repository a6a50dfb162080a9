"""Hooks for executor providers: what carries out one agent turn."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopx.seam.hookspecs import hookspec, spec_names

if TYPE_CHECKING:
    from loopx.seam.plugin_register import ExecutorRegistrar


@hookspec
def loopx_register_executors(register: ExecutorRegistrar) -> None:
    """Register executor providers.

    Call ``register(name, provider)`` once per provider (``name``: a short machine name; two
    providers of one name are a ``plugin_error``, except that a plugin's provider replaces a
    built-in one of the same name). ``provider.run_turn(registry, contract, *, agent)`` carries
    out one turn under ``contract`` (the dict ``quota should-run`` returned, decision ``run``),
    does only the contract's ``cli_channel.steps`` (the same commands as ``next_cli_actions``),
    and returns what ``run finish`` takes: ``{"outcome": "ok"|"partial"|"failed", "tokens": int,
    "cost": float, "handoff": str}``. The core finishes the run (``loopx turn``) and records
    ``ok`` only when the run's evidence supports it; a provider never finishes it itself. An
    optional ``provider.check()`` raises a ``LoopxError`` when the provider cannot work (its
    program is missing, its configuration malformed); it is called before should-run, so no run
    is opened for nothing. An optional ``provider.interrupt()`` is called once, from another
thread, when the turn is asked to stop (SIGTERM, Ctrl-C): start no new step and return.
``provider`` implements :class:`loopx.turn.executors.protocol.Executor` (start, step, interrupt and
confinement are spelled out there).
    Every child it starts with ``run_command`` during the turn runs confined, reaching the
    registry only through the turn's broker (``docs/security.md``). Built in: ``shell``, ``claude-code``, ``codex`` and ``command``
    (see ``docs/agents.md``).
    """


def __dir__() -> list[str]:
    return spec_names(globals())  # what pluggy's add_hookspecs looks at: the specifications only
