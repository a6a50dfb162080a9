"""The ledger: event kinds, who may write them, and the one function that applies them.

Every change to a goal is an event appended to the goal's ledger in the same transaction that
applies it to the current-state tables. :func:`apply` is used both when an event is first
written and when a ledger is replayed, so "replayed ledger == current state" holds by
construction; :func:`replayed_snapshot` and :func:`snapshot` let anyone check it.

Event kinds are named ``<area>.<verb>``; the apply functions of an area live in
``loopx.events.<area>`` and register themselves with :func:`event_kind` when imported.
"""

from __future__ import annotations

import importlib
import json
from typing import Callable

import attrs

from loopx import integrity, jsonsafe  # every append uses them
from loopx.errors import LoopxError
from loopx.model import Event
from loopx.store import schema

# Actor roles: "capability:NAME" has the role "capability".
USER, EXECUTOR, CAPABILITY, CORE = "user", "executor", "capability", "core"


class EventKind:
    """What one kind of event does, and which actor roles may cause it.

    A plain class rather than attrs: every command loads the ledger, and building an attrs
    class at import costs about half a millisecond.
    """

    __slots__ = ("name", "apply", "writers", "guard")

    def __init__(self, name: str, apply: Callable, writers: frozenset, guard: Callable | None = None):
        self.name = name
        self.apply = apply
        self.writers = writers
        #: Optional ``guard(writer, body)`` run by ``Writer.emit`` before the event is written
        #: (never on replay): it refuses with a LoopxError, e.g. capability state outside owned
        #: namespaces.
        self.guard = guard

    def __repr__(self):
        return f"EventKind({self.name!r}, writers={sorted(self.writers)})"


_KINDS: dict[str, EventKind] = {}

# Where each area's apply functions live (imported on first use).
AREAS = {
    "goal": "loopx.events.goal",
    "gate": "loopx.events.gate",
    "todo": "loopx.events.todo",
    "action": "loopx.events.action",
    "quota": "loopx.events.quota",
    "run": "loopx.events.run",
    "evidence": "loopx.events.evidence",
    "reward": "loopx.events.reward",
    "capability": "loopx.events.capability",
}


#: Core kinds that moved out of the core into a plugin, with the plugin that took each over.
#: The ledger of an older registry still holds them: they are never written again, and replay
#: through the plugin that registers them as a former name (``formerly=`` of
#: ``loopx_register_event_kinds``); without it they stay in the ledger, replay as no-ops and are
#: reported as a kind no installed plugin knows (:func:`unknown_kind`). None today: the one there
#: was, ``capability.repaired``, replays through the core's repair API again (a kind nobody
#: writes, :mod:`loopx.events.capability`), so the core names no plugin.
RETIRED_KINDS: dict[str, str] = {}


def event_kind(name: str, *writers: str, guard: Callable | None = None):
    """Register the decorated ``apply(tx, event)`` function for event kind ``name``."""

    def register(fn):
        _KINDS[name] = EventKind(name, fn, frozenset(writers), guard)
        return fn

    return register


def kind(name: str) -> EventKind:
    """The registered kind called ``name``, importing its area on first use.

    A name outside the core's areas is a plugin's (``loopx_register_event_kinds``).
    """
    found = _KINDS.get(name)
    if found is None:
        area = AREAS.get(name.split(".", 1)[0])
        if area:
            importlib.import_module(area)
            found = _KINDS.get(name)
        if found is None and (not area or name in RETIRED_KINDS):
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


#: The suffix of a capability's repair event kind (``NAME.repaired``): the core's repair
#: vocabulary (:mod:`loopx.events.repair`), which the core replays itself (:func:`core_repair`).
REPAIRED = ".repaired"


def core_repair(event: Event) -> bool:
    """Whether ``event`` is a repair the core replays itself when the plugin that wrote it is not
    installed: kind ``NS.repaired`` outside the core's areas, written as ``capability:…`` (never
    by a user or an agent: only plugin code may act as a capability), its body naming namespace
    ``NS`` and a repair of the core's vocabulary.

    Such a kind can only have been written through the core's repair guard: the plugin seam
    accepts a ``NS.repaired`` kind only with the core's repair apply and guard, writable by
    capabilities alone (:func:`loopx.plugins.event_kinds`).
    """
    name = event.kind
    if not name.endswith(REPAIRED) or name.count(".") != 1:
        return False
    namespace = name.split(".", 1)[0]
    if namespace in AREAS or role(event.actor) != CAPABILITY or not isinstance(event.body, dict):
        return False
    # The repair vocabulary lives with the apply functions, reached like every area (on first use).
    vocabulary = importlib.import_module("loopx.events.repair").KINDS
    return event.body.get("namespace") == namespace and event.body.get("repair") in vocabulary


