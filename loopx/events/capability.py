"""Capability events: state a capability owns, and loss a repair capability records.

Only the ``capability`` role writes these. A guard (run by ``Writer.emit``, never on replay)
refuses with ``ownership_violation`` unless the acting capability owns the body's
``namespace`` (state) or declared repairs (loss). Replay applies whatever the ledger holds, so
uninstalling a plugin never makes its history unreadable.
"""

from __future__ import annotations

import json

from loopx.errors import LoopxError
from loopx.ledger import CAPABILITY, event_kind


def _owned(writer, body):
    from loopx.capabilities import check_owner

    check_owner(writer.actor, body.get("namespace"))


def set_rows(tx, event, namespace: str, values: dict) -> None:
    """Set state keys of ``event``'s goal in ``namespace`` (insert or replace), at the event's time."""
    for key, value in sorted(values.items()):
        tx.execute("DELETE FROM capability_state WHERE goal_id = ? AND namespace = ? AND key = ?",
                   (event.goal_id, namespace, key))
        tx.execute("INSERT INTO capability_state (goal_id, namespace, key, value, updated_at) VALUES (?, ?, ?, ?, ?)",
                   (event.goal_id, namespace, key, json.dumps(value, sort_keys=True), event.at))


def _owned_bounded(writer, body):
    _owned(writer, body)
    from loopx import caps

    # state_too_large: a goal's plugin state has a cap (loopx.caps), checked before the event is written.
    if writer.goal_id is not None and isinstance(body.get("values"), dict):
        caps.check_state_set(writer.tx, writer.goal_id, body.get("namespace"), body["values"])


@event_kind("capability.state_set", CAPABILITY, guard=_owned_bounded)
def state_set(tx, event):
    """``body = {"namespace", "values": {key: JSON value}}``: set keys (insert or replace)."""
    set_rows(tx, event, event.body["namespace"], event.body["values"])


@event_kind("capability.state_deleted", CAPABILITY, guard=_owned)
def state_deleted(tx, event):
    """``body = {"namespace", "keys": [key, ...]}``: delete keys (absent ones are ignored)."""
    for key in event.body["keys"]:
        tx.execute("DELETE FROM capability_state WHERE goal_id = ? AND namespace = ? AND key = ?",
                   (event.goal_id, event.body["namespace"], key))


# --- what repair capabilities record on the core's ledger --------------------------------------
# The repairs themselves (loopx.repairs) are recorded as the repair capability's own event kind,
# applied and guarded by loopx.repairs.apply_event/guard_event. What is here is what the core
# itself reads: loss a repair recorded (the hash-chain check honours it on every should-run,
# capability installed or not), and the two state operations a rebuild needs.


def _declared_repairs(writer, body):
    from loopx.capabilities import capability_of, load

    name = capability_of(writer.actor)
    cap = load().get(name) if name else None
    if cap is None or not cap.repairs:
        raise LoopxError("ownership_violation", f"{writer.actor} declared no repairs, so it may not record ledger loss",
                         capability=name)
    for field in ("lost", "acknowledged"):
        value = body.get(field)
        if not isinstance(value, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0
                                                  for n in value):
            raise LoopxError("invalid_argument", f"{field} must be a list of event numbers")
    if not body["lost"] and not body["acknowledged"]:
        raise LoopxError("invalid_argument", "a loss record names lost or acknowledged event numbers")


@event_kind("capability.repaired")
def repaired(tx, event):
    """A repair written when LoopX's core still named the repair event (older registries):
    replayed by the core's repair API (:func:`loopx.repairs.apply_event`), whether or not a repair
    capability is installed; nobody writes it any more (no writers)."""
    from loopx import repairs

    repairs.apply_event(tx, event)


@event_kind("capability.loss_recorded", CAPABILITY, guard=_declared_repairs)
def loss_recorded(tx, event):
    """``body = {"lost": [seq...], "acknowledged": [seq...]}``: event numbers a repair found lost
    (never reused) and chain breaks it acknowledged. Changes no state; :mod:`loopx.integrity`
    reads it so that recorded loss is not reported as fresh damage."""


def rebuild_state(tx, event, *, instead=None) -> None:
    """Clear ``event``'s goal's current state and re-apply its events before ``event``.

    ``instead(earlier)`` may handle an earlier event itself (returning True), e.g. an earlier
    rebuild that is put back (:func:`put_rows`) rather than replayed, which keeps replay linear.
    """
    from loopx import ledger
    from loopx.store import schema

    for table in reversed(list(schema.GOAL_TABLES)):
        column = "id" if table == "goals" else "goal_id"
        tx.execute(f"DELETE FROM {table} WHERE {column} = ?", (event.goal_id,))
    for earlier in ledger.events(tx, event.goal_id):
        if earlier.seq >= event.seq:
            break
        if instead is not None and instead(earlier):
            continue
        ledger.apply(tx, earlier)


#: The tables whose rows a repair may put back (human control a rebuild must never drop).
PUT_BACK_TABLES = ("gates", "todos", "evidence")


def put_rows(tx, event, kept: dict) -> None:
    """Re-insert rows of ``event``'s goal a repair kept (``{table: [row, ...]}``, tables of
    :data:`PUT_BACK_TABLES`); each replaces the row with the same key. Others are ignored."""
    from loopx.store import schema

    for table, rows in sorted((kept or {}).items()):
        if table not in PUT_BACK_TABLES:
            continue
        keys = schema.GOAL_TABLES[table]
        for row in rows:
            # Column names come from the ledger: only plain lowercase names reach the SQL.
            if row.get("goal_id") != event.goal_id or not all(c[:1].isalpha() and c.isascii() and c.islower()
                                                                  and c.replace("_", "").isalnum() for c in row):
                continue
            tx.execute(f"DELETE FROM {table} WHERE {' AND '.join(f'{k} = ?' for k in keys)}",
                       tuple(row[k] for k in keys))
            cols = sorted(row)
            tx.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                       tuple(row[c] for c in cols))
            if table == "todos":  # the ready index follows the todo put back (loopx.todo_ready)
                from loopx import todo_ready

                todo_ready.resync(tx, event.goal_id, row["id"])
