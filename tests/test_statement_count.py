"""How many SQL statements a should-run that opens a run makes, counted where they cannot hide (issue 39).

On SQLite every connection the process opens (the registry's and the rollback anchor's) is traced
with SQLite's own ``sqlite3_trace_v2``, which reports each statement the engine starts *and each
statement a trigger runs* ("-- INSERT INTO state_dirty ...", after a "-- TRIGGER name" marker).
Python's ``set_trace_callback`` cannot tell those apart (it prints the outer statement again for
each), so the test calls the C function itself on the connection's handle. On PostgreSQL every
statement the client sends is counted at psycopg's connection and cursor classes (LoopX has no other
way to the server) and the anchor's as on SQLite. Transaction control (BEGIN, COMMIT, ROLLBACK) and
PRAGMAs are not counted, as in the issue's own figure (33 before this change).
"""

from __future__ import annotations

import collections
import ctypes
import sqlite3

import pytest

from loopx import anchor, goals, quota, todos
from loopx.registry import Registry
from loopx.should_run import should_run

#: The issue's bound: a should-run that opens a run, every statement counted. NOT met yet (see
#: MEASURED); this test pins where it stands so that nothing adds a statement unseen.
BOUND = 25
#: What this count gives on each backend today (core only: no plugin installed), opening the
#: registry included. The issue measured 33 without the open; the multi-row MAC upsert and the
#: anchor read of the head alone took 4 off (SQLite: 29 + the open's table check). On PostgreSQL
#: the client-side count does not see the same four trigger statements SQLite shows (the state
#: change log's), so its honest figure is 28 + 4 = 32, the open's four reads included.
MEASURED = {"sqlite": 30, "postgres": 28}
#: Sent twice today, not fixed yet: on PostgreSQL the store's open reads the schema version from
#: ``meta`` and the transaction reads the registry id from it with the same statement text.
KNOWN_REPEATS = {"SELECT value FROM meta WHERE key = %s"}
_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA", "SAVEPOINT", "RELEASE")

_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class Traced:
    """Every statement SQLite runs on the connections opened while installed, trigger bodies included."""

    def __init__(self):
        import _sqlite3

        self.seen: list[str] = []
        self._lib = ctypes.CDLL(_sqlite3.__file__)
        self._lib.sqlite3_trace_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint, _CB, ctypes.c_void_p]
        self._callback = _CB(self._record)  # kept alive as long as the connections

    def _record(self, kind, ctx, stmt, text):
        self.seen.append(" ".join(ctypes.cast(text, ctypes.c_char_p).value.decode("utf-8", "replace").split()))
        return 0

    def watch(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        # A CPython connection object holds its ``sqlite3 *`` right after the object header.
        handle = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
        assert self._lib.sqlite3_trace_v2(handle, 1, self._callback, None) == 0  # SQLITE_TRACE_STMT
        return conn

    def counted(self) -> list[str]:
        return [s for s in self.seen if not s.startswith("-- TRIGGER ")
                and not s.lstrip("- ").upper().startswith(_CONTROL)]


@pytest.fixture
def traced(monkeypatch):
    found = Traced()
    original = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: found.watch(original(*a, **k)))
    for key in list(anchor._CONNS):  # the anchor reopens through the traced connect
        anchor._close(key)
    probe = sqlite3.connect(":memory:")
    probe.execute("SELECT 42")
    assert found.seen == ["SELECT 42"], found.seen  # the trace sees what runs
    probe.close()
    found.seen.clear()
    return found


@pytest.fixture
def sent(monkeypatch):
    """Every statement sent through psycopg (PostgreSQL)."""
    import psycopg

    out: list[str] = []
    # (Connection.execute goes through a cursor's execute: counted there, once.)
    for cls, names in ((psycopg.Cursor, ("execute", "executemany")),):
        for name in names:
            original = getattr(cls, name)

            def wrapper(self, query, *args, _original=original, **kwargs):
                out.append(" ".join(str(query).split()))
                return _original(self, query, *args, **kwargs)

            monkeypatch.setattr(cls, name, wrapper)
    return out


def _goal(url: str) -> str:
    with Registry.open(url) as reg:
        g = goals.create(reg, "user", title="count me", description="d", criteria=["c"])["id"]
        quota.set_limits(reg, "user", goal_id=g, values={"max_turns": 100})
        todos.add(reg, "user", goal_id=g, text="first")
        todos.add(reg, "user", goal_id=g, text="second")
    return g


def test_a_should_run_that_opens_a_run_counts_every_statement_none_repeated(registry_url, traced, sent):
    g = _goal(registry_url)
    traced.seen.clear()
    sent.clear()
    with Registry.open(registry_url) as reg:
        out = should_run(reg, "user", goal_id=g, agent="me")
    assert out["decision"] == "run" and out["reasons"] == ["ready_work"], out
    statements = traced.counted() + [s for s in sent if not s.upper().startswith(_CONTROL)
                                     and not s.upper().startswith("SELECT PG_NOTIFY")]
    if registry_url.startswith("postgres"):
        assert traced.counted(), "the anchor's statements are counted too"
    else:
        triggered = [s for s in statements if s.startswith("-- ")]
        assert any("state_dirty" in s for s in triggered), statements  # trigger writes are counted
    listing = "\n".join(statements)
    repeated = [s for s, n in collections.Counter(statements).items() if n > 1 and s not in KNOWN_REPEATS]
    assert not repeated, repeated
    dialect = "postgres" if registry_url.startswith("postgres") else "sqlite"
    assert len(statements) <= MEASURED[dialect], f"{len(statements)} statements:\n{listing}"
