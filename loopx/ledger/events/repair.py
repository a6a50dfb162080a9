"""What each repair does to a goal's current state: the apply functions of repair events.

The vocabulary of :mod:`loopx.domain.repairs` (the repair API), applied from the event alone like
every apply function, so a rebuild or a copy replays repairs like any other event. A repair
capability's own event kind (``NAME.repaired``) applies through :func:`apply_event`; so does
``capability.repaired``, the name older versions wrote (registered in
:mod:`loopx.ledger.events.capability`, written by nobody any more).
"""

from __future__ import annotations

import json

#: The core's old name for repair events (older registries hold it).
FORMER_KIND = "capability.repaired"
#: Repairs that rebuild the whole goal from its ledger.
REBUILDS = ("state_rebuilt", "data_escaped")


def _lease_released(tx, event, _replay):
    from loopx.store.queries import repair as queries

    # A claim that outlived its holder: clear it; the epoch stays, so a later claim still bumps it.
    queries.release_lease(tx, event.body["todo_id"], event.goal_id, event.at)


def _dependency_dropped(tx, event, _replay):
    from loopx.ledger import todo_ready
    from loopx.store.queries import repair as queries

    b = event.body
    row = queries.todo_dependencies(tx, b["todo_id"], event.goal_id)
    if row is None:
        return
    deps = [d for d in json.loads(row["depends_on"]) if d not in set(b["missing"])]
    queries.set_todo_dependencies(tx, b["todo_id"], event.goal_id, json.dumps(deps), event.at)
    todo_ready.resync(tx, event.goal_id, b["todo_id"])  # dropping a missing dependency may make it ready


def _gate_widened(tx, event, _replay):
    from loopx.store.queries import repair as queries

    # A pending gate whose target vanished blocks the whole goal until a user decides it: the
    # repair never removes human control, it only makes it impossible to miss.
    queries.widen_gate(tx, event.body["gate_id"], event.goal_id)


def _evidence_unbound(tx, event, _replay):
    from loopx.store.queries import repair as queries

    # Evidence is append-only: the observation stays; only its reference to a missing run goes
    # (the event body keeps the old run id).
    queries.unbind_evidence(tx, event.body["evidence_id"], event.goal_id)


def _state_rebuilt(tx, event, replay):
    """Rebuild the goal's current state from its ledger before this event, then put back what the
    repair kept (``body["kept"]``: rows of human control the ledger lacked, which a rebuild must
    never drop; see docs/state-interaction-model.md).

    Earlier rebuilds are replayed only for what they kept: each restored exactly the state its
    predecessors produce, so replaying without them gives the same rows (and keeps replay linear).
    """
    def put_back(earlier):
        if earlier.kind not in (event.kind, FORMER_KIND) or earlier.body.get("repair") not in REBUILDS:
            return False
        put_rows(tx, earlier, earlier.body.get("kept"))
        return True

    rebuild_state(tx, event, replay, instead=put_back)
    put_rows(tx, event, event.body.get("kept"))


#: Every repair kind, with what it does to current state.
KINDS = {
    "lease_released": _lease_released,
    "dependency_dropped": _dependency_dropped,
    "gate_widened": _gate_widened,
    "evidence_unbound": _evidence_unbound,
    "state_rebuilt": _state_rebuilt,
    # Event bodies rewritten escaped (the originals are in evidence): the state is rebuilt from them.
    "data_escaped": _state_rebuilt,
}
REPAIRS = tuple(KINDS)


def apply_event(tx, event, replay) -> None:
    """The ``apply`` of a capability's repair event kind: ``body = {"namespace", "repair": one of
    :data:`KINDS`, "finding": CODE, ...the repair's fields}``. ``replay(tx, event)`` is the
    ledger's apply, which a rebuild runs on the goal's earlier events."""
    KINDS[event.body["repair"]](tx, event, replay)


#: Marks an apply function that replays other events: it is called as ``apply(tx, event, replay)``
#: (:attr:`loopx.ledger.events.table.EventKind.replays`), so this package never imports its own dispatcher.
apply_event.replays = True


def rebuild_state(tx, event, replay, *, instead=None) -> None:
    """Clear ``event``'s goal's current state and re-apply (``replay(tx, earlier)``) its events
    before ``event``.

    ``instead(earlier)`` may handle an earlier event itself (returning True), e.g. an earlier
    rebuild that is put back (:func:`put_rows`) rather than replayed, which keeps replay linear.
    """
    from loopx.ledger.events.rows import event_from_row
    from loopx.store import schema
    from loopx.store.queries import repair as queries

    for table in reversed(list(schema.GOAL_TABLES)):
        queries.clear_goal_rows(tx, table, "id" if table == "goals" else "goal_id", event.goal_id)
    rows = queries.events_before(tx, event.goal_id, event.seq)
    for earlier in map(event_from_row, rows):
        if instead is not None and instead(earlier):
            continue
        replay(tx, earlier)


#: The tables whose rows a repair may put back (human control a rebuild must never drop).
PUT_BACK_TABLES = ("gates", "todos", "evidence")


def put_rows(tx, event, kept: dict) -> None:
    """Re-insert rows of ``event``'s goal a repair kept (``{table: [row, ...]}``, tables of
    :data:`PUT_BACK_TABLES`); each replaces the row with the same key. Others are ignored."""
    from loopx.store import schema
    from loopx.store.queries import repair as queries

    for table, rows in sorted((kept or {}).items()):
        if table not in PUT_BACK_TABLES:
            continue
        keys = schema.GOAL_TABLES[table]
        for row in rows:
            # Column names come from the ledger: only plain lowercase names reach the SQL.
            if row.get("goal_id") != event.goal_id or not all(c[:1].isalpha() and c.isascii() and c.islower()
                                                                  and c.replace("_", "").isalnum() for c in row):
                continue
            queries.put_row(tx, table, keys, row)
            if table == "todos":  # the ready index follows the todo put back (loopx.ledger.todo_ready)
                from loopx.ledger import todo_ready

                todo_ready.resync(tx, event.goal_id, row["id"])