def unknown_event(event: Event) -> str | None:
    """:func:`unknown_kind` for one event: ``None`` too for a repair the core replays itself
    (:func:`core_repair`), whether or not the plugin that wrote it is installed."""
    why = unknown_kind(event.kind)
    return None if why is not None and core_repair(event) else why


def plugin_kind(name: str) -> EventKind | None:
    """The plugin-registered kind ``name``, or ``None`` (not cached: plugins come and go in tests)."""
    from loopx import plugins

    found = plugins.event_kinds(tuple(AREAS) + ("core", "loopx"), RETIRED_KINDS).get(name)
    if found is None:
        return None
    apply, writers, guard, _plugin = found
    namespace = name.split(".", 1)[0]

    def checked(writer, body):
        # A capability writes a plugin's kind only in a namespace it owns: one capability cannot
        # write another's vocabulary.
        if role(writer.actor) == CAPABILITY:
            from loopx.capabilities import check_owner

            check_owner(writer.actor, namespace)
        if guard is not None:
            guard(writer, body)

    return EventKind(name, apply, writers, checked)


def role(actor: str) -> str:
    """The role of an actor string (``capability:issue_fix`` -> ``capability``)."""
    return actor.split(":", 1)[0]


def apply(tx, event: Event, *, summary: bool = True) -> None:
    """Apply one event to the current-state tables (the same code path as a replay).

    An event of a plugin's kind whose plugin is not installed any more (or of a retired core
    kind, :data:`RETIRED_KINDS`, whose plugin is not) replays as a no-op: its history stays
    readable (:func:`unknown_kind` names it); a capability's repair (:func:`core_repair`)
    replays through the core's repair API instead. An unknown core kind is an error. The goal's attention summary
    (:mod:`loopx.attention`) is refreshed too, unless the event's area cannot change it;
    ``summary=False`` leaves that to the caller (:func:`apply_many`).
    """
    if event.kind.split(".", 1)[0] in AREAS and event.kind not in RETIRED_KINDS:
        kind(event.kind).apply(tx, event)
    else:
        found = plugin_kind(event.kind)
        if found is not None:
            found.apply(tx, event)
        elif core_repair(event):
            # Its plugin is gone, but what a repair does is the core's (the plugin applied it
            # through the same function, which the core's old name for repairs still uses):
            # replay it, so the state stays its replayed ledger.
            kind("capability.repaired").apply(tx, event)
    tx.execute(
        "UPDATE goals SET revision = ?, updated_at = ? WHERE id = ?",
        (event.seq, event.at, event.goal_id),
    )
    if summary and event.kind.split(".", 1)[0] not in _QUIET_AREAS:
        from loopx import attention

        attention.refresh(tx, event.goal_id)


# Areas whose events never move a goal in the overview (kept in step with loopx.attention).
_QUIET_AREAS = frozenset({"action", "evidence", "reward"})


def apply_many(tx, batch: list[Event]) -> None:
    """Apply already-appended events in order, refreshing each goal's summary once at the end.

    The same state as :func:`apply` one by one (the summary is a function of the rows), for
    bulk loads such as the benchmark's fill.
    """
    from loopx import attention

    touched: dict[str, None] = {}
    for event in batch:
        apply(tx, event, summary=False)
        touched[event.goal_id] = None
    for goal_id in touched:
        attention.refresh(tx, goal_id)


def append(tx, event: Event, prev_hash: str | None = None) -> Event:
    """Write ``event`` to the ledger and apply it; returns it with its global id."""
    return append_chained(tx, event, prev_hash)[0]


