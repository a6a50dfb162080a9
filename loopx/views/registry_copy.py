"""Move a registry from one store to another, nothing lost: copy, replay, verify.

``loopx registry copy --from sqlite:///path/registry.db --to postgresql://...`` (and back).

The copy reads the source in one consistent snapshot and writes the target in one transaction:

1. the target must be empty (``target_not_empty``) unless ``force``, which replaces it;
2. every goal's events are copied in ledger order, keeping their ids, times, actors and bodies
   byte for byte, and each is applied through :func:`loopx.ledger.log.apply`, so the target's
   current state is *rebuilt from the ledger*, not copied from the source's tables;
3. the ``operations`` table (idempotency keys and their first results) is copied as is;
4. before committing, the copy is verified: the target holds the same events in the same order,
   its state equals :func:`loopx.ledger.log.replayed_snapshot` of those events for every goal, and
   equals the source's state. Any difference raises ``copy_mismatch`` and nothing is committed.

Both stores are reached only through the store interface; the few PostgreSQL words it needs
(keeping identity values, holding out other writers) are in :func:`_prepare_target`.
"""

from __future__ import annotations

from loopx.ledger import log as ledger
from loopx.values.errors import LoopxError
from loopx.store import schema
from loopx.store.dialect import of as dialect_of
from loopx.store.queries import copy as queries

# The hash chain is keyed with each registry's own key (loopx.ledger.keys): the copy checks the source's
# chains with the source's key, and the target chains the same events with its key.
EVENT_COLUMNS = ("id", "goal_id", "seq", "at", "actor", "kind", "body", "operation_id", "prev_hash", "hash")
#: What must be equal, event for event, between source and target (the chain hashes are keyed apart).
COPIED_COLUMNS = EVENT_COLUMNS[:-2]
OPERATION_COLUMNS = ("id", "goal_id", "actor", "request", "result", "at")
# Everything that makes a registry non-empty.
DATA_TABLES = ("events", "operations", *schema.GOAL_TABLES)


def copy_registry(source_url: str, target_url: str, *, force: bool = False) -> dict:
    """Copy the registry at ``source_url`` into ``target_url`` and verify the copy.

    Returns a summary: the two URLs (passwords hidden), counts of goals, events and operations
    copied, whether the target's former contents were replaced, and ``verified: true``.
    """
    from loopx.ledger.registry import Registry, resolve_url

    source_url, target_url = resolve_url(source_url), resolve_url(target_url)
    if _same_place(source_url, target_url):
        raise LoopxError("invalid_argument", "--from and --to name the same registry")
    from loopx.values.progress import progress

    with Registry.open(source_url, readonly=True) as source, Registry.open(target_url) as target:
        with source.read() as stx:
            dump = _read_source(stx)
            total = sum(len(evs) for evs in dump["events"].values())

            def work(ttx):
                # A retried transaction starts its bars again.
                with progress(total, "copying events  ") as bar:
                    replaced = _prepare_target(ttx, force)
                    _write(ttx, dump, bar)
                    bar.phase("verifying goals ", len(dump["events"]))
                    _verify(ttx, dump, bar)
                return replaced

            replaced = target.store.write(work)
        from loopx.ledger import rekey

        rekey.anchor_as_it_stands(target)  # what the copy wrote is the target's newest state
    return {
        "source": _redact(source_url),
        "target": _redact(target_url),
        "goals": len(dump["events"]),
        "events": sum(len(evs) for evs in dump["events"].values()),
        "operations": len(dump["operations"]),
        "replaced": replaced,
        "verified": True,
    }


# -- reading the source --------------------------------------------------------------------------


