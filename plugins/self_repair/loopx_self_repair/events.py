"""Self-repair's own event kind, ``self_repair.repaired``: what each repair does to current state.

Registered through ``loopx_register_event_kinds`` (see ``plugin.py``), together with its former
name ``capability.repaired``: LoopX's core defined that kind before the repair vocabulary moved
into this plugin, and older registries hold it. Both replay through :func:`apply`, so a rebuild
of an older registry gives the state it had.

Each repair takes ``(tx, event)`` and uses only the event and the ledger, like every apply
function. A repair is the one kind of plugin event that changes the core's own rows (a claim, a
dependency list, a gate's reach, evidence's run): that is what repairing them means. Loss a
repair found is recorded by the core's ``capability.loss_recorded`` (``loopx.api.record_loss``),
which the hash-chain check reads even without this plugin.
"""

from __future__ import annotations

import json

KIND = "self_repair.repaired"
#: The kind's name before it moved out of LoopX's core; older ledgers hold it.
FORMER_KIND = "capability.repaired"
NAMESPACE = "self_repair"


def _lease_released(tx, event):
    # A claim that outlived its holder: clear it; the epoch stays, so a later claim still bumps it.
    tx.execute("UPDATE todos SET claim_agent = NULL, claim_run_id = NULL, claim_expires_at = NULL, updated_at = ?"
               " WHERE id = ? AND goal_id = ?", (event.at, event.body["todo_id"], event.goal_id))


def _dependency_dropped(tx, event):
    b = event.body
    row = tx.one("SELECT depends_on FROM todos WHERE id = ? AND goal_id = ?", (b["todo_id"], event.goal_id))
    if row is None:
        return
    deps = [d for d in json.loads(row["depends_on"]) if d not in set(b["missing"])]
    tx.execute("UPDATE todos SET depends_on = ?, updated_at = ? WHERE id = ? AND goal_id = ?",
               (json.dumps(deps), event.at, b["todo_id"], event.goal_id))
    from loopx.api import todo_changed

    todo_changed(tx, event, b["todo_id"])  # dropping a missing dependency may make it ready


def _gate_widened(tx, event):
    # A pending gate whose target vanished blocks the whole goal until a user decides it: the
    # repair never removes human control, it only makes it impossible to miss.
    tx.execute("UPDATE gates SET blocks = 'all' WHERE id = ? AND goal_id = ?", (event.body["gate_id"], event.goal_id))


def _evidence_unbound(tx, event):
    # Evidence is append-only: the observation stays; only its reference to a missing run goes
    # (the event body keeps the old run id).
    tx.execute("UPDATE evidence SET run_id = NULL WHERE id = ? AND goal_id = ?",
               (event.body["evidence_id"], event.goal_id))


def _is_rebuild(event) -> bool:
    return event.kind in (KIND, FORMER_KIND) and event.body.get("repair") in ("state_rebuilt", "data_escaped")


def _state_rebuilt(tx, event):
    """Rebuild the goal's current state from its ledger before this event, then put back what the
    repair kept (``body["kept"]``: rows of human control the ledger lacked - a gate, a claim, an
    approval, evidence - which a rebuild must never drop; see docs/state-interaction-model.md).

    Earlier rebuilds are replayed only for what they kept: each restored exactly the state its
    predecessors produce, so replaying without them gives the same rows (and keeps replay linear).
    """
    from loopx.api import put_rows, rebuild_state

    def put_back(earlier):
        if not _is_rebuild(earlier):
            return False
        put_rows(tx, earlier, earlier.body.get("kept"))
        return True

    rebuild_state(tx, event, instead=put_back)
    put_rows(tx, event, event.body.get("kept"))


REPAIRS = {
    "lease_released": _lease_released,
    "dependency_dropped": _dependency_dropped,
    "gate_widened": _gate_widened,
    "evidence_unbound": _evidence_unbound,
    "state_rebuilt": _state_rebuilt,
    # Event bodies older versions stored with NaN/Infinity or lone surrogates were rewritten
    # escaped (the originals are in evidence); the state is rebuilt from them.
    "data_escaped": _state_rebuilt,
}


def apply(tx, event):
    """``body = {"namespace", "repair": one of REPAIRS, "finding": CODE, ...the repair's fields}``."""
    REPAIRS[event.body["repair"]](tx, event)


def guard(writer, body):
    """Refuse a repair that is not one of :data:`REPAIRS` or that the acting capability did not
    declare (the core has already checked it owns the ``self_repair`` namespace)."""
    from loopx.api import LoopxError, get_capability

    repair = body.get("repair")
    if repair not in REPAIRS:
        raise LoopxError("self_repair.unknown_repair", f"unknown repair {repair!r}; known: {', '.join(sorted(REPAIRS))}")
    name = writer.actor.split(":", 1)[1]
    if repair not in get_capability(name).repairs:
        raise LoopxError("ownership_violation", f"capability {name!r} did not declare the repair {repair!r}",
                         capability=name, repair=repair)
    if body.get("namespace") != NAMESPACE:
        raise LoopxError("invalid_argument", f"a repair is recorded in namespace {NAMESPACE!r}")
