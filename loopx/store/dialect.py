"""What differs between SQLite and PostgreSQL, by name.

Domain modules write SQL in the common subset (see :mod:`loopx.store.base`); where the engines
differ they ask the transaction's dialect, ``dialect.of(tx)``, for a named fragment (``lock_row``,
``page_join``, ``row_json``...) or a named operation (``has_table``, ``columns``, ``reindex``...),
never ``tx.dialect == ...`` themselves (tests/test_store_dialect.py checks). Light: nothing is
imported here, since every write and every should-run reach it.
"""

from __future__ import annotations

from typing import Callable


class Dialect:
    """The fragments and operations both engines have, each spelled in its own SQL."""

    #: The name a store and its transactions carry as ``dialect``.
    name = ""
    #: A statement's suffix that holds the rows it selected until the transaction ends (SQLite's
    #: write transaction holds the whole database already).
    lock_row = ""
    #: The join with which a subquery drives (SQLite's CROSS JOIN fixes the order: the subquery first).
    page_join = "JOIN"
    #: An ``INSERT``'s clause that keeps the identity values given (a copy keeps event ids).
    keep_ids = ""
    #: Whether writers of different goals run at the same time (counters are then sharded).
    parallel_writers = False

    def char(self, code: int) -> str:
        """The SQL expression of the character ``code``."""
        raise NotImplementedError

    def row_json(self, alias: str, columns: tuple | list) -> str:
        """The SQL expression of the row ``alias`` as JSON text (``columns``: the table's)."""
        raise NotImplementedError

    def has_table(self, tx, name: str) -> bool:
        """Whether the registry has the table ``name`` (one not migrated yet has not)."""
        raise NotImplementedError

    def columns(self, tx, table: str) -> list[str]:
        """The column names of ``table``, in their order."""
        raise NotImplementedError

    def reindex(self, tx, tables: tuple | list) -> None:
        """Rebuild every index of ``tables`` (SQLite rebuilds the whole file's)."""
        raise NotImplementedError

    def location(self, tx) -> str:
        """Where the registry ``tx`` reads lives (see :func:`loopx.ledger.keys.location`)."""
        raise NotImplementedError

    def hold_for_copy(self, tx) -> None:
        """Hold writers that draw event ids out while a copy writes events with their own ids."""

    def after_copy(self, tx) -> None:
        """After a copy wrote events with their ids: the next id drawn is above every copied one."""

    def trigger_definitions(self, tables: tuple | list) -> str:
        """A scalar SQL expression: the text of every trigger in the registry and of the tables
        named, in a fixed order, with what a drop, re-creation or disabling changes."""
        raise NotImplementedError

    def drop_triggers(self, tx) -> None:
        """Drop every trigger in the registry (a repair then re-creates LoopX's own)."""
        raise NotImplementedError

    def dirty_triggers(self, table: str, column: str, key: Callable[[str], str],
                       text: Callable[[str], str]) -> list[str]:
        """The statements that make a trigger record each changed row of ``table`` in
        ``state_dirty`` (its goal in ``column``; ``key(ref)``/``text(ref)``: the SQL of the row's
        key and JSON text, ``ref`` being ``OLD`` or ``NEW``)."""
        raise NotImplementedError

    def event_change_triggers(self) -> list[str]:
        """The statements that make the triggers counting each goal's changed events in
        ``event_changes`` (:mod:`loopx.ledger.history_guard`; the table: :mod:`loopx.store.queries.history`)."""
        raise NotImplementedError


