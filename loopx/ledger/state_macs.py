"""The state digest kept incrementally: one keyed MAC per state row, summed (issue 25).

Every row of a goal's state tables (:data:`TABLES`) has a MAC in ``state_macs``:
``HMAC_k(goal, table, key, the row's JSON text)``. The goal's digest is their sum
``D = sum(MACs) mod 2^256`` with per-table row counts, bound to the chain head by a tag
``HMAC_k(goal, seq, head_hash, D, counts)``, all stored in ``goal_heads.state_digest`` as
``v3 <D> <counts> <tag>``. See docs/architecture.md ("The state digest").

Which rows changed is recorded by SQL triggers in ``state_dirty`` (the row's text before the
transaction and after, both as the database prints it: ``json_object`` on SQLite, ``to_jsonb``
on PostgreSQL); the seal (:func:`seal_incremental`) takes them out in one statement, adds the
new rows' MACs and subtracts the old ones. Triggers are bookkeeping, not evidence: what proves
a row is its MAC, which nobody without the key can make. Outside a LoopX transaction
``state_dirty`` is empty, so a row written behind LoopX's back while the triggers are in place
leaves a mark should-run sees at once; one written with them removed is caught when a decision
reads it (its MAC fails) or by the whole-goal sum ``self-repair check`` makes.

Rows are always read as the database's JSON text (never as driver values): the seal, the
per-turn check and the whole-goal sum MAC the very text the database prints for the row.
"""

from __future__ import annotations

import json

from loopx.values import jsonsafe
from loopx.store.dialect import of as dialect_of
from loopx.store.queries import integrity as queries

#: Per state table: the column holding the goal, the key expression (``{t}``: the row's alias),
#: and its columns (SQLite's JSON text names them; the migration checks them against the table).
TABLES = {
    "goals": ("id", "{t}.id", ("id", "created_seq", "title", "description", "status", "status_reason", "criteria",
                               "limits", "grants", "parallel_runs", "revision", "created_at", "updated_at",
                               "capabilities")),
    "gates": ("goal_id", "{t}.id", ("id", "goal_id", "title", "scope", "blocks", "status", "requested_by",
                                    "created_at", "decided_by", "decided_at", "comment")),
    "todos": ("goal_id", "{t}.id", ("id", "goal_id", "created_seq", "text", "priority", "depends_on", "status", "note",
                                    "claim_agent", "claim_run_id", "claim_expires_at", "epoch", "created_at",
                                    "updated_at")),
    "actions": ("goal_id", "{t}.name", ("goal_id", "name", "argv", "source", "created_at", "gate_id")),
    "runs": ("goal_id", "{t}.id", ("id", "goal_id", "agent", "status", "contract_id", "fingerprint", "opened_at",
                                   "expires_at", "finished_at", "outcome", "tokens", "cost", "handoff")),
    # The contracts: what ``exec`` obeys while their run is open (append-only).
    "contracts": ("goal_id", "{t}.id", ("id", "goal_id", "run_id", "fingerprint", "issued_at", "expires_at",
                                        "document")),
    "capability_state": ("goal_id", "{t}.namespace || {sep} || {t}.key",
                         ("goal_id", "namespace", "key", "value", "updated_at")),
    "goal_usage": ("goal_id", "''", ("goal_id", "turns", "tokens", "cost_micros", "wall_us", "last_opened")),
    "todo_ready": ("goal_id", "{t}.todo_id", ("goal_id", "todo_id", "priority", "created_seq")),
}
#: The count of open runs, kept beside the per-table counts (should-run reads every open run).
OPEN_RUNS = "runs.open"
#: The table counting a goal's changed events, and its count's key in the digest's counts
#: (:mod:`loopx.ledger.history_guard`; named here too, where the seal and the checks read them).
CHANGED_EVENTS = "event_changes"
CHANGES = "events.changed"
MODULUS = 1 << 256
FORMAT = "v3"


