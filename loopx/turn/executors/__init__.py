"""Executor providers, and the one way LoopX runs a child process.

A provider carries out one turn under a contract. Providers are registered through the
``loopx_register_executors(register)`` hook (the built-in ``shell`` provider too): the host
owns registration and refuses a second provider for one name. Built in: ``shell`` (the
contract's own commands), ``claude-code`` and ``codex`` (real agent CLIs) and ``command`` (any
other program, from an argv template). Child processes are run by :func:`loopx.sandbox.process.run_command`
(still importable from here). A governed turn around a provider lives in :mod:`loopx.turn.governed`.
"""

from __future__ import annotations

from loopx.values.errors import LoopxError

# The one way LoopX runs a child process lives in loopx.sandbox.process (below the domain layer, so that
# `loopx exec` can use it without importing executors); importable from here as before.
from loopx.sandbox.process import TAIL_BYTES, run_command  # noqa: E402,F401
from loopx.turn.executors.protocol import CheckedExecutor, Executor, InterruptibleExecutor, TurnResult  # noqa: E402,F401


def providers() -> dict:
    """``{name: provider}`` from every plugin's ``loopx_register_executors``.

    The one rule for overriding (``loopx.seam.plugins.named``): a plugin's provider replaces a
    built-in one of the same name; two plugins registering one name is a ``plugin_error``.
    """
    from loopx.seam import plugins
    from loopx.values.validate import check_name

    found = {}
    for name, (provider, plugin) in plugins.named(plugins.hooks().register_executors(), "executor").items():
        try:
            check_name(name, what="executor name")
        except LoopxError as err:
            plugins.report_fault(plugin, "loopx_register_executors", f"registered a bad name: {err.message}")
            continue
        if not isinstance(provider, Executor):
            plugins.report_fault(plugin, "loopx_register_executors",
                                 f"registered executor {name!r}, which has no run_turn(registry, contract, agent=...)")
            continue
        found[name] = provider
    return found


def get(name: str):
    """The provider called ``name`` (``not_found`` naming the ones there are)."""
    found = providers()
    if name not in found:
        raise LoopxError("not_found", f"no executor {name!r} (available: {', '.join(sorted(found)) or 'none'})")
    return found[name]