def append_chained(tx, event: Event, prev_hash: str | None = None) -> tuple[Event, str]:
    """:func:`append`, also returning the event's chain hash (what the next event links to).

    The body must be interoperable JSON (:func:`loopx.jsonsafe.problem`): whatever a command,
    a plugin or a capability put in it, nothing that a reader could not emit is ever written.
    The event is chained to ``prev_hash`` (looked up when not given; see :mod:`loopx.integrity`).
    """
    # The values inside were held to 64 levels where they entered; the body wraps them.
    found = jsonsafe.problem(event.body, jsonsafe.MAX_DEPTH + jsonsafe.ENVELOPE_DEPTH)
    if found:
        raise LoopxError("invalid_argument", f"{event.kind} refused: its data {found}")
    if prev_hash is None:
        prev = tx.one("SELECT hash FROM events WHERE goal_id = ? AND seq < ? ORDER BY seq DESC LIMIT 1",
                      (event.goal_id, event.seq))
        prev_hash = (prev["hash"] if prev else None) or integrity.GENESIS
    body_text = jsonsafe.canonical(event.body)
    digest = integrity.event_hash(prev_hash, event.goal_id, event.seq, event.at, event.actor, event.kind,
                                  body_text, event.operation_id, integrity.keyring(tx))
    row = tx.one(
        "INSERT INTO events (goal_id, seq, at, actor, kind, body, operation_id, prev_hash, hash)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (event.goal_id, event.seq, event.at, event.actor, event.kind, body_text, event.operation_id,
         prev_hash, digest),
    )
    event = attrs.evolve(event, id=row["id"])
    global _applying
    _applying = (event.body, body_text)
    try:
        apply(tx, event)
    finally:
        _applying = None
    return event, digest


#: ``(body, its canonical text)`` of the event :func:`append_chained` is applying, else None.
_applying: tuple | None = None


def member_text(event: Event, key: str) -> str:
    """``jsonsafe.canonical(event.body[key])``, cut from the body's canonical text when the event
    is being appended now (a run's contract, a few KB, is otherwise encoded a second time for its
    own column). The cut is exact: a canonical object is ``{`` + ``"key":value`` items in key
    order joined by ``,`` + ``}``, and the items around ``key`` are encoded again to find it."""
    body, held = event.body, _applying
    if held is None or held[0] is not body:
        return jsonsafe.canonical(body[key])
    names = sorted(body)
    at = names.index(key)
    item = lambda k: jsonsafe.canonical(k) + ":" + jsonsafe.canonical(body[k])  # noqa: E731
    prefix = "{" + "".join(item(k) + "," for k in names[:at]) + jsonsafe.canonical(key) + ":"
    suffix = "".join("," + item(k) for k in names[at + 1:]) + "}"
    text = held[1]
    if len(text) > len(prefix) + len(suffix) and text.startswith(prefix) and text.endswith(suffix):
        return text[len(prefix):len(text) - len(suffix)]
    return jsonsafe.canonical(body[key])


def last_hash(tx, goal_id: str) -> str:
    """The hash of the goal's newest event (what the next event links to)."""
    row = integrity.last_event(tx, goal_id)
    return (row["hash"] if row else None) or integrity.GENESIS


def event_from_row(row: dict) -> Event:
    """An :class:`Event` from an ``events`` row."""
    return Event(
        id=row["id"],
        goal_id=row["goal_id"],
        seq=row["seq"],
        at=row["at"],
        actor=row["actor"],
        kind=row["kind"],
        body=json.loads(row["body"]),
        operation_id=row["operation_id"],
    )


def events(tx, goal_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
    """A goal's events with ``seq > after``, oldest first."""
    sql = "SELECT * FROM events WHERE goal_id = ? AND seq > ? ORDER BY seq"
    params: list = [goal_id, after]
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return [event_from_row(r) for r in tx.query(sql, params)]


def iter_events(tx, goal_id: str, *, after: int = 0, limit: int | None = None, batch: int = 500):
    """:func:`events` as a stream: pages of ``batch`` events by sequence number (an index range
    each), so a goal's whole ledger is read in bounded memory."""
    left = limit
    while left is None or left > 0:
        size = batch if left is None else min(batch, left)
        rows = tx.query("SELECT * FROM events WHERE goal_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                        (goal_id, after, size))
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
        rows = tx.query(f"SELECT {columns} FROM events WHERE goal_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                        (goal_id, after, batch))
        yield from rows
        if len(rows) < batch:
            return
        after = rows[-1]["seq"]


def snapshot(tx, goal_id: str) -> dict[str, list[dict]]:
    """Every current-state row of one goal, per table, in key order."""
    out = {}
    for table, keys in schema.GOAL_TABLES.items():
        column = "id" if table == "goals" else "goal_id"
        rows = tx.query(f"SELECT * FROM {table} WHERE {column} = ?", (goal_id,))
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
    scratch = SqliteStore(":memory:")
    try:

        def work(tx):
            import itertools

            for event in itertools.chain([first], goal_events):
                # Keep the original global id: goals and todos record it as their creation order.
                tx.execute(
                    "INSERT INTO events (id, goal_id, seq, at, actor, kind, body, operation_id)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (event.id, event.goal_id, event.seq, event.at, event.actor, event.kind,
                     json.dumps(event.body), event.operation_id),
                )
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