def key_sql(dialect: str, table: str, alias: str) -> str:
    """The SQL expression of a ``table`` row's key (``alias``: the row's name in the statement)."""
    return TABLES[table][1].format(t=alias, sep=dialect_of(dialect).char(31))


def text_sql(dialect: str, table: str, alias: str) -> str:
    """The SQL expression of a row's JSON text."""
    return dialect_of(dialect).row_json(alias, TABLES[table][2])


# --- the MACs ---

def row_mac(ring, goal_id: str, table: str, key: str, text: str) -> int:
    """The MAC of one row (``text``: its JSON text as the database prints it - the same text for
    the same row every time on one backend; a copy to another backend re-MACs every row), as an
    integer. Each field is length-prefixed, so no two rows can be made to share a message."""
    memo = (ring, goal_id, table, key, text)
    found = _MACS.get(memo)
    if found is not None:
        return found
    msg = f"loopx-row-v1 {len(goal_id)}:{goal_id}{len(table)}:{table}{len(key)}:{key}{text}"
    found = int(ring.digest(msg.encode("utf-8", "backslashreplace")), 16)
    if len(_MACS) >= _MACS_KEEP:
        _MACS.clear()
    _MACS[memo] = found
    return found


#: :func:`row_mac`'s memory, as :func:`loopx.ledger.integrity.event_hash` keeps one: a write MACs each
#: changed row's text before and after, and the text before is the one the goal's last write
#: MACed after (the goal row changes with every event); should-run MACs again the rows it reads.
#: Only the same key, goal, table, row key and text give the remembered MAC.
_MACS: dict[tuple, int] = {}
_MACS_KEEP = 512


def _open_run(text: str | None) -> bool:
    return text is not None and json.loads(text).get("status") == "open"


def tag(ring, goal_id: str, seq: int, head_hash: str | None, total: int, counts: dict) -> str:
    """The tag binding the sum and counts to the goal's chain head."""
    msg = jsonsafe.compact(["loopx-state-v3", goal_id, seq, head_hash, f"{total:064x}", sorted(counts.items())]).encode()
    return ring.digest(msg)


def encode(ring, goal_id: str, seq: int, head_hash: str | None, total: int, counts: dict) -> str:
    """What ``goal_heads.state_digest`` stores."""
    counts = {k: v for k, v in counts.items() if v}
    text = " ".join((FORMAT, f"{total:064x}", jsonsafe.canonical(counts),
                     tag(ring, goal_id, seq, head_hash, total, counts)))
    if len(_SEALED) >= 256:
        _SEALED.clear()
    _SEALED[(ring, goal_id)] = (seq, head_hash, text, total, counts)
    return text


#: What :func:`encode` made last per (keyring, goal): the goal's next write verifies exactly that
#: text at exactly that head (:func:`decode`), so its tag is known good without computing it again -
#: only the same key, goal, head and stored text hit (a digest edited since is checked afresh).
_SEALED: dict[tuple, tuple] = {}


def decode(ring, goal_id: str, recorded: dict) -> tuple[int, dict] | None:
    """``(D, counts)`` from a recorded head whose tag verifies with ``ring``, else None."""
    stored = recorded.get("state_digest") or ""
    if not stored.startswith(FORMAT + " ") or ring is None or ring.key is None:
        return None
    made = _SEALED.get((ring, goal_id))
    if made is not None and made[2] == stored and made[0] == recorded["seq"] and made[1] == recorded["head_hash"]:
        return made[3], dict(made[4])
    try:
        _, total_hex, counts_text, stored_tag = stored.split(" ")
        total, counts = int(total_hex, 16), json.loads(counts_text)
    except ValueError:
        return None
    if tag(ring, goal_id, recorded["seq"], recorded["head_hash"], total, counts) != stored_tag:
        return None
    return total, counts


def is_v3(recorded: dict | None) -> bool:
    """Whether a recorded head holds a digest of this format (verified or not)."""
    return recorded is not None and (recorded.get("state_digest") or "").startswith(FORMAT + " ")


# --- the seal ---

