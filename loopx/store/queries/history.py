"""The history guard's statements (:mod:`loopx.ledger.history_guard`): the table counting each goal's
changed events and the triggers that count them (each dialect's own:
:meth:`loopx.store.dialect.Dialect.event_change_triggers`), and the reads of the registry's
trigger definitions and their recorded mark.

Not on should-run's path: should-run reads the count, the definitions and the mark in the
statement it sends for the head (:func:`loopx.store.queries.integrity.head_and_window`).
"""

from __future__ import annotations

from loopx.store.dialect import of as dialect_of

#: The per-goal count of event rows updated or deleted.
TABLE = "event_changes"

#: The table of counts.
CREATE = f"CREATE TABLE IF NOT EXISTS {TABLE} (goal_id TEXT PRIMARY KEY, n BIGINT NOT NULL)"


def trigger_sql(dialect: str) -> list[str]:
    """The table and the triggers that count changed events, as ``dialect`` spells them."""
    return [CREATE, *dialect_of(dialect).event_change_triggers()]


def definitions(tx, tables: tuple) -> str | None:
    """The registry's trigger definitions and those of ``tables``, as one text
    (:meth:`loopx.store.dialect.Dialect.trigger_definitions`)."""
    return tx.one(f"SELECT {dialect_of(tx).trigger_definitions(tables)} AS d")["d"]


def definitions_and_mark(tx, tables: tuple, mark_key: str) -> dict:
    """:func:`definitions` (``d``) and the mark recorded in ``meta`` under ``mark_key`` (``m``)."""
    return tx.one(f"SELECT {dialect_of(tx).trigger_definitions(tables)} AS d,"
                  f" (SELECT value FROM meta WHERE key = '{mark_key}') AS m")
