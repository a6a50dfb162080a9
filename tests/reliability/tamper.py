"""Helpers for damaging a registry behind LoopX's back, on SQLite and PostgreSQL alike."""

from __future__ import annotations


def raw(url: str, sql: str, params: tuple = ()) -> int:
    """Run one statement directly on the registry's database (no LoopX involved); rows changed."""
    if url.startswith("postgres"):
        import psycopg

        from loopx.store.postgres import translate

        with psycopg.connect(url, autocommit=True) as conn:
            return conn.execute(translate(sql), params).rowcount
    import sqlite3

    conn = sqlite3.connect(url)
    try:
        n = conn.execute(sql, params).rowcount
        conn.commit()
        return n
    finally:
        conn.close()


def rows(url: str, sql: str, params: tuple = ()) -> list[dict]:
    """Read rows directly from the registry's database."""
    if url.startswith("postgres"):
        import psycopg
        from psycopg.rows import dict_row

        from loopx.store.postgres import translate

        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
            return conn.execute(translate(sql), params).fetchall()
    import sqlite3

    conn = sqlite3.connect(url)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()
