"""Tamper evidence: a hash chain over each goal's ledger and a digest of its current state.

Every event carries ``prev_hash`` (the hash of the goal's previous event; :data:`GENESIS` for
the first) and ``hash`` = sha256 of the previous hash and the event's own canonical fields
(goal, seq, time, actor, kind, the stored body text, operation id). The ``goal_heads`` table
keeps, per goal, the sequence number and hash of the last event and a digest of the goal's
current state (:data:`STATE_TABLES`: every row ``quota should-run`` decides from). Both are
written by :meth:`loopx.ledger.registry.Registry.mutate` in the same transaction as every change.

``quota should-run`` calls :func:`verify_head` on the goal it decides on: the last events'
links and hashes, the head, and the state digest. Any difference - a row deleted, inserted or
edited by hand, an event edited, inserted or lost at the head - answers ``repair``. ``loopx
self-repair check`` walks whole chains with :func:`verify_chain`. See
docs/state-interaction-model.md ("Tamper evidence").
"""

from __future__ import annotations

import json

from loopx.ledger import history_guard, keys, state_macs  # every write uses them
# The hashes, named here as before (loopx.ledger.integrity.event_hash, .state_digest...).
from loopx.ledger.integrity_hash import GENESIS, STATE_TABLES, event_hash, row_hash, state_digest  # noqa: F401
from loopx.store.queries import integrity as queries
from loopx.store.queries.ledger import prev_hash as hash_before

#: The digest recorded when a write lands on state that was already altered outside the ledger.
UNTRUSTED = "untrusted"
#: How many of the newest events ``should-run`` re-hashes.
HEAD_WINDOW = 4


def keyring(tx):
    """The :class:`loopx.ledger.keys.Keyring` of the registry ``tx`` reads."""
    return keys.keyring(tx)


def last_event(tx, goal_id: str) -> dict | None:
    """The goal's newest ``events`` row (seq and hash), or None."""
    return queries.last_event(tx, goal_id)


def head(tx, goal_id: str) -> dict | None:
    """The goal's ``goal_heads`` row, or None."""
    return queries.head(tx, goal_id)


def last_and_head_seq(tx, goal_id: str) -> tuple[dict | None, int | None]:
    """:func:`last_event` and the seq of :func:`head`, in one statement (a writer numbering its
    first event without a :func:`head_seen`)."""
    row = queries.last_and_head_seq(tx, goal_id)
    last = {"seq": row["seq"], "hash": row["hash"]} if row["seq"] is not None else None
    return last, row["head_seq"]


def seal(tx, goal_id: str, *, trusted: bool = True, last: dict | None = None, whole: bool = False,
         legacy: bool = False) -> dict | None:
    """Record the goal's current chain head and state digest (inside the writing transaction).

    The digest is kept per row (:mod:`loopx.ledger.state_macs`): the rows this transaction changed are
    taken from ``state_dirty`` and their MACs added to the recorded sum - unless the recorded
    digest does not verify with the key (a new goal, a registry keyed or re-keyed, a digest of the
    older format) or ``whole`` (a repair rebuilt the goal), when every row is MACed afresh.
    ``last``: the goal's newest event (``{"seq", "hash"}``) when the caller knows it.
    ``legacy``: write the older whole-state digest (the schema step that keys a registry, before
    ``state_macs`` exists).

    ``trusted=False`` (the state was already altered outside the ledger before this write):
    the head moves on but the digest is marked untrusted, so the mismatch stays visible until
    ``self-repair fix`` rebuilds the state. Returns the head sealed (``{"seq", "hash"}``) or None.
    """
    if last is None or (getattr(tx, "_loopx_rechained", None) or {}).get(goal_id):
        last = last_event(tx, goal_id)  # (a chain recomputed in this transaction moved the head)
    if last is None:
        return None
    ring = keyring(tx)
    if ring.state in ("missing", "stripped"):
        from loopx.values.errors import LoopxError

        if ring.state == "stripped":
            raise LoopxError("integrity_mismatch", ring.stripped_message())
        raise LoopxError("integrity_key_missing", ring.missing_message())
    if not trusted:
        digest = UNTRUSTED
    elif legacy or ring.state != "keyed":
        digest = state_digest(tx, goal_id, last["seq"], last["hash"], ring)
    else:
        known = None if whole else _verified(tx, goal_id)
        if known is None:
            total, counts = state_macs.seal_whole(tx, ring, goal_id)
        else:
            total, counts = state_macs.seal_incremental(tx, ring, goal_id, *known)
        digest = state_macs.encode(ring, goal_id, last["seq"], last["hash"], total, counts)
    queries.record_head(tx, goal_id, last["seq"], last["hash"], digest)
    _stash(tx, "_loopx_verified", goal_id, None)
    return last


