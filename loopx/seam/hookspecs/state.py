"""Hooks about durable state: where it is stored, and who hears about changes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopx.seam.hookspecs import hookspec, spec_names

if TYPE_CHECKING:
    from loopx.model import Event, Gate
    from loopx.seam.plugin_register import StoreRegistrar
    from loopx.ledger.registry import Registry
    from loopx.ledger.writer import Writer


@hookspec
def loopx_register_stores(register: StoreRegistrar) -> None:
    """Register storage backends by URL scheme.

    Call ``register(scheme, factory)`` once per scheme; ``factory(url, readonly)`` returns an
    object implementing :class:`loopx.store.base.Store`. A read-only store must make writes
    impossible (the status server relies on it). Two plugins registering one scheme is a load
    error unless one of them is a built-in default (built-ins are ``trylast``).
    """


@hookspec
def loopx_event_committed(registry: Registry, events: list[Event]) -> None:
    """Observe events after their transaction committed.

    ``events`` is the list of :class:`loopx.model.Event` one mutation wrote. Observers must
    not write to the registry from here and must return quickly; an exception is reported and
    never undoes the commit. A plugin that declares capabilities hears only the events of goals
    one of them serves (by the goal's capability list after the mutation).
    """


@hookspec
def loopx_gate_decided(writer: Writer, gate: Gate, decision: str) -> None:
    """A user decided a gate of a goal one of the plugin's capabilities serves: write the
    capability's own part of that decision, in the decision's own transaction.

    ``decision`` is ``approve``, ``reject`` or ``reopen``; ``gate`` the :class:`loopx.model.Gate`
    as it stands after it; ``writer`` the mutation's writer (the deciding user): emit through it
    (``loopx.api.todos.reopen_in``, ...) and write the capability's state with
    ``loopx.api.state.acting(writer, CAPABILITY)``. Return nothing. Called in the caller's thread with no
    deadline, so keep it to a few indexed reads and writes. It fails closed: an implementation that
    raises refuses the whole decision (``plugin_error`` naming the plugin, nothing written);
    disable the plugin to decide without it.
    """


def __dir__() -> list[str]:
    return spec_names(globals())  # what pluggy's add_hookspecs looks at: the specifications only