def _read_source(tx) -> dict:
    """Everything to copy and compare, from one snapshot of the source."""
    by_goal: dict[str, list[dict]] = {}
    # Goals in the order they were created (their first event), each goal's events by seq: the
    # ledger, not the goals table, says which goals exist.
    for row in queries.all_events(tx, EVENT_COLUMNS):
        by_goal.setdefault(row["goal_id"], []).append(row)
    ordered = dict(sorted(by_goal.items(), key=lambda item: (item[1][0]["id"], item[0])))
    from loopx.ledger import integrity

    for goal_id, rows in ordered.items():
        seqs = [r["seq"] for r in rows]
        if seqs != list(range(1, len(rows) + 1)):
            # A gap a repair recorded as loss (capability.loss_recorded) is known history: copied as is.
            gap = set(range(1, seqs[-1] + 1)) - set(seqs)
            if seqs[0] < 1 or not gap <= integrity.acknowledged(rows)[0]:
                raise LoopxError("copy_mismatch", f"source goal {goal_id}: ledger is not numbered 1..{len(rows)}")
        damaged = [p for p in integrity.verify_chain(tx, goal_id) if p.code in _CHAIN_DAMAGE]
        if damaged:
            raise LoopxError(damaged[0].code if damaged[0].code == "integrity_key_missing" else "copy_mismatch",
                             f"source {damaged[0].message}; repair the source first")
    operations = queries.all_operations(tx, OPERATION_COLUMNS)
    return {"events": ordered, "operations": operations, "state": snapshots(tx)}


#: Source problems that make a copy refuse: its ledger cannot be vouched for.
_CHAIN_DAMAGE = ("event_tampered", "chain_broken", "integrity_key_missing")


def snapshots(tx) -> dict[str, dict[str, list[dict]]]:
    """:func:`loopx.ledger.log.snapshot` of every goal at once: ``{goal_id: {table: rows}}``.

    Rows are in key order by Python's string comparison, so two backends with different text
    collations give equal snapshots for equal data.
    """
    out: dict[str, dict[str, list[dict]]] = {}
    for table, keys in schema.GOAL_TABLES.items():
        column = "id" if table == "goals" else "goal_id"
        for row in queries.all_rows(tx, table):
            goal = out.setdefault(row[column], {t: [] for t in schema.GOAL_TABLES})
            goal[table].append(row)
    for goal in out.values():
        for table, keys in schema.GOAL_TABLES.items():
            goal[table].sort(key=lambda r, keys=keys: tuple(r[k] for k in keys))
    return out