def _stash(tx, name: str, goal_id: str, value) -> None:
    """Remember ``value`` for ``goal_id`` for the rest of ``tx`` (None forgets it)."""
    found = getattr(tx, name, None)
    if found is None:
        found = {}
        try:
            setattr(tx, name, found)
        except AttributeError:  # a transaction object that takes no attributes: nothing remembered
            return
    if value is None:
        found.pop(goal_id, None)
    else:
        found[goal_id] = value


def _verified(tx, goal_id: str):
    """``(D, counts)`` of the goal's recorded digest when its tag verifies (from this
    transaction's :func:`verify_head` when it ran, else read now), or None."""
    known = (getattr(tx, "_loopx_verified", None) or {}).get(goal_id)
    if known is not None:
        return known
    recorded = head(tx, goal_id)
    if recorded is None:
        return None
    return state_macs.decode(keyring(tx), goal_id, recorded)


def head_seen(tx, goal_id: str):
    """What this transaction's :func:`verify_head` read of the goal - ``(newest event or None,
    recorded head or None)`` - once (the writer numbers its first event from it), else None."""
    found = getattr(tx, "_loopx_head_seen", None)
    return found.pop(goal_id, None) if found else None


class Problem:
    """One integrity mismatch: a stable ``code``, the goal, where, and a one-line message."""

    __slots__ = ("code", "goal_id", "seq", "message")

    def __init__(self, code: str, goal_id: str, message: str, seq: int | None = None):
        self.code, self.goal_id, self.message, self.seq = code, goal_id, message, seq

    def __repr__(self):
        return f"Problem({self.code!r}, {self.goal_id!r}, seq={self.seq})"


#: Every problem code, with what it means.
CODES = {
    "head_mismatch": "the goal's newest events are not the ones its recorded head names (events lost or inserted)",
    "event_tampered": "an event's stored content does not match its hash (the event was edited)",
    "chain_broken": "an event does not link to the hash of the event before it (events lost, inserted or reordered)",
    "state_digest_mismatch": "the goal's current-state rows differ from the digest written with the last change",
    "goal_unsealed": "the goal has no recorded chain head (its head row was deleted, or the goal was inserted by hand)",
    "registry_rolled_back": "the registry is older than what this user last committed to it (replaced by an older"
                            " copy, or its newest events removed); see `loopx registry reanchor`",
    "integrity_key_missing": "the registry's integrity key is not on this machine: nothing can be verified",
    "history_changed": "stored events of the goal were edited or deleted outside LoopX (the count of changed"
                       " events its keyed seal binds moved; loopx/ledger/history_guard.py)",
    "schema_altered": "the registry's triggers or event tables were changed outside LoopX (their keyed mark fails)",
}


#: The event kinds that record loss: the core's own, and the one older registries hold (a
#: self-repair ``capability.repaired`` event carried its loss in its body). Read whether or not
#: the plugin that wrote them is installed: recorded loss stays recorded.
LOSS_KINDS = ("capability.loss_recorded", "capability.repaired")


def _repair_note(row: dict) -> dict:
    """What a repair recorded about loss: ``{"lost": [seq...], "acknowledged": [seq...]}``."""
    if row["kind"] not in LOSS_KINDS or '"lost"' not in row["body"] and '"acknowledged"' not in row["body"]:
        return {}
    try:
        body = json.loads(row["body"])
    except ValueError:
        return {}
    return {"lost": set(body.get("lost") or ()), "acknowledged": set(body.get("acknowledged") or ())}


def acknowledged(rows: list[dict]) -> tuple[set, set]:
    """Sequence numbers repairs recorded as lost, and chain breaks they acknowledged."""
    lost, acked = set(), set()
    for row in rows:
        note = _repair_note(row)
        lost |= note.get("lost", set())
        acked |= note.get("acknowledged", set())
    return lost, acked


