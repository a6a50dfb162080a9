"""The one function that applies an event to the current-state tables, and the lookup of what
each kind does (:func:`kind`: the core's table, :mod:`loopx.ledger.events.table`, or a plugin's).

:func:`apply` is used both when an event is first written (:func:`loopx.ledger.log.append`) and
when a ledger is replayed, so "replayed ledger == current state" holds by construction. A
rebuild repair re-applies the goal's earlier events (:func:`loopx.ledger.events.repair.rebuild_state`):
it is handed this :func:`apply` as an argument (:attr:`loopx.ledger.events.table.EventKind.replays`)
rather than importing it, so the events package has no import cycle, and the ledger imports it,
never the reverse.
"""

from __future__ import annotations

from loopx.values.errors import LoopxError
from loopx.ledger.events.roles import CAPABILITY, role
from loopx.ledger.events.table import AREAS, EventKind
from loopx.model import Event
from loopx.store.queries import projections as q

#: Core kinds that moved out of the core into a plugin, with the plugin that took each over.
#: The ledger of an older registry still holds them: they are never written again, and replay
#: through the plugin that registers them as a former name (``formerly=`` of
#: ``loopx_register_event_kinds``); without it they stay in the ledger, replay as no-ops and are
#: reported as a kind no installed plugin knows (:func:`unknown_kind`). None today: the one there
#: was, ``capability.repaired``, replays through the core's repair API again (a kind nobody
#: writes, :mod:`loopx.ledger.events.capability`), so the core names no plugin.
RETIRED_KINDS: dict[str, str] = {}

#: The suffix of a capability's repair event kind (``NAME.repaired``): the core's repair
#: vocabulary (:mod:`loopx.ledger.events.repair`), which the core replays itself (:func:`core_repair`).
REPAIRED = ".repaired"

# The core kinds loaded so far, and the areas they were loaded from (an area loads on first use).
_loaded: dict[str, EventKind] = {}
_loaded_areas: set[str] = set()


def kind(name: str) -> EventKind:
    """The kind called ``name``: the core's (loading its area on first use) or a plugin's
    (``loopx_register_event_kinds``) for a name outside the core's areas."""
    found = _loaded.get(name)
    if found is None:
        area = name.split(".", 1)[0]
        load = AREAS.get(area)
        if load is not None and area not in _loaded_areas:
            _loaded.update(load())
            _loaded_areas.add(area)
            found = _loaded.get(name)
        if found is None and (load is None or name in RETIRED_KINDS):
            found = plugin_kind(name)
    if found is None:
        raise LoopxError("invalid_argument", f"unknown event kind {name!r}")
    return found


def unknown_kind(name: str) -> str | None:
    """``None`` if installed code knows event kind ``name``; else why not, in one line.

    Such events stay in the ledger (their hashes still verify) and replay as no-ops; this is
    what ``loopx history`` shows beside them and what ``registry copy`` names when their
    absence makes a replay differ.
    """
    area = name.split(".", 1)[0]
    if area in AREAS and name not in RETIRED_KINDS:
        return None
    try:
        kind(name)
        return None
    except LoopxError:
        pass
    owner = RETIRED_KINDS.get(name)
    if owner:
        return f"written by LoopX core before it moved to the {owner} plugin, which is not installed"
    return f"written by a plugin that is not installed (namespace {area!r})"


def core_repair(event: Event) -> bool:
    """Whether ``event`` is a repair the core replays itself when the plugin that wrote it is not
    installed: kind ``NS.repaired`` outside the core's areas, written as ``capability:…`` (never
    by a user or an agent: only plugin code may act as a capability), its body naming namespace
    ``NS`` and a repair of the core's vocabulary.

    Such a kind can only have been written through the core's repair guard: the plugin seam
    accepts a ``NS.repaired`` kind only with the core's repair apply and guard, writable by
    capabilities alone (:func:`loopx.seam.plugins.event_kinds`).
    """
    name = event.kind
    if not name.endswith(REPAIRED) or name.count(".") != 1:
        return False
    namespace = name.split(".", 1)[0]
    if namespace in AREAS or role(event.actor) != CAPABILITY or not isinstance(event.body, dict):
        return False
    from loopx.ledger.events.repair import KINDS as vocabulary

    return event.body.get("namespace") == namespace and event.body.get("repair") in vocabulary


def unknown_event(event: Event) -> str | None:
    """:func:`unknown_kind` for one event: ``None`` too for a repair the core replays itself
    (:func:`core_repair`), whether or not the plugin that wrote it is installed."""
    why = unknown_kind(event.kind)
    return None if why is not None and core_repair(event) else why


def plugin_kind(name: str) -> EventKind | None:
    """The plugin-registered kind ``name``, or ``None`` (not cached: plugins come and go in tests)."""
    from loopx.seam import plugins

    found = plugins.event_kinds(tuple(AREAS) + ("core", "loopx"), RETIRED_KINDS).get(name)
    if found is None:
        return None
    apply, writers, guard, _plugin = found
    namespace = name.split(".", 1)[0]

    def checked(writer, body):
        # A capability writes a plugin's kind only in a namespace it owns: one capability cannot
        # write another's vocabulary.
        if role(writer.actor) == CAPABILITY:
            from loopx.seam.capabilities import check_owner

            check_owner(writer.actor, namespace)
        if guard is not None:
            guard(writer, body)

    return EventKind(name, apply, writers, checked)


def apply(tx, event: Event, *, summary: bool = True) -> None:
    """Apply one event to the current-state tables (the same code path as a replay).

    An event of a plugin's kind whose plugin is not installed any more (or of a retired core
    kind, :data:`RETIRED_KINDS`, whose plugin is not) replays as a no-op: its history stays
    readable (:func:`unknown_kind` names it); a capability's repair (:func:`core_repair`)
    replays through the core's repair API instead. An unknown core kind is an error. The goal's attention summary
    (:mod:`loopx.ledger.attention`) is refreshed too, unless the event's area cannot change it;
    ``summary=False`` leaves that to the caller (:func:`apply_many`).
    """
    if event.kind.split(".", 1)[0] in AREAS and event.kind not in RETIRED_KINDS:
        _run(kind(event.kind), tx, event)
    else:
        found = plugin_kind(event.kind)
        if found is not None:
            _run(found, tx, event)
        elif core_repair(event):
            # Its plugin is gone, but what a repair does is the core's (the plugin applied it
            # through the same function, which the core's old name for repairs still uses):
            # replay it, so the state stays its replayed ledger.
            _run(kind("capability.repaired"), tx, event)
    q.goal_revised(tx, event.goal_id, event.seq, event.at)
    if summary and event.kind.split(".", 1)[0] not in _QUIET_AREAS:
        from loopx.ledger import attention

        attention.refresh(tx, event.goal_id)


def _run(found: EventKind, tx, event: Event) -> None:
    if found.replays:
        found.apply(tx, event, apply)  # a rebuild: it re-applies earlier events through this dispatcher
    else:
        found.apply(tx, event)


# Areas whose events never move a goal in the overview (kept in step with loopx.ledger.attention).
_QUIET_AREAS = frozenset({"action", "evidence", "reward"})


def apply_many(tx, batch: list[Event]) -> None:
    """Apply already-appended events in order, refreshing each goal's summary once at the end.

    The same state as :func:`apply` one by one (the summary is a function of the rows), for
    bulk loads such as the benchmark's fill.
    """
    from loopx.ledger import attention

    touched: dict[str, None] = {}
    for event in batch:
        apply(tx, event, summary=False)
        touched[event.goal_id] = None
    for goal_id in touched:
        attention.refresh(tx, goal_id)