def _sorted(snap: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """A snapshot with every table's rows in Python key order (see :func:`snapshots`)."""
    return {
        table: sorted(rows, key=lambda r, keys=schema.GOAL_TABLES[table]: tuple(r[k] for k in keys))
        for table, rows in snap.items()
    }


# -- writing the target --------------------------------------------------------------------------


def _prepare_target(tx, force: bool) -> bool:
    """Hold other writers out and make sure the target is empty; True if contents were replaced."""
    # Copied events keep their ids; a concurrent writer drawing ids must wait until we
    # have moved the identity past them.
    dialect_of(tx).hold_for_copy(tx)
    busy = [t for t in DATA_TABLES if queries.has_rows(tx, t)]
    if not busy:
        return False
    if not force:
        raise LoopxError(
            "target_not_empty",
            f"the target registry already holds data ({', '.join(busy)}); --force replaces it",
        )
    for table in (*DATA_TABLES, "goal_heads"):
        queries.empty(tx, table)
    return True


def _write(tx, dump: dict, bar=None) -> None:
    """Append every event with its original id and apply it; copy the operations."""
    insert = queries.event_writer(tx, EVENT_COLUMNS)
    for rows in dump["events"].values():
        for row in rows:
            insert(row)
            ledger.apply(tx, ledger.event_from_row(row))
            if bar is not None:
                bar.advance()
    from loopx.ledger import integrity

    for goal_id in dump["events"]:
        integrity.rechain(tx, goal_id, 1)  # with the target's own key
        integrity.seal(tx, goal_id)  # the target's own digest of the state it rebuilt
    for op in dump["operations"]:
        queries.insert_operation(tx, OPERATION_COLUMNS, op)
    dialect_of(tx).after_copy(tx)  # the next event a writer appends gets an id above every copied one


# -- verifying -----------------------------------------------------------------------------------


def _unknown_kinds(events) -> str:
    """Why a replay may differ: event kinds no installed plugin knows (they replay as no-ops)."""
    why = {}
    for e in events:
        if not why.get(e.kind):
            why[e.kind] = ledger.unknown_event(e)
    unknown = [f"{kind} ({text})" for kind, text in why.items() if text]
    return f" (its ledger holds kinds no installed plugin knows: {'; '.join(unknown)})" if unknown else ""


def _verify(tx, dump: dict, bar=None) -> None:
    """Raise ``copy_mismatch`` unless the target equals the source, event for event and row for row,
    and every copied chain verifies with the target's key."""
    from loopx.ledger import integrity

    copied: dict[str, list[dict]] = {}
    for row in queries.all_events(tx, EVENT_COLUMNS):
        copied.setdefault(row["goal_id"], []).append(row)
    if set(copied) != set(dump["events"]):
        raise LoopxError("copy_mismatch", "the target's goals differ from the source's")
    target_state = snapshots(tx)
    for goal_id, rows in dump["events"].items():
        if [_event_key(r) for r in copied[goal_id]] != [_event_key(r) for r in rows]:
            raise LoopxError("copy_mismatch", f"goal {goal_id}: the target's events differ from the source's")
        events = [ledger.event_from_row(r) for r in copied[goal_id]]
        replayed = ledger.normalise(_sorted(ledger.replayed_snapshot(events)))
        state = ledger.normalise(target_state.get(goal_id, _empty()))
        if replayed != state:
            raise LoopxError("copy_mismatch", f"goal {goal_id}: the target's state is not its replayed ledger"
                             + _unknown_kinds(events))
        if ledger.normalise(dump["state"].get(goal_id, _empty())) != state:
            raise LoopxError(
                "copy_mismatch",
                f"goal {goal_id}: the source's current state differs from its own ledger; repair the source first"
                + _unknown_kinds(events),
            )
        problems = [p for p in integrity.verify_chain(tx, goal_id) if p.code != "registry_rolled_back"]
        if problems:
            raise LoopxError("copy_mismatch", f"the target's {problems[0].message}")
        if bar is not None:
            bar.advance()
    ops = queries.all_operations(tx, OPERATION_COLUMNS)
    if sorted(map(_op_key, ops)) != sorted(map(_op_key, dump["operations"])):
        raise LoopxError("copy_mismatch", "the target's operations differ from the source's")
    strays = set(target_state) - set(dump["events"])
    if strays:
        raise LoopxError("copy_mismatch", f"state rows without a ledger in the target: {sorted(strays)[:3]}")


def _event_key(row: dict) -> tuple:
    # Every column but the keyed chain hashes, the body as text: the copy is verbatim, so even
    # the spacing must match.
    return tuple(row[c] for c in COPIED_COLUMNS)


def _op_key(row: dict) -> tuple:
    return tuple("" if row[c] is None else row[c] for c in OPERATION_COLUMNS)


def _empty() -> dict[str, list]:
    return {t: [] for t in schema.GOAL_TABLES}


# -- places --------------------------------------------------------------------------------------


def _same_place(a: str, b: str) -> bool:
    """Whether two URLs name one registry (same file; same server, database and schema)."""
    pa, pb = _place(a), _place(b)
    return pa is not None and pa == pb


def _place(url: str):
    scheme = url.split("://", 1)[0].lower() if "://" in url else "sqlite"
    if scheme.startswith("sqlite"):
        from loopx.store.sqlite import path_from_url

        path = path_from_url(url)
        return None if str(path) == ":memory:" else ("sqlite", str(path.resolve()))
    if scheme in ("postgresql", "postgres"):
        try:
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:
            return ("postgres", url)
        try:
            info = conninfo_to_dict(url)
        except Exception as exc:  # psycopg.ProgrammingError: a URL libpq cannot read
            from loopx.store import redact_text

            raise LoopxError("registry_unavailable",
                             redact_text(f"bad PostgreSQL URL {_redact(url)}: {exc}", url)) from None
        return ("postgres", info.get("host") or "", str(info.get("port") or 5432), info.get("dbname") or "",
                info.get("options") or "")
    return (scheme, url)


def _redact(url: str) -> str:
    from loopx.store import display_url

    return display_url(url)