def _links(goal_id: str, rows: list[dict], prev: dict | None, acked: set = frozenset(), ring=None) -> list[Problem]:
    """Check ``rows`` (ascending seq) hash and link correctly, the first to ``prev`` (or genesis).

    A repair event that records the sequence numbers it found lost may follow the gap; a break a
    repair acknowledged (``acked``) is known, recorded loss, not fresh damage.
    """
    out = []
    for row in rows:
        want_prev = prev["hash"] if prev is not None else GENESIS
        expected = prev["seq"] + 1 if prev is not None else 1
        if row["seq"] != expected and not (
                set(range(expected, row["seq"])) <= _repair_note(row).get("lost", set()) or row["seq"] in acked):
            out.append(Problem("chain_broken", goal_id, f"goal {goal_id}: event {row['seq']} follows event"
                               f" {expected - 1}: events are missing or inserted", row["seq"]))
        elif (row["prev_hash"] or GENESIS) != want_prev and row["seq"] not in acked:
            out.append(Problem("chain_broken", goal_id, f"goal {goal_id}: event {row['seq']} does not link to the"
                               " event before it", row["seq"]))
        if row["hash"] != row_hash(row, ring):
            out.append(Problem("event_tampered", goal_id, f"goal {goal_id}: event {row['seq']} ({row['kind']}) was"
                               " edited: its content does not match its hash", row["seq"]))
        prev = row
    return out


def _key_missing(ring, goal_id: str) -> list[Problem]:
    if ring.state == "stripped":
        return [Problem("registry_rolled_back", goal_id, ring.stripped_message())]
    if ring.state != "missing":
        return []
    return [Problem("integrity_key_missing", goal_id, ring.missing_message())]


def _digest_problem(tx, goal_id: str, recorded: dict, ring) -> list[Problem]:
    """The whole-goal check: every state row's MAC summed against the recorded sum and counts,
    and the goal's count of changed events against the one they bind (or, for a digest of the
    older format, the whole-state hash)."""
    if state_macs.is_v3(recorded):
        known = state_macs.decode(ring, goal_id, recorded)
        if known is not None:
            sealed = dict(known[1])
            sealed_changes = sealed.pop(state_macs.CHANGES, 0)
            if state_macs.whole(tx, ring, goal_id)[:2] == (known[0], sealed):
                changes = state_macs.changes(tx, goal_id)
                return [] if changes == sealed_changes else [_history_changed(goal_id, changes - sealed_changes)]
    elif state_digest(tx, goal_id, recorded["seq"], recorded["head_hash"], ring) == recorded["state_digest"]:
        return []
    return [_mismatch(goal_id)]


def _history_changed(goal_id: str, n: int) -> Problem:
    return Problem("history_changed", goal_id, f"goal {goal_id}: {n} of its stored events were edited or deleted"
                   " outside LoopX since its last change (the count its keyed seal binds moved)")


def _schema_altered(goal_id: str) -> Problem:
    return Problem("schema_altered", goal_id, f"goal {goal_id}: the registry's triggers or event tables were changed"
                   " outside LoopX (their keyed mark fails), so an edit of its history could have gone uncounted")


def _mismatch(goal_id: str, detail: str = "rows deleted, inserted or edited") -> Problem:
    return Problem("state_digest_mismatch", goal_id, f"goal {goal_id}: its current state was changed"
                   f" outside the ledger ({detail})")


def _digest_at_turn(tx, goal_id: str, recorded: dict, ring, dirty: bool, changes: int | None = None) -> list[Problem]:
    """The per-turn digest check: the tag (sum and counts bound to the head), the goal's count of
    changed events against the one the tag binds (``changes``, :mod:`loopx.ledger.history_guard`), and no
    row changed outside a LoopX transaction (``dirty``). The rows the decision reads are checked
    against their MACs by :func:`verify_turn_rows`; an older-format digest is checked whole."""
    if not state_macs.is_v3(recorded):
        return _digest_problem(tx, goal_id, recorded, ring)
    known = state_macs.decode(ring, goal_id, recorded)
    if known is None:
        return [_mismatch(goal_id, "its recorded digest does not verify")]
    if changes is not None and changes != known[1].get(state_macs.CHANGES, 0):
        return [_history_changed(goal_id, changes - known[1].get(state_macs.CHANGES, 0))]
    if dirty:
        return [_mismatch(goal_id, "rows were written outside a LoopX transaction")]
    _stash(tx, "_loopx_verified", goal_id, known)
    return []


def verify_turn_rows(tx, goal_id: str, *, agent: str | None, now: str, limit: int) -> list[Problem]:
    """The rows a should-run decision reads (:func:`loopx.ledger.state_macs.check_turn`), each against its
    MAC, and the counts of the sets it reads whole - after :func:`verify_head` found the digest's
    tag good in this transaction (otherwise it already reported)."""
    known = (getattr(tx, "_loopx_verified", None) or {}).get(goal_id)
    if known is None:
        return []
    found = state_macs.check_turn(tx, keyring(tx), goal_id, known[1], agent=agent, now=now, limit=limit)
    return [_mismatch(goal_id, "; ".join(found[:3]))] if found else []


