"""The hashes of tamper evidence (:mod:`loopx.ledger.integrity`): an event's chain hash and the digest
of a goal's current state, each keyed with the registry's key when it has one. Pure functions of
what they are given (and of the transaction they read), remembered per process where a write
computes the same thing twice.
"""

from __future__ import annotations

import json
import math
from operator import itemgetter

from loopx.values import jsonsafe

from hashlib import sha256 as _sha256


GENESIS = "0" * 64
#: The current-state tables the digest covers: what a turn decision reads. Contracts, evidence
#: and rewards are append-only records the decision never reads; the full check replays them.
STATE_TABLES = ("goals", "gates", "todos", "actions", "runs", "capability_state", "goal_usage", "todo_ready")


def event_hash(prev_hash: str, goal_id: str, seq: int, at: str, actor: str, kind: str, body_text: str,
               operation_id: str | None, ring=None) -> str:
    """The chain hash of one event (``body_text``: the body exactly as stored): HMAC-SHA256 with
    the registry's key (``ring``, a :class:`loopx.ledger.keys.Keyring`), or plain sha256 for a
    registry not keyed yet (``ring`` None or unkeyed).

    Remembered per process for the newest few events (:data:`_HASHED`): every write re-checks
    the goal's newest events (:func:`verify_head`), which this process usually wrote or checked
    a moment ago. Only the same inputs give the remembered hash - a row edited since is hashed
    afresh - so this changes what is computed, never what is found."""
    memo = (ring, prev_hash, goal_id, seq, type(seq), at, actor, kind, body_text, operation_id)
    found = _HASHED.get(memo)
    if found is not None:
        return found
    canonical = jsonsafe.compact([prev_hash, goal_id, seq, at, actor, kind, body_text, operation_id]).encode(
        "ascii", "backslashreplace")
    found = _sha256(canonical).hexdigest() if ring is None else ring.digest(canonical)
    if len(_HASHED) >= _HASHED_KEEP:
        _HASHED.clear()
    _HASHED[memo] = found
    return found


#: :func:`event_hash`'s memory: its inputs (with the :class:`loopx.ledger.keys.Keyring` object, one per
#: registry and key, :func:`loopx.ledger.keys.keyring`) -> the hash; emptied when it holds this many.
_HASHED: dict[tuple, str] = {}
_HASHED_KEEP = 512


def row_hash(row: dict, ring=None) -> str:
    """:func:`event_hash` of an ``events`` row against its own ``prev_hash``."""
    return event_hash(row["prev_hash"] or GENESIS, row["goal_id"], row["seq"], row["at"], row["actor"],
                      row["kind"], row["body"], row["operation_id"], ring)


def state_digest(tx, goal_id: str, seq: int | None = None, head_hash: str | None = None, ring=None,
                 tables: tuple = STATE_TABLES) -> str:
    """The digest of the goal's rows in :data:`STATE_TABLES` (columns by name, rows by key; closed
    runs summarised).

    Keyed (``ring`` holds the registry's key): HMAC-SHA256 over the goal's chain head (``seq``,
    ``head_hash``: the head cannot be moved without the key either), the same rows, and the
    stored contract of every open run (what ``exec`` obeys). Unkeyed: the sha256 older
    registries recorded, over the rows only.
    """
    from loopx.store import schema
    from loopx.store.queries import integrity as queries

    keyed = ring is not None and ring.key is not None
    h = ring.hasher() if keyed else _sha256()
    if keyed:
        h.update(json.dumps(["loopx-state-v2", goal_id, seq, head_hash], separators=(",", ":")).encode())
    for table in tables:
        column = "id" if table == "goals" else "goal_id"
        if table == "runs":
            # Open runs row by row; closed runs (a list that grows with every turn) by what the
            # decision reads of them - count, charges, latest times - so the check stays cheap on
            # a goal with thousands of turns. The full check replays every run.
            rows = queries.open_runs(tx, goal_id)
            closed = queries.closed_runs_summary(tx, goal_id)
            closed = [int(closed["n"]), int(closed["tokens"]), round(float(closed["cost"]), 6), closed["opened"],
                      closed["finished"], closed["expires"]]
            rows.sort(key=lambda r: r["id"])
            h.update(json.dumps(["runs", [sorted(r.items()) for r in rows], closed], default=str,
                                separators=(",", ":")).encode("utf-8", "backslashreplace"))
            if keyed and rows:
                # The contracts open runs work under: an edited contract would let ``exec`` run
                # anything, so it is state the digest covers while its run is open.
                contracts = queries.contracts(tx, tuple(r["contract_id"] for r in rows))
                h.update(json.dumps(["contracts", [sorted(c.items()) for c in contracts]], default=str,
                                    separators=(",", ":")).encode("utf-8", "backslashreplace"))
            continue
        names, rows = queries.goal_tuples(tx, table, column, goal_id)
        # Each row as its (column, value) pairs by column name, rows by key - the same text as
        # ``sorted(row.items())`` per row, so stored digests still match. A write hashes its goal's
        # whole state twice (checked before, sealed after) and most rows are the same both times,
        # and as the last write's: a row's text is remembered, keyed by its values and their types.
        order = sorted(range(len(names)), key=names.__getitem__)
        columns = [names[i] for i in order]
        h.update(f'["{table}",['.encode())
        if rows:
            rows.sort(key=itemgetter(*(names.index(k) for k in schema.GOAL_TABLES[table])))
            pick = itemgetter(*order) if len(order) > 1 else (lambda row: (row[order[0]],))
            seen = _row_texts(table, names)
            texts = []
            for row in rows:
                types = tuple(map(type, row))
                text = seen.get((row, types))
                if text is None:
                    # Floats through repr (via json) and every other value through str: the same
                    # text on SQLite and PostgreSQL for the column types the schema uses.
                    text = _encode(list(zip(columns, pick(row))))
                    # Only where equal keys print alike: plain types (equal Decimals or datetimes can
                    # print apart, as -0.0 and 0.0 do).
                    if _PLAIN.issuperset(types) and (float not in types or not any(
                            v == 0 and type(v) is float and math.copysign(1, v) < 0 for v in row)):
                        seen[(row, types)] = text
                texts.append(text)
            h.update(",".join(texts).encode("utf-8", "backslashreplace"))
        h.update(b"]]")
    return h.hexdigest()


_encode = json.JSONEncoder(default=str, separators=(",", ":")).encode  # json.dumps(..., default=str, separators=...)
_TEXTS: dict = {}  # (table, column names) -> {(row values, their types): the row's text}
_PLAIN = frozenset((str, int, float, type(None)))
_TEXTS_MAX = 5000  # per table; a process writing many goals starts afresh past it (bounded memory)


def _row_texts(table: str, names: list[str]) -> dict:
    """Row texts :func:`state_digest` made before in this process (a pure function of the
    values, their types and the column names, so any transaction may reuse them)."""
    key = (table, tuple(names))
    texts = _TEXTS.get(key)
    if texts is None or len(texts) > _TEXTS_MAX:
        texts = _TEXTS[key] = {}
    return texts

