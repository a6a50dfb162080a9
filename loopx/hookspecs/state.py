"""Hooks about durable state: where it is stored, and who hears about changes."""

from loopx.hookspecs import hookspec


@hookspec
def loopx_register_stores(register):
    """Register storage backends by URL scheme.

    Call ``register(scheme, factory)`` once per scheme; ``factory(url, readonly)`` returns an
    object implementing :class:`loopx.store.base.Store`. A read-only store must make writes
    impossible (the status server relies on it). Two plugins registering one scheme is a load
    error unless one of them is a built-in default (built-ins are ``trylast``).
    """


@hookspec
def loopx_event_committed(registry, events):
    """Observe events after their transaction committed.

    ``events`` is the list of :class:`loopx.model.Event` one mutation wrote. Observers must
    not write to the registry from here and must return quickly; an exception is reported and
    never undoes the commit. A plugin that declares capabilities hears only the events of goals
    one of them serves (by the goal's capability list after the mutation).
    """
