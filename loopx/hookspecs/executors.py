"""Hooks for executor providers: what carries out one agent turn."""

from loopx.hookspecs import hookspec


@hookspec
def loopx_register_executors(register):
    """Register executor providers.

    Call ``register(name, provider)``; ``provider.run_turn(registry, contract, *, agent)``
    carries out one turn under ``contract`` (the dict ``quota should-run`` returned), records
    evidence, and returns the dict it passes to ``run finish`` (``outcome``, ``tokens``,
    ``cost``, ``handoff``). Providers run commands with ``LOOPX_ACTOR=executor``.
    """
