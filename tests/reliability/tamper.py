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


def tables(url: str, names: list[str] | None = None) -> dict[str, list[dict]]:
    """Every row of each table in ``names`` (None: of every table), read directly from the
    registry's database in one connection and one snapshot (a connection per table cost a
    state comparison 30 opens and closes)."""
    if url.startswith("postgres"):
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(url, row_factory=dict_row) as conn:  # one transaction
            if names is None:
                names = [r["name"] for r in conn.execute(
                    "SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema()")]
            return {n: conn.execute(f"SELECT * FROM {n}").fetchall() for n in names}
    import sqlite3

    conn = sqlite3.connect(url, isolation_level=None)
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("BEGIN")
        if names is None:
            names = [r["name"] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        found = {n: [dict(r) for r in conn.execute(f"SELECT * FROM {n}")] for n in names}
        conn.execute("ROLLBACK")
        return found
    finally:
        conn.close()
