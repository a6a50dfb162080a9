"""Capability events: state a capability owns, and loss a repair capability records.

Only the ``capability`` role writes these. A guard (run by ``Writer.emit``, never on replay)
refuses with ``ownership_violation`` unless the acting capability owns the body's
``namespace`` (state) or declared repairs (loss). Replay applies whatever the ledger holds, so
uninstalling a plugin never makes its history unreadable.
"""

from __future__ import annotations

import json

from loopx.values.errors import LoopxError
from loopx.store.queries import projections as q


def check_owned(writer, body):
    from loopx.seam.capabilities import check_owner

    check_owner(writer.actor, body.get("namespace"))


def set_rows(tx, event, namespace: str, values: dict) -> None:
    """Set state keys of ``event``'s goal in ``namespace`` (insert or replace), at the event's time."""
    for key, value in sorted(values.items()):
        q.delete_capability_state(tx, event.goal_id, namespace, key)
        q.insert_capability_state(tx, event.goal_id, namespace, key, json.dumps(value, sort_keys=True), event.at)


def check_owned_bounded(writer, body):
    check_owned(writer, body)
    from loopx.ledger import caps

    # state_too_large: a goal's plugin state has a cap (loopx.ledger.caps), checked before the event is written.
    if writer.goal_id is not None and isinstance(body.get("values"), dict):
        caps.check_state_set(writer.tx, writer.goal_id, body.get("namespace"), body["values"])


def state_set(tx, event):
    """``body = {"namespace", "values": {key: JSON value}}``: set keys (insert or replace)."""
    set_rows(tx, event, event.body["namespace"], event.body["values"])


def state_deleted(tx, event):
    """``body = {"namespace", "keys": [key, ...]}``: delete keys (absent ones are ignored)."""
    for key in event.body["keys"]:
        q.delete_capability_state(tx, event.goal_id, event.body["namespace"], key)


# --- what repair capabilities record on the core's ledger --------------------------------------
# The repairs themselves (loopx.domain.repairs) are recorded as the repair capability's own event kind,
# applied and guarded by loopx.domain.repairs.apply_event/guard_event. What is here is what the core
# itself reads: loss a repair recorded (the hash-chain check honours it on every should-run,
# capability installed or not), and the core's old name for a repair event (older registries).


def check_declared_repairs(writer, body):
    from loopx.seam.capabilities import capability_of, load

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


def repaired(tx, event, replay):
    """A repair written when LoopX's core still named the repair event (older registries):
    replayed by the core's repair API (:func:`loopx.ledger.events.repair.apply_event`), whether or not a repair
    capability is installed; nobody writes it any more (no writers)."""
    from loopx.ledger.events.repair import apply_event

    apply_event(tx, event, replay)


repaired.replays = True  # called with the ledger's apply, as apply_event is (loopx.ledger.events.table.EventKind)


def loss_recorded(tx, event):
    """``body = {"lost": [seq...], "acknowledged": [seq...]}``: event numbers a repair found lost
    (never reused) and chain breaks it acknowledged. Changes no state; :mod:`loopx.ledger.integrity`
    reads it so that recorded loss is not reported as fresh damage."""
