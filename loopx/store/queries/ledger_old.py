"""A registry as an older LoopX left it, made on purpose for tests of what meets one
(:func:`loopx.testing.old_sqlite_registry`). Cold: tests only."""

from __future__ import annotations


def make_v1_sqlite(path) -> int:
    """Make ``path`` an SQLite registry at schema version 1 (no goals); returns that version."""
    import sqlite3

    from loopx.store import schema

    con = sqlite3.connect(path)
    try:
        for sql in schema.MIGRATIONS[0]:
            con.execute(sql.format(**schema.DIALECT_WORDS["sqlite"]))
        con.execute("PRAGMA user_version = 1")
        con.commit()
    finally:
        con.close()
    return 1
