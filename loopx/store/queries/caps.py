"""The registry's size caps (:mod:`loopx.ledger.caps`, kept in ``meta``) and the capability state they
bound (:mod:`loopx.seam.capabilities` reads it)."""

from __future__ import annotations


def meta_values(tx, keys: tuple) -> list[dict]:
    """The ``meta`` rows (key, value) of ``keys`` (two of them)."""
    return tx.query("SELECT key, value FROM meta WHERE key IN (?, ?)", keys)


def meta_value(tx, key: str) -> dict | None:
    """The ``meta`` value of ``key`` as a row."""
    return tx.one("SELECT value FROM meta WHERE key = ?", (key,))


def set_meta(tx, key: str, value: str) -> None:
    """Set ``meta`` ``key`` to ``value`` (replacing it)."""
    tx.execute("DELETE FROM meta WHERE key = ?", (key,))
    tx.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))


def state_bytes(tx, goal_id: str, namespace: str | None, keys) -> int:
    """What the goal's capability state holds (key and value lengths) outside ``keys`` of ``namespace``."""
    sql = "SELECT COALESCE(SUM(LENGTH(key) + LENGTH(value)), 0) AS n FROM capability_state WHERE goal_id = ?"
    params: list = [goal_id]
    if keys:
        sql += f" AND NOT (namespace = ? AND key IN ({', '.join('?' for _ in keys)}))"
        params += [namespace, *keys]
    return int(tx.one(sql, params)["n"])


def goal_state(tx, goal_id: str) -> list[dict]:
    """The goal's capability state (namespace, key, value), by namespace and key."""
    return tx.query("SELECT namespace, key, value FROM capability_state WHERE goal_id = ?"
                    " ORDER BY namespace, key", (goal_id,))


def namespace_state(tx, goal_id: str, namespace: str) -> list[dict]:
    """The goal's capability state in ``namespace`` (key, value), by key."""
    return tx.query("SELECT key, value FROM capability_state WHERE goal_id = ? AND namespace = ? ORDER BY key",
                    (goal_id, namespace))