def seal_incremental(tx, ring, goal_id: str, total: int, counts: dict) -> tuple[int, dict]:
    """Take the goal's changed rows out of ``state_dirty`` (one statement) and update their MACs:
    returns the new ``(D, counts)``. The old row's MAC is computed from its text before the
    change, not taken from ``state_macs``: a row altered behind LoopX's back (triggers removed)
    and then changed by LoopX leaves ``D`` off by the difference, so the whole-goal sum still
    finds it."""
    changed = queries.take_dirty(tx, goal_id)
    counts = dict(counts)
    upserts, deletes = [], []
    for c in changed:
        old, new = c["old"], c["new"]
        if c["tbl"] == CHANGED_EVENTS:
            # The goal's count of events changed (loopx/ledger/history_guard.py): bound in the tag as it is now.
            counts[CHANGES] = int(new)
            continue
        if old == new:
            continue
        table, key = c["tbl"], c["k"]
        if old is not None:
            total -= row_mac(ring, goal_id, table, key, old)
            counts[table] = counts.get(table, 0) - 1
            if table == "runs" and _open_run(old):
                counts[OPEN_RUNS] = counts.get(OPEN_RUNS, 0) - 1
        if new is not None:
            mac = row_mac(ring, goal_id, table, key, new)
            total += mac
            counts[table] = counts.get(table, 0) + 1
            if table == "runs" and _open_run(new):
                counts[OPEN_RUNS] = counts.get(OPEN_RUNS, 0) + 1
            upserts.append((goal_id, table, key, f"{mac:064x}"))
        else:
            deletes.append((goal_id, table, key))
    # One statement for all the new MACs (a turn changes a few rows; the statement is sent once, not
    # once per row as executemany would), in chunks that stay below the drivers' parameter limits.
    for start in range(0, len(upserts), 500):
        queries.upsert_macs(tx, upserts[start:start + 500])
    if deletes:
        queries.delete_macs(tx, deletes)
    return total % MODULUS, counts


def changes(tx, goal_id: str) -> int:
    """The goal's count of event rows updated or deleted (``event_changes``, loopx/ledger/history_guard.py;
    0 before the schema step that made the table)."""
    if not dialect_of(tx).has_table(tx, CHANGED_EVENTS):
        return 0
    row = queries.changed_events(tx, CHANGED_EVENTS, goal_id)
    return int(row["n"]) if row else 0


def _all_rows(tx, goal_id: str):
    """Every state row of the goal as ``(table, key, text)``, one table at a time."""
    for table, (column, _, _) in TABLES.items():
        for r in queries.row_texts(tx, table, column, key_sql(tx.dialect, table, "t"), text_sql(tx.dialect, table, "t"),
                                   goal_id):
            yield table, r["k"], r["txt"]


def whole(tx, ring, goal_id: str) -> tuple[int, dict, list]:
    """The sum and counts of the goal's rows as they stand (the full check), and their MACs."""
    total, counts, macs = 0, {}, []
    for table, key, text in _all_rows(tx, goal_id):
        mac = row_mac(ring, goal_id, table, key, text)
        total += mac
        counts[table] = counts.get(table, 0) + 1
        if table == "runs" and _open_run(text):
            counts[OPEN_RUNS] = counts.get(OPEN_RUNS, 0) + 1
        macs.append((goal_id, table, key, f"{mac:064x}"))
    return total % MODULUS, counts, macs


def seal_whole(tx, ring, goal_id: str) -> tuple[int, dict]:
    """Recompute every MAC of the goal from its rows (a new goal, a rebuilt one, a new key)."""
    total, counts, macs = whole(tx, ring, goal_id)
    n = changes(tx, goal_id)
    if n:
        counts[CHANGES] = n  # the count as it stands is what this seal vouches for
    queries.replace_macs(tx, goal_id, macs)
    return total, counts


# --- the per-turn check: the rows a decision reads ---

