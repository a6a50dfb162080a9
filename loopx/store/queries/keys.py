"""The integrity key's statements: the registry's id and what keying or re-keying it records
(:mod:`loopx.ledger.rekey`), and the id an SQLite registry file holds, read without LoopX's store
(:mod:`loopx.views.key_files`).

Cold: keying a registry, ``registry rekey``/``reanchor`` and ``registry keys`` load it.
"""

from __future__ import annotations


def goals_by_id(tx) -> list[dict]:
    """Every goal with events (``{"goal_id"}``), by id."""
    return tx.query("SELECT DISTINCT goal_id FROM events ORDER BY goal_id")


def add_meta(tx, key: str, value: str) -> None:
    """Add the ``meta`` row ``key`` (one that is not there yet)."""
    tx.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))


def recorded_heads(tx) -> list[dict]:
    """Every goal's recorded chain head ``{"goal_id", "seq", "hash"}``, by goal."""
    return tx.query("SELECT goal_id, seq, head_hash AS hash FROM goal_heads ORDER BY goal_id")


def file_meta_value(conn, key: str) -> tuple | None:
    """The ``meta`` value ``key`` (``(value,)``) through a plain sqlite3 connection, or None."""
    return conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
