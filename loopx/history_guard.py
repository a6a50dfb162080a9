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
  :mod:`loopx.state_macs`): the seal of a legitimate repair records the new count, under the key.
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

#: The per-goal count of event rows updated or deleted, and its key in the digest's counts.
TABLE = "event_changes"
COUNT = "events.changed"
#: Where the keyed MAC of the registry's trigger definitions is kept (``meta``).
MARK_KEY = "schema_mac"
#: The tables whose definitions the mark covers besides every trigger's.
_TABLES = ("events", TABLE, "state_dirty")
_CREATE = f"CREATE TABLE IF NOT EXISTS {TABLE} (goal_id TEXT PRIMARY KEY, n BIGINT NOT NULL)"

# SQLite: the count goes up by one per event row updated or deleted (twice for an event moved to
# another goal: both goals count it), and the new count is noted in state_dirty.
_BUMP_SQLITE = ("UPDATE event_changes SET n = n + 1 WHERE goal_id = {g};"
                " INSERT INTO event_changes (goal_id, n) SELECT {g}, 1"
                " WHERE NOT EXISTS (SELECT 1 FROM event_changes WHERE goal_id = {g});"
                " INSERT INTO state_dirty (goal_id, tbl, k, old, new) SELECT {g}, 'event_changes', '', NULL,"
                " CAST(n AS TEXT) FROM event_changes WHERE goal_id = {g} AND {w}"
                " ON CONFLICT (goal_id, tbl, k) DO UPDATE SET new = excluded.new;")

_SQLITE = [
    "CREATE TRIGGER IF NOT EXISTS events_changed_update AFTER UPDATE ON events BEGIN "
    + _BUMP_SQLITE.format(g="OLD.goal_id", w="1")
    + " UPDATE event_changes SET n = n + 1 WHERE goal_id = NEW.goal_id AND NEW.goal_id IS NOT OLD.goal_id;"
      " INSERT INTO event_changes (goal_id, n) SELECT NEW.goal_id, 1 WHERE NEW.goal_id IS NOT OLD.goal_id"
      " AND NOT EXISTS (SELECT 1 FROM event_changes WHERE goal_id = NEW.goal_id);"
      " INSERT INTO state_dirty (goal_id, tbl, k, old, new) SELECT NEW.goal_id, 'event_changes', '', NULL,"
      " CAST(n AS TEXT) FROM event_changes WHERE goal_id = NEW.goal_id AND NEW.goal_id IS NOT OLD.goal_id"
      " ON CONFLICT (goal_id, tbl, k) DO UPDATE SET new = excluded.new; END",
    "CREATE TRIGGER IF NOT EXISTS events_changed_delete AFTER DELETE ON events BEGIN "
    + _BUMP_SQLITE.format(g="OLD.goal_id", w="1") + " END",
    "CREATE TRIGGER IF NOT EXISTS event_changes_only_up BEFORE UPDATE ON event_changes"
    " WHEN NEW.goal_id IS NOT OLD.goal_id OR NEW.n <= OLD.n"
    " BEGIN SELECT RAISE(ABORT, 'event_changes only counts up'); END",
    "CREATE TRIGGER IF NOT EXISTS event_changes_kept BEFORE DELETE ON event_changes"
    " BEGIN SELECT RAISE(ABORT, 'event_changes rows are never deleted'); END",
    # (INSERT OR REPLACE deletes without firing delete triggers: an insert may only start a count.)
    "CREATE TRIGGER IF NOT EXISTS event_changes_start BEFORE INSERT ON event_changes"
    " WHEN NEW.n <> 1 OR EXISTS (SELECT 1 FROM event_changes WHERE goal_id = NEW.goal_id)"
    " BEGIN SELECT RAISE(ABORT, 'event_changes only counts up'); END",
]

