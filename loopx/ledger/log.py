"""The ledger: every change to a goal is an event appended to the goal's ledger in the same
transaction that applies it to the current-state tables.

:func:`apply` (from :mod:`loopx.ledger.events.applying`) is used both when an event is first written
and when a ledger is replayed, so "replayed ledger == current state" holds by construction;
:func:`replayed_snapshot` and :func:`snapshot` let anyone check it.

Event kinds are named ``<area>.<verb>``; the core's are listed, with the actor roles that may
cause each, in one table (:mod:`loopx.ledger.events.table`), their apply functions in
``loopx.ledger.events.<area>``. The ledger imports the events package; nothing there imports the ledger.
"""

from __future__ import annotations

import json
from typing import Callable

import attrs

from loopx.ledger import integrity
from loopx.values import jsonsafe  # every append uses them
from loopx.values.errors import LoopxError
from loopx.ledger.events import body_text
# The names below are the ledger's public ones (imported from here across the code base).
from loopx.ledger.events.applying import (  # noqa: F401
    REPAIRED,
    RETIRED_KINDS,
    apply,
    apply_many,
    core_repair,
    kind,
    plugin_kind,
    unknown_event,
    unknown_kind,
)
from loopx.ledger.events.body_text import member_text  # noqa: F401
from loopx.ledger.events.rows import event_from_row  # noqa: F401
from loopx.ledger.events.roles import CAPABILITY, CORE, EXECUTOR, USER, role  # noqa: F401
from loopx.ledger.events.table import AREAS, EventKind  # noqa: F401
from loopx.model import Event
from loopx.store import schema
from loopx.store.queries import ledger as queries


def append(tx, event: Event, prev_hash: str | None = None) -> Event:
    """Write ``event`` to the ledger and apply it; returns it with its global id."""
    return append_chained(tx, event, prev_hash)[0]


def append_chained(tx, event: Event, prev_hash: str | None = None) -> tuple[Event, str]:
    """:func:`append`, also returning the event's chain hash (what the next event links to).

    The body must be interoperable JSON (:func:`loopx.values.jsonsafe.problem`): whatever a command,
    a plugin or a capability put in it, nothing that a reader could not emit is ever written.
    The event is chained to ``prev_hash`` (looked up when not given; see :mod:`loopx.ledger.integrity`).
    """
    # The values inside were held to 64 levels where they entered; the body wraps them.
    found = jsonsafe.problem(event.body, jsonsafe.MAX_DEPTH + jsonsafe.ENVELOPE_DEPTH)
    if found:
        raise LoopxError("invalid_argument", f"{event.kind} refused: its data {found}")
    if prev_hash is None:
        prev = queries.prev_hash(tx, event.goal_id, event.seq)
        prev_hash = (prev["hash"] if prev else None) or integrity.GENESIS
    text = jsonsafe.canonical(event.body)
    digest = integrity.event_hash(prev_hash, event.goal_id, event.seq, event.at, event.actor, event.kind,
                                  text, event.operation_id, integrity.keyring(tx))
    row = queries.insert_event(tx, (event.goal_id, event.seq, event.at, event.actor, event.kind, text,
                                    event.operation_id, prev_hash, digest))
    event = attrs.evolve(event, id=row["id"])
    body_text.hold(event.body, text)
    try:
        apply(tx, event)
    finally:
        body_text.release()
    return event, digest


def last_hash(tx, goal_id: str) -> str:
    """The hash of the goal's newest event (what the next event links to)."""
    row = integrity.last_event(tx, goal_id)
    return (row["hash"] if row else None) or integrity.GENESIS


def events(tx, goal_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
    """A goal's events with ``seq > after``, oldest first."""
    return [event_from_row(r) for r in queries.events_after(tx, goal_id, after, limit)]


def iter_events(tx, goal_id: str, *, after: int = 0, limit: int | None = None, batch: int = 500):
    """:func:`events` as a stream: pages of ``batch`` events by sequence number (an index range
    each), so a goal's whole ledger is read in bounded memory."""
    left = limit
    while left is None or left > 0:
        size = batch if left is None else min(batch, left)
        rows = queries.events_page(tx, goal_id, after, size)
        for row in rows:
            yield event_from_row(row)
        if len(rows) < size:
            return
        after = rows[-1]["seq"]
        if left is not None:
            left -= len(rows)


def iter_rows(tx, goal_id: str, *, columns: str = "*", batch: int = 500):
    """A goal's raw ``events`` rows (``columns``, which must include ``seq``), oldest first, read
    in pages of ``batch`` (bounded memory on a ledger of any length)."""
    after = 0
    while True:
        rows = queries.events_page(tx, goal_id, after, batch, columns)
        yield from rows
        if len(rows) < batch:
            return
        after = rows[-1]["seq"]


def snapshot(tx, goal_id: str) -> dict[str, list[dict]]:
    """Every current-state row of one goal, per table, in key order."""
    out = {}
    for table, keys in schema.GOAL_TABLES.items():
        column = "id" if table == "goals" else "goal_id"
        rows = queries.goal_rows(tx, table, column, goal_id)
        # Sorted here, not by ORDER BY: a PostgreSQL database with a non-C collation would order
        # text keys differently from SQLite, and snapshots from both must compare equal.
        out[table] = sorted(rows, key=lambda r: tuple(r[k] for k in keys))
    return out


def replayed_snapshot(goal_events: list[Event]) -> dict[str, list[dict]]:
    """The state a goal's events produce when replayed into an empty scratch registry."""
    return replay(goal_events, snapshot) or {}


def replay(goal_events, read: Callable):
    """Replay one goal's events (any iterable, read once) into an empty scratch registry; returns
    ``read(tx, goal_id)`` of it (``None`` for no events)."""
    from loopx.store.sqlite import SqliteStore

    goal_events = iter(goal_events)  # any iterable: a stream of the ledger is replayed as it is read
    first = next(goal_events, None)
    if first is None:
        return None
    scratch = SqliteStore.scratch()
    try:

        def work(tx):
            import itertools

            for event in itertools.chain([first], goal_events):
                # Keep the original global id: goals and todos record it as their creation order.
                queries.insert_replayed_event(tx, (event.id, event.goal_id, event.seq, event.at, event.actor,
                                                   event.kind, json.dumps(event.body), event.operation_id))
                apply(tx, event)
            return read(tx, first.goal_id)

        return scratch.write(work)
    finally:
        scratch.close()


def normalise(snap: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Make snapshots from different backends comparable (floats vs. ints, JSON text)."""
    out = {}
    for table, rows in snap.items():
        clean = []
        for row in rows:
            clean.append({k: (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
                              and k in {"cost", "score"} else v) for k, v in row.items()})
        out[table] = clean
    return out
