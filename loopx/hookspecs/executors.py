"""Hooks for executor providers: what carries out one agent turn."""

from loopx.hookspecs import hookspec


@hookspec
def loopx_register_executors(register):
    """Register executor providers.

    Call ``register(name, provider)`` once per provider (``name``: a short machine name; two
    providers of one name are a ``plugin_error``, except that a plugin's provider replaces a
    built-in one of the same name). ``provider.run_turn(registry, contract, *, agent)`` carries
    out one turn under ``contract`` (the dict ``quota should-run`` returned, decision ``run``),
    does only what ``contract["interaction_contract"]["cli_channel"]["next_cli_actions"]`` lists,
    records evidence, and returns what ``run finish`` takes: ``{"outcome": "ok"|"partial"|"failed",
    "tokens": int, "cost": float, "handoff": str}``. The core finishes the run (``loopx turn``);
    a provider never finishes it itself. An optional ``provider.check()`` raises a
    ``LoopxError`` when the provider cannot work (its program is missing, its configuration
    malformed); it is called before should-run, so no run is opened for nothing. Providers run commands with ``LOOPX_ACTOR=executor``
    and ``LOOPX_RUN_ID`` set. Built in: ``shell``, ``claude-code``, ``codex`` and ``command``
    (see ``docs/agents.md``).
    """
