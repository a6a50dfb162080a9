"""Capability events: state a capability owns, and repairs a capability records on core state.

Only the ``capability`` role writes these, and every body names the ``namespace`` it is written
in. A guard (run by ``Writer.emit``, never on replay) refuses with ``ownership_violation``
unless the acting capability owns that namespace, and, for ``capability.repaired``, declared
that kind of repair. Replay applies whatever the ledger holds, so uninstalling a plugin never
makes its history unreadable.
"""

from __future__ import annotations

import json

from loopx.errors import LoopxError
from loopx.ledger import CAPABILITY, event_kind


def _owned(writer, body):
    from loopx.capabilities import check_owner

    check_owner(writer.actor, body.get("namespace"))


def _owned_repair(writer, body):
    from loopx.capabilities import check_owner

    cap = check_owner(writer.actor, body.get("namespace"))
    if body.get("repair") not in REPAIRS:
        raise LoopxError("invalid_argument", f"unknown repair {body.get('repair')!r}; known: {', '.join(sorted(REPAIRS))}")
    if body["repair"] not in cap.repairs:
        raise LoopxError("ownership_violation",
                         f"capability {cap.name!r} did not declare the repair {body['repair']!r}",
                         capability=cap.name, repair=body["repair"])


def set_rows(tx, event, namespace: str, values: dict) -> None:
    """Set state keys of ``event``'s goal in ``namespace`` (insert or replace), at the event's time."""
    for key, value in sorted(values.items()):
        tx.execute("DELETE FROM capability_state WHERE goal_id = ? AND namespace = ? AND key = ?",
                   (event.goal_id, namespace, key))
        tx.execute("INSERT INTO capability_state (goal_id, namespace, key, value, updated_at) VALUES (?, ?, ?, ?, ?)",
                   (event.goal_id, namespace, key, json.dumps(value, sort_keys=True), event.at))


@event_kind("capability.state_set", CAPABILITY, guard=_owned)
def state_set(tx, event):
    """``body = {"namespace", "values": {key: JSON value}}``: set keys (insert or replace)."""
    set_rows(tx, event, event.body["namespace"], event.body["values"])


@event_kind("capability.state_deleted", CAPABILITY, guard=_owned)
def state_deleted(tx, event):
    """``body = {"namespace", "keys": [key, ...]}``: delete keys (absent ones are ignored)."""
    for key in event.body["keys"]:
        tx.execute("DELETE FROM capability_state WHERE goal_id = ? AND namespace = ? AND key = ?",
                   (event.goal_id, event.body["namespace"], key))


# --- repairs of core state -------------------------------------------------------------------
# Each takes (tx, event) and uses only the event and the ledger, like every apply function.


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


def _gate_widened(tx, event):
    # A pending gate whose target vanished blocks the whole goal until a user decides it: the
    # repair never removes human control, it only makes it impossible to miss.
    tx.execute("UPDATE gates SET blocks = 'all' WHERE id = ? AND goal_id = ?", (event.body["gate_id"], event.goal_id))


def _evidence_unbound(tx, event):
    # Evidence is append-only: the observation stays; only its reference to a missing run goes
    # (the event body keeps the old run id).
    tx.execute("UPDATE evidence SET run_id = NULL WHERE id = ? AND goal_id = ?",
               (event.body["evidence_id"], event.goal_id))


def _state_rebuilt(tx, event):
    """Rebuild the goal's current state from its ledger before this event, then put back what the
    repair kept (``body["kept"]``: rows of human control the ledger lacked - a gate, a claim, an
    approval, evidence - which a rebuild must never drop; see docs/state-interaction-model.md).

    Earlier rebuilds are replayed only for what they kept: each restored exactly the state its
    predecessors produce, so replaying without them gives the same rows (and keeps replay linear).
    """
    from loopx import ledger
    from loopx.store import schema

    for table in reversed(list(schema.GOAL_TABLES)):
        column = "id" if table == "goals" else "goal_id"
        tx.execute(f"DELETE FROM {table} WHERE {column} = ?", (event.goal_id,))
    for earlier in ledger.events(tx, event.goal_id):
        if earlier.seq >= event.seq:
            break
        if earlier.kind == "capability.repaired" and earlier.body.get("repair") in ("state_rebuilt", "data_escaped"):
            _put_back(tx, earlier)
            continue
        ledger.apply(tx, earlier)
    _put_back(tx, event)


def _put_back(tx, event):
    """Re-insert the rows a rebuild kept (each replaces the row with the same key)."""
    from loopx.store import schema

    for table, rows in sorted((event.body.get("kept") or {}).items()):
        if table not in ("gates", "todos", "evidence"):
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


REPAIRS = {
    "lease_released": _lease_released,
    "dependency_dropped": _dependency_dropped,
    "gate_widened": _gate_widened,
    "evidence_unbound": _evidence_unbound,
    "state_rebuilt": _state_rebuilt,
    # Event bodies older versions stored with NaN/Infinity or lone surrogates were rewritten
    # escaped (the originals are in this event's body); the state is rebuilt from them.
    "data_escaped": _state_rebuilt,
}


@event_kind("capability.repaired", CAPABILITY, guard=_owned_repair)
def repaired(tx, event):
    """``body = {"namespace", "repair": one of REPAIRS, "finding": CODE, ...the repair's fields}``."""
    REPAIRS[event.body["repair"]](tx, event)