class _Sqlite(Dialect):
    name = "sqlite"
    page_join = "CROSS JOIN"

    def char(self, code: int) -> str:
        return f"char({code})"

    def row_json(self, alias, columns):
        return "json_object(" + ", ".join(f"'{c}', {alias}.{c}" for c in columns) + ")"

    def has_table(self, tx, name):
        return tx.one("SELECT 1 AS x FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)) is not None

    def columns(self, tx, table):
        return [r["name"] for r in tx.query(f"PRAGMA table_info({table})")]

    def reindex(self, tx, tables):
        tx.execute("REINDEX")

    def location(self, tx):
        main = next((r for r in tx.query("PRAGMA database_list") if r["name"] == "main"), None)
        return sqlite_location(main["file"] if main else None)

    def trigger_definitions(self, tables):
        names = ", ".join(f"'{t}'" for t in tables)
        return ("(SELECT group_concat(type || ':' || name || ':' || COALESCE(sql, ''), char(30)) FROM"
                f" (SELECT type, name, sql FROM sqlite_master WHERE type = 'trigger' OR name IN ({names})"
                " ORDER BY type, name))")

    def drop_triggers(self, tx):
        for r in tx.query("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
            tx.execute(f'DROP TRIGGER IF EXISTS "{r["name"]}"')

    def dirty_triggers(self, table, column, key, text):
        out = []
        for op, ref, old, new, on_conflict in (
                ("INSERT", "NEW", "NULL", text("NEW"), "new = excluded.new"),
                ("UPDATE", "NEW", text("OLD"), text("NEW"), "new = excluded.new"),
                ("DELETE", "OLD", text("OLD"), "NULL", "new = NULL")):
            out.append(f"CREATE TRIGGER IF NOT EXISTS state_dirty_{table}_{op.lower()} AFTER {op} ON {table}"
                       f" BEGIN INSERT INTO state_dirty (goal_id, tbl, k, old, new) VALUES ({ref}.{column},"
                       f" '{table}', {key(ref)}, {old}, {new})"
                       f" ON CONFLICT (goal_id, tbl, k) DO UPDATE SET {on_conflict}; END")
        return out

    def event_change_triggers(self):
        return _EVENT_CHANGES_SQLITE


#: The oid of the registry's PostgreSQL schema (the one its tables are in).
_HERE = "(SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = current_schema())"


class _Postgres(Dialect):
    name = "postgres"
    lock_row = " FOR UPDATE"
    keep_ids = " OVERRIDING SYSTEM VALUE"
    parallel_writers = True

    def char(self, code: int) -> str:
        return f"chr({code})"

    def row_json(self, alias, columns):
        return f"CAST(to_jsonb({alias}) AS TEXT)"

    def has_table(self, tx, name):
        return bool(tx.one("SELECT to_regclass(?) IS NOT NULL AS x", (name,))["x"])

    def columns(self, tx, table):
        return [r["column_name"] for r in tx.query(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?"
            " AND table_schema = current_schema() ORDER BY ordinal_position", (table,))]

    def reindex(self, tx, tables):
        for table in tables:
            tx.execute(f"REINDEX TABLE {table}")

    def location(self, tx):
        row = tx.one("SELECT current_database() AS db, current_schema() AS sch,"
                     " CAST(inet_server_addr() AS TEXT) AS host, inet_server_port() AS port")
        return f"postgres:{row['host']}:{row['port']}:{row['db']}:{row['sch']}"

    def hold_for_copy(self, tx):
        tx.execute("LOCK TABLE events, operations IN EXCLUSIVE MODE")

    def after_copy(self, tx):
        tx.execute("SELECT setval(pg_get_serial_sequence('events', 'id'),"
                   " COALESCE((SELECT max(id) FROM events), 1), (SELECT max(id) FROM events) IS NOT NULL)")

    def trigger_definitions(self, tables):
        names = ", ".join(f"'{t}'" for t in tables)
        return ("(SELECT string_agg(x, chr(30) ORDER BY x) FROM ("
                "SELECT 'trigger:' || c.relname || ':' || t.tgname || ':' || t.oid || ':' || CAST(t.xmin AS TEXT)"
                " || ':' || CAST(t.tgenabled AS TEXT) || ':' || p.oid || ':' || CAST(p.xmin AS TEXT) || ':'"
                " || md5(p.prosrc) AS x"
                " FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid"
                " JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid"
                f" WHERE c.relnamespace = {_HERE} AND NOT t.tgisinternal"
                " UNION ALL SELECT 'table:' || c.relname || ':' || c.oid FROM pg_catalog.pg_class c"
                f" WHERE c.relnamespace = {_HERE} AND c.relname IN ({names})"
                ") d)")

    def drop_triggers(self, tx):
        for r in tx.query("SELECT t.tgname AS name, c.relname AS tbl FROM pg_catalog.pg_trigger t"
                          " JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal"
                          f" AND c.relnamespace = {_HERE}"):
            tx.execute(f'DROP TRIGGER IF EXISTS "{r["name"]}" ON "{r["tbl"]}"')

    def dirty_triggers(self, table, column, key, text):
        return [f"""CREATE OR REPLACE FUNCTION state_dirty_{table}() RETURNS trigger LANGUAGE plpgsql AS $fn$
            BEGIN
                IF TG_OP = 'DELETE' THEN
                    INSERT INTO state_dirty (goal_id, tbl, k, old, new) VALUES (OLD.{column}, '{table}',
                        {key('OLD')}, CAST(to_jsonb(OLD) AS TEXT), NULL)
                        ON CONFLICT (goal_id, tbl, k) DO UPDATE SET new = NULL;
                ELSE
                    INSERT INTO state_dirty (goal_id, tbl, k, old, new) VALUES (NEW.{column}, '{table}',
                        {key('NEW')},
                        CASE WHEN TG_OP = 'UPDATE' THEN CAST(to_jsonb(OLD) AS TEXT) END, CAST(to_jsonb(NEW) AS TEXT))
                        ON CONFLICT (goal_id, tbl, k) DO UPDATE SET new = excluded.new;
                END IF;
                RETURN NULL;
            END $fn$""",
                f"DROP TRIGGER IF EXISTS state_dirty_{table} ON {table}",
                f"CREATE TRIGGER state_dirty_{table} AFTER INSERT OR UPDATE OR DELETE ON {table}"
                f" FOR EACH ROW EXECUTE FUNCTION state_dirty_{table}()"]

    def event_change_triggers(self):
        return _EVENT_CHANGES_POSTGRES


def sqlite_location(path) -> str:
    """The location (:meth:`Dialect.location`) of the SQLite registry file ``path``."""
    import os

    return "sqlite:" + (os.path.realpath(path) if path and str(path) != ":memory:" else ":memory:")


SQLITE = _Sqlite()
POSTGRES = _Postgres()
_BY_NAME = {SQLITE.name: SQLITE, POSTGRES.name: POSTGRES}


def of(where) -> Dialect:
    """The dialect of ``where``: a transaction or a store (its ``dialect``), or a dialect's name."""
    return _BY_NAME[where if isinstance(where, str) else where.dialect]


# --- the history guard's triggers (loopx.ledger.history_guard), each dialect's own ---

# SQLite: the count goes up by one per event row updated or deleted (twice for an event moved to
# another goal: both goals count it), and the new count is noted in state_dirty.
_EVENT_CHANGES_BUMP = ("UPDATE event_changes SET n = n + 1 WHERE goal_id = {g};"
                       " INSERT INTO event_changes (goal_id, n) SELECT {g}, 1"
                       " WHERE NOT EXISTS (SELECT 1 FROM event_changes WHERE goal_id = {g});"
                       " INSERT INTO state_dirty (goal_id, tbl, k, old, new) SELECT {g}, 'event_changes', '', NULL,"
                       " CAST(n AS TEXT) FROM event_changes WHERE goal_id = {g} AND {w}"
                       " ON CONFLICT (goal_id, tbl, k) DO UPDATE SET new = excluded.new;")

_EVENT_CHANGES_SQLITE = [
    "CREATE TRIGGER IF NOT EXISTS events_changed_update AFTER UPDATE ON events BEGIN "
    + _EVENT_CHANGES_BUMP.format(g="OLD.goal_id", w="1")
    + " UPDATE event_changes SET n = n + 1 WHERE goal_id = NEW.goal_id AND NEW.goal_id IS NOT OLD.goal_id;"
      " INSERT INTO event_changes (goal_id, n) SELECT NEW.goal_id, 1 WHERE NEW.goal_id IS NOT OLD.goal_id"
      " AND NOT EXISTS (SELECT 1 FROM event_changes WHERE goal_id = NEW.goal_id);"
      " INSERT INTO state_dirty (goal_id, tbl, k, old, new) SELECT NEW.goal_id, 'event_changes', '', NULL,"
      " CAST(n AS TEXT) FROM event_changes WHERE goal_id = NEW.goal_id AND NEW.goal_id IS NOT OLD.goal_id"
      " ON CONFLICT (goal_id, tbl, k) DO UPDATE SET new = excluded.new; END",
    "CREATE TRIGGER IF NOT EXISTS events_changed_delete AFTER DELETE ON events BEGIN "
    + _EVENT_CHANGES_BUMP.format(g="OLD.goal_id", w="1") + " END",
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

# PostgreSQL: the same from one function; the count's own rows, and both tables, refuse the rest.
_EVENT_CHANGES_POSTGRES = [
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
