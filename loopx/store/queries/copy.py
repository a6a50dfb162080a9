"""The statements of ``loopx registry copy`` (:mod:`loopx.views.registry_copy`): the source read whole,
the target emptied and written with the events' own ids, and read back to verify. Cold.
"""

from __future__ import annotations

from typing import Callable

from loopx.store.dialect import of as dialect_of


def all_events(tx, columns: tuple) -> list[dict]:
    """Every event (``columns``), by goal and sequence number."""
    cols = ", ".join(columns)
    return tx.query(f"SELECT {cols} FROM events ORDER BY goal_id, seq")


def all_operations(tx, columns: tuple) -> list[dict]:
    """Every recorded operation (``columns``), by id."""
    return tx.query(f"SELECT {', '.join(columns)} FROM operations ORDER BY id")


def all_rows(tx, table: str) -> list[dict]:
    """Every row of ``table``."""
    return tx.query(f"SELECT * FROM {table}")


def has_rows(tx, table: str) -> bool:
    """Whether ``table`` holds a row."""
    return tx.one(f"SELECT 1 AS x FROM {table} LIMIT 1") is not None


def empty(tx, table: str) -> None:
    """Delete every row of ``table``."""
    tx.execute(f"DELETE FROM {table}")


def event_writer(tx, columns: tuple) -> Callable[[dict], None]:
    """A function that writes one event row (``columns`` of it) with its own id."""
    cols = ", ".join(columns)
    marks = ", ".join("?" for _ in columns)
    keep_ids = dialect_of(tx).keep_ids
    insert = f"INSERT INTO events ({cols}){keep_ids} VALUES ({marks})"

    def write(row: dict) -> None:
        tx.execute(insert, tuple(row[c] for c in columns))

    return write


def insert_operation(tx, columns: tuple, op: dict) -> None:
    """Write one recorded operation (its six ``columns``)."""
    tx.execute(
        f"INSERT INTO operations ({', '.join(columns)}) VALUES (?, ?, ?, ?, ?, ?)",
        tuple(op[c] for c in columns),
    )