def rolled_back(tx, goal_id: str, ring, newest: list[dict]) -> list[Problem]:
    """``registry_rolled_back`` when the registry is behind what this user last committed to the
    goal (its anchor, see :mod:`loopx.ledger.anchor`): ``newest`` holds the goal's newest events
    (ascending; may be empty).

    Sound only where no commit to the goal can land between ``tx``'s snapshot and the anchor
    read: a write transaction holding the goal (SQLite's write lock; on PostgreSQL the goal row,
    whose every change makes a stale snapshot fail and retry). Reads use :func:`verify_anchor`.
    """
    if ring.state != "keyed":
        return []
    from loopx.ledger import anchor

    return _behind(tx, goal_id, anchor.read_head(ring.registry_id, goal_id), newest)


def _behind(tx, goal_id: str, anchored: dict | None, newest: list[dict]) -> list[Problem]:
    """The goal's ledger (``newest``: its newest events, ascending) against its anchored head."""
    if anchored is None:
        return []
    last = newest[-1]["seq"] if newest else 0
    if last < anchored["seq"]:
        return [Problem("registry_rolled_back", goal_id, f"goal {goal_id}: its ledger ends at event {last} but"
                        f" this user committed event {anchored['seq']}: the registry was replaced by an older"
                        " copy or its newest events were removed", anchored["seq"])]
    found = next((r for r in newest if r["seq"] == anchored["seq"]), None)
    if found is None:
        found = queries.event_at(tx, goal_id, anchored["seq"])
    if found is not None and found["hash"] != anchored["hash"]:
        return [Problem("registry_rolled_back", goal_id, f"goal {goal_id}: event {anchored['seq']} is not the one"
                        " this user committed: the registry was replaced by another copy", anchored["seq"])]
    return []


def _head_and_window(tx, goal_id: str, window: int) -> tuple[dict | None, bool, list[dict], dict | None]:
    """One statement: the recorded head, whether any row of the goal was changed outside a LoopX
    transaction (``state_dirty``), the newest ``window`` events (ascending), and (schema 11 on,
    :mod:`loopx.ledger.history_guard`) the goal's count of changed events, the registry's trigger
    definitions and their recorded mark (``{"changes", "defs", "mark"}``, else None)."""
    from loopx.ledger import history_guard
    from loopx.store import schema

    # A registry read without migrating it (read-only) from before the change log (schema 9) has
    # no state_dirty: its digest is the whole-state one of its version, checked whole.
    version = getattr(tx, "schema_version", schema.CURRENT_VERSION)
    guard = ((state_macs.CHANGED_EVENTS, history_guard.TABLES, history_guard.MARK_KEY)
             if version >= schema.GUARD_VERSION else None)
    rows = queries.head_and_window(tx, goal_id, window, dirty=version >= schema.MACS_VERSION, guard=guard)
    first = rows[0]
    recorded = None if first["h_seq"] is None else {"goal_id": goal_id, "seq": first["h_seq"],
                                                     "head_hash": first["h_hash"], "state_digest": first["h_digest"]}
    names = [k for k in first if not k.startswith("h_")]  # the events' columns (asked once, not per row)
    events = [{k: r[k] for k in names} for r in rows if r["seq"] is not None]
    events.sort(key=lambda r: r["seq"])
    guarded = ({"changes": int(first["h_changes"] or 0), "defs": first["h_defs"], "mark": first["h_mark"]}
               if guard else None)
    return recorded, bool(first["h_dirty"]), events, guarded


