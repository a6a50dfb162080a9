"""Every edit or deletion of a stored event seen by the next should-run, in constant time (issue 39).

``quota should-run`` re-hashes only a goal's newest events, so an event further back edited or
deleted by hand (``sqlite3``, ``psql``) went unseen until ``self-repair check`` walked the whole
chain. Events are append-only: LoopX itself updates one only in a repair (a re-chain, a body
escaped) or a key change. So:

* SQL triggers on ``events`` count every UPDATE and DELETE in ``event_changes`` - one row per goal,
  ``n`` only ever going up (other triggers refuse to lower it, delete it or move it to another
  goal; PostgreSQL's ``TRUNCATE`` of either table is refused). They also note the new count in
  ``state_dirty``, which LoopX's own transaction empties when it seals.
* The goal's keyed tag binds the count (``events.changed`` in the digest's counts,
  :mod:`loopx.ledger.state_macs`): the seal of a legitimate repair records the new count, under the key.
  should-run reads the count in the statement it already sends for the head (a scalar subquery):
  a count above the sealed one is history changed outside LoopX.
* The definitions of every trigger in the registry (and of the tables this rests on) are MACed
  with the registry's key into ``meta.schema_mac`` (:func:`mark`), read and checked by the same
  statement: a trigger dropped, altered, disabled (PostgreSQL) or added is seen too.

What this cannot see, and ``self-repair check`` (the whole chain) still does: an event edited while
the triggers were dropped and then re-created with the very same text on SQLite (PostgreSQL gives a
re-created trigger a new oid, and a disabled-then-enabled one a new row version, both in the mark),
an edit made with PostgreSQL's ``session_replication_role = replica`` (a superuser's switch that
silences all triggers) or by writing the file's bytes. See docs/architecture.md ("Which check
catches what").
"""

from __future__ import annotations

from loopx.store.dialect import of as dialect_of

#: The per-goal count of event rows updated or deleted (:mod:`loopx.store.queries.history` makes
#: it), and its key in the digest's counts.
TABLE = "event_changes"
COUNT = "events.changed"
#: Where the keyed MAC of the registry's trigger definitions is kept (``meta``).
MARK_KEY = "schema_mac"
#: The tables whose definitions the mark covers besides every trigger's.
TABLES = ("events", TABLE, "state_dirty")


def trigger_sql(dialect: str) -> list[str]:
    """The table and the triggers that count changed events (see the module docstring)."""
    from loopx.store.queries.history import trigger_sql as statements

    return statements(dialect)


def definitions_sql(dialect: str) -> str:
    """A scalar SQL expression: the text of every trigger of the registry and of the tables this
    rests on (on PostgreSQL with the oids and row versions a drop, re-creation or disabling
    changes), in a fixed order - what :func:`mark` MACs."""
    return dialect_of(dialect).trigger_definitions(TABLES)


def mark_value(ring, definitions: str | None) -> str:
    """The keyed MAC of the definitions text."""
    return ring.digest(("loopx-schema-v1\x1f" + (definitions or "")).encode("utf-8", "backslashreplace"))


def mark(tx) -> int:
    """Record the MAC of the registry's trigger definitions as they stand (a schema step, a key
    change, a repair that restored the triggers). A registry without its key keeps none."""
    from loopx.ledger import keys
    from loopx.store.queries import history
    from loopx.store.queries.ledger import set_meta

    ring = keys.keyring(tx)
    if ring.state != "keyed":
        return 0
    set_meta(tx, MARK_KEY, mark_value(ring, history.definitions(tx, TABLES)))
    return 1


def install(tx) -> int:
    """Schema step: the table, the triggers, then the mark."""
    for sql in trigger_sql(tx.dialect):
        tx.execute(sql)
    return mark(tx)


def altered(ring, definitions: str | None, stored: str | None) -> bool:
    """Whether the recorded mark does not vouch for the definitions read (keyed registries only)."""
    if ring is None or ring.key is None:
        return False
    return stored is None or stored != _memo(ring, definitions)


def altered_now(tx, ring) -> bool:
    """:func:`altered` for the definitions and the mark the registry holds now (one read)."""
    from loopx.store.queries.history import definitions_and_mark

    row = definitions_and_mark(tx, TABLES, MARK_KEY)
    return altered(ring, row["d"], row["m"])


def _memo(ring, definitions):
    key = (ring, definitions)
    found = _MARKS.get(key)
    if found is None:
        if len(_MARKS) >= 16:
            _MARKS.clear()
        found = _MARKS[key] = mark_value(ring, definitions)
    return found


_MARKS: dict = {}


def restore(tx) -> None:
    """Put back LoopX's own triggers as its schema defines them - dropping every other trigger and
    re-creating each of its own - and mark the result (the repair of ``schema_altered``)."""
    from loopx.ledger import state_macs
    from loopx.store import schema

    dialect_of(tx).drop_triggers(tx)
    for sql in schema.summary_triggers(tx.dialect):
        tx.execute(sql)
    state_macs.install(tx)
    install(tx)