def turn_rows_sql(dialect: str, agent: str | None) -> str:
    """One statement: every row a should-run decision reads, with its stored MAC - the goal, its
    gates and actions, its open runs and their contracts, its usage counters, and the first rows
    of the ready page (todo_ready and todos, filtered as :func:`loopx.ledger.todo_ready.first_ready`)."""

    from loopx.ledger.todo_ready import free_sql

    return queries.turn_rows_sql(dialect, lambda table, alias: key_sql(dialect, table, alias),
                                 lambda table, alias: text_sql(dialect, table, alias), lambda table: TABLES[table][0],
                                 free_sql("t2", agent))


def turn_params(goal_id: str, agent: str | None, now: str, limit: int) -> tuple:
    from loopx.ledger.todo_ready import free_params

    page = (goal_id, *free_params(agent, now), limit)
    return (goal_id,) * 6 + (*page, goal_id) + (*page, goal_id)


#: The tables whose rows of the goal a decision reads whole: their count must match.
READ_WHOLE = ("goals", "gates", "actions", "goal_usage")


def check_turn(tx, ring, goal_id: str, counts: dict, *, agent: str | None, now: str, limit: int) -> list[str]:
    """What fails among the rows a decision reads: each row's MAC, and the counts of the sets it
    reads whole. Returns one line per finding (empty: all verified)."""
    rows = tx.query(turn_rows_sql(tx.dialect, agent), turn_params(goal_id, agent, now, limit))
    found, seen = [], {}
    for r in rows:
        table = r["tbl"]
        seen[table] = seen.get(table, 0) + 1
        if r["mac"] is None or int(r["mac"], 16) != row_mac(ring, goal_id, table, r["k"], r["txt"]):
            found.append(f"{table} row {r['k'] or goal_id} is not the row the ledger wrote")
    for table in READ_WHOLE:
        if seen.get(table, 0) != counts.get(table, 0):
            found.append(f"the goal has {seen.get(table, 0)} {table} rows, not {counts.get(table, 0)}")
    if seen.get("runs", 0) != counts.get(OPEN_RUNS, 0):
        found.append(f"the goal has {seen.get('runs', 0)} open runs, not {counts.get(OPEN_RUNS, 0)}")
    if seen.get("contracts", 0) != seen.get("runs", 0):
        found.append("an open run's contract is missing")
    if not found:
        # The ready page just verified, in its order: the decision reads it from here
        # (loopx.ledger.todo_ready.first_ready) instead of asking again - the very rows whose MACs held.
        order = {}
        for r in rows:
            if r["tbl"] == "todo_ready":
                ready = json.loads(r["txt"])
                order[ready["todo_id"]] = (ready["priority"], ready["created_seq"])
        page = sorted((json.loads(r["txt"]) for r in rows if r["tbl"] == "todos"), key=lambda t: order.get(t["id"], ()))
        try:
            tx._loopx_page = (goal_id, agent, now, limit, page)
        except AttributeError:  # a transaction object that takes no attributes: read again
            pass
    return found


# --- the schema step ---

def check_columns(tx) -> None:
    """The columns :data:`TABLES` names are the tables' (SQLite's JSON text lists them)."""
    for table, (_, _, columns) in TABLES.items():
        have = dialect_of(tx).columns(tx, table)
        if sorted(have) != sorted(columns):
            raise RuntimeError(f"state_macs.TABLES[{table!r}] lists {sorted(columns)}, the table has {sorted(have)}")


def trigger_sql(dialect: str) -> list[str]:
    """The triggers that record changed rows in ``state_dirty`` (one set per state table)."""
    engine = dialect_of(dialect)
    return [sql for table, (column, _, _) in TABLES.items()
            for sql in engine.dirty_triggers(table, column, lambda ref, t=table: key_sql(dialect, t, ref),
                                             lambda ref, t=table: text_sql(dialect, t, ref))]


def install(tx) -> None:
    """Schema step: check the column lists, then create the triggers."""
    check_columns(tx)
    for sql in trigger_sql(tx.dialect):
        tx.execute(sql)