_POSTGRES = [
    """CREATE OR REPLACE FUNCTION events_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
    DECLARE g TEXT;
    BEGIN
        FOREACH g IN ARRAY (CASE WHEN TG_OP = 'UPDATE' AND NEW.goal_id IS DISTINCT FROM OLD.goal_id
                            THEN ARRAY[OLD.goal_id, NEW.goal_id] ELSE ARRAY[OLD.goal_id] END) LOOP
            UPDATE event_changes SET n = n + 1 WHERE goal_id = g;
            IF NOT FOUND THEN
                INSERT INTO event_changes (goal_id, n) VALUES (g, 1);
            END IF;
            INSERT INTO state_dirty (goal_id, tbl, k, old, new)
                SELECT g, 'event_changes', '', NULL, CAST(n AS TEXT) FROM event_changes WHERE goal_id = g
                ON CONFLICT (goal_id, tbl, k) DO UPDATE SET new = excluded.new;
        END LOOP;
        RETURN NULL;
    END $fn$""",
    "DROP TRIGGER IF EXISTS events_changed ON events",
    "CREATE TRIGGER events_changed AFTER UPDATE OR DELETE ON events FOR EACH ROW EXECUTE FUNCTION events_changed()",
    """CREATE OR REPLACE FUNCTION event_changes_only_up() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
        IF TG_OP = 'DELETE' OR TG_OP = 'TRUNCATE' THEN
            RAISE EXCEPTION 'event_changes rows are never deleted';
        END IF;
        IF TG_OP = 'UPDATE' AND (NEW.goal_id IS DISTINCT FROM OLD.goal_id OR NEW.n <= OLD.n) THEN
            RAISE EXCEPTION 'event_changes only counts up';
        END IF;
        IF TG_OP = 'INSERT' AND NEW.n <> 1 THEN
            RAISE EXCEPTION 'event_changes only counts up';
        END IF;
        RETURN NEW;
    END $fn$""",
    "DROP TRIGGER IF EXISTS event_changes_only_up ON event_changes",
    "CREATE TRIGGER event_changes_only_up BEFORE INSERT OR UPDATE OR DELETE ON event_changes"
    " FOR EACH ROW EXECUTE FUNCTION event_changes_only_up()",
    """CREATE OR REPLACE FUNCTION loopx_never_truncated() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
        RAISE EXCEPTION '% is never truncated', TG_TABLE_NAME;
    END $fn$""",
    "DROP TRIGGER IF EXISTS events_never_truncated ON events",
    "CREATE TRIGGER events_never_truncated BEFORE TRUNCATE ON events"
    " FOR EACH STATEMENT EXECUTE FUNCTION loopx_never_truncated()",
    "DROP TRIGGER IF EXISTS event_changes_never_truncated ON event_changes",
    "CREATE TRIGGER event_changes_never_truncated BEFORE TRUNCATE ON event_changes"
    " FOR EACH STATEMENT EXECUTE FUNCTION loopx_never_truncated()",
]


#: The triggers of each dialect (a store's ``dialect`` names it).
_TRIGGERS = {"sqlite": _SQLITE, "postgres": _POSTGRES}


def trigger_sql(dialect: str) -> list[str]:
    """The table and the triggers that count changed events (see the module docstring)."""
    return [_CREATE, *_TRIGGERS[dialect_of(dialect).name]]


def definitions_sql(dialect: str) -> str:
    """A scalar SQL expression: the text of every trigger of the registry and of the tables this
    rests on (on PostgreSQL with the oids and row versions a drop, re-creation or disabling
    changes), in a fixed order - what :func:`mark` MACs."""
    return dialect_of(dialect).trigger_definitions(_TABLES)


def mark_value(ring, definitions: str | None) -> str:
    """The keyed MAC of the definitions text."""
    return ring.digest(("loopx-schema-v1\x1f" + (definitions or "")).encode("utf-8", "backslashreplace"))


def mark(tx) -> int:
    """Record the MAC of the registry's trigger definitions as they stand (a schema step, a key
    change, a repair that restored the triggers). A registry without its key keeps none."""
    from loopx import keys

    ring = keys.keyring(tx)
    if ring.state != "keyed":
        return 0
    found = tx.one(f"SELECT {definitions_sql(tx.dialect)} AS d")
    tx.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
               (MARK_KEY, mark_value(ring, found["d"])))
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
    from loopx import state_macs
    from loopx.store import schema

    dialect_of(tx).drop_triggers(tx)
    for sql in schema.summary_triggers(tx.dialect):
        tx.execute(sql)
    state_macs.install(tx)
    install(tx)