def verify_head(tx, goal_id: str, *, window: int = HEAD_WINDOW, rollback: bool = False) -> list[Problem]:
    """The cheap check ``should-run`` makes: head, the newest ``window`` events, the state
    digest's tag and that no row was written outside LoopX (the rows the decision reads are
    checked by :func:`verify_turn_rows`), and (``rollback``: only inside a write holding the
    goal, see :func:`rolled_back`) the rollback anchor."""
    ring = keyring(tx)
    missing = _key_missing(ring, goal_id)
    if missing:
        return missing
    _stash(tx, "_loopx_verified", goal_id, None)
    recorded, dirty, rows, guard = _head_and_window(tx, goal_id, window + 1)
    _stash(tx, "_loopx_head_seen", goal_id, (rows[-1] if rows else None, recorded))
    out = rolled_back(tx, goal_id, ring, rows) if rollback else []
    if guard is not None and ring.state == "keyed" and history_guard.altered(ring, guard["defs"], guard["mark"]):
        out.append(_schema_altered(goal_id))
    if not rows:
        return out
    if recorded is None:
        return out + [Problem("goal_unsealed", goal_id, f"goal {goal_id} has no recorded chain head")]
    newest = rows[-1]
    if newest["seq"] != recorded["seq"] or newest["hash"] != recorded["head_hash"]:
        out.append(Problem("head_mismatch", goal_id, f"goal {goal_id}: its ledger ends at event {newest['seq']} but"
                           f" the last change recorded event {recorded['seq']}", newest["seq"]))
    # The oldest fetched row anchors the window (its own hash is checked, its link is not).
    anchor, checked = (rows[0], rows[1:]) if len(rows) > window else (None, rows)
    if anchor is not None and anchor["hash"] != row_hash(anchor, ring):
        # (Its hash alone: checking its link here would walk every sequence number before it.)
        out.append(Problem("event_tampered", goal_id, f"goal {goal_id}: event {anchor['seq']} ({anchor['kind']})"
                           " was edited: its content does not match its hash", anchor["seq"]))
    out.extend(_links(goal_id, checked, anchor, acknowledged(rows)[1], ring))
    out.extend(_digest_at_turn(tx, goal_id, recorded, ring, dirty, guard["changes"] if guard else None))
    if out:
        _stash(tx, "_loopx_verified", goal_id, None)
    return out


def verify_chain(tx, goal_id: str) -> list[Problem]:
    """The full check: every event's hash and link, the head and the state digest (the anchor:
    :func:`verify_anchor`)."""
    ring = keyring(tx)
    missing = _key_missing(ring, goal_id)
    if missing:
        return missing
    # Streamed: the events that record loss first (few), then every event in pages, each linked to
    # the last of the page before (bounded memory on a ledger of any length).
    notes = queries.loss_notes(tx, goal_id, LOSS_KINDS)
    acked = acknowledged(notes)[1]
    out, last = [], None
    while True:
        page = queries.chain_page(tx, goal_id, last["seq"] if last else 0)
        out.extend(_links(goal_id, page, last, acked, ring))
        if page:
            last = page[-1]
        if len(page) < 500:
            break
    if last is None:
        return []
    recorded = head(tx, goal_id)
    if recorded is None:
        return out + [Problem("goal_unsealed", goal_id, f"goal {goal_id} has no recorded chain head")]
    if last["seq"] != recorded["seq"] or last["hash"] != recorded["head_hash"]:
        out.append(Problem("head_mismatch", goal_id, f"goal {goal_id}: its ledger ends at event {last['seq']}"
                           f" but the last change recorded event {recorded['seq']}", last["seq"]))
    out.extend(_digest_problem(tx, goal_id, recorded, ring))
    return out


def verify_anchor(reg, goal_id: str | None = None) -> list[Problem]:
    """The rollback check of a whole registry (``self-repair check``; one goal with ``goal_id``):
    every goal this user anchored, and the highest event id, against the registry.

    Two read transactions: the anchor is read after the first (which finds the registry's id)
    and before the second, so every commit the anchor counts is in the second's snapshot and a
    concurrent writer can never make the registry look behind. Empty for an unkeyed registry.
    """
    from loopx.ledger import anchor

    with reg.read() as tx:
        ring = keyring(tx)
    if ring.state != "keyed":  # (a missing key is what every goal's own check reports)
        return []
    anchored, generation = anchor.heads(ring.registry_id)
    if goal_id is not None:
        anchored, generation = [a for a in anchored if a["goal_id"] == goal_id], None
    out = []
    with reg.read() as tx:
        if generation is not None:
            top = queries.newest_event_id(tx)
            if top < generation:
                out.append(Problem("registry_rolled_back", None, f"the registry's newest event is {top} but this"
                                   f" user committed event {generation} to it: it was replaced by an older copy"))
        for a in anchored:
            last = last_event(tx, a["goal_id"])
            out.extend(_behind(tx, a["goal_id"], a, [last] if last else []))
    return out


def rechain(tx, goal_id: str, from_seq: int) -> None:
    """Recompute the chain of the goal's events from ``from_seq`` on (after a repair rewrote an
    event body on purpose; the repair event records the original)."""
    ring = keyring(tx)
    prev = hash_before(tx, goal_id, from_seq)
    prev_hash = (prev["hash"] if prev else None) or GENESIS
    updates = []
    for row in queries.events_from(tx, goal_id, from_seq):
        row["prev_hash"] = prev_hash
        digest = row_hash(row, ring)
        updates.append((prev_hash, digest, row["id"]))
        prev_hash = digest
    if updates:
        queries.rechain_events(tx, updates)
        _stash(tx, "_loopx_rechained", goal_id, True)
