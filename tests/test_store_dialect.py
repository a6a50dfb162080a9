"""The store owns the engines' differences (issue 38): outside ``loopx/store/`` no code asks which
engine it runs on (``dialect ==``), the registry probes its store for nothing the ``Store``
protocol does not declare, and the dialect's named operations answer alike on both backends."""

from __future__ import annotations

import re
import typing

import pytest

from tests.conftest import ROOT

#: ``dialect ==``, ``dialect !=``, ``dialect in (...)``: a branch on the engine's name.
_ASKS_ENGINE = re.compile(r"""\bdialect\b[^=!\n]{0,12}(==|!=|\s(not\s+)?in\s*[(\[{])|(==|!=)\s*[\w.]*\bdialect\b""")

#: Files outside loopx/store/ still allowed to branch on the engine's name (issue 38: shrinks to
#: nothing; the lead empties it after merging the other branches).
ALLOWED: set[str] = set()


def _sources():
    for top in ("loopx", "plugins"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("loopx/store/") or "/tests/" in rel or "/.venv/" in rel:
                continue
            yield rel, path.read_text(encoding="utf-8")


def test_no_code_outside_the_store_branches_on_the_engine():
    found = [f"{rel}:{n}: {line.strip()}" for rel, text in _sources() if rel not in ALLOWED
             for n, line in enumerate(text.splitlines(), 1) if _ASKS_ENGINE.search(line)]
    assert not found, "ask loopx.store.dialect.of(tx) for a named fragment or operation instead:\n" + "\n".join(found)
    stale = [rel for rel in ALLOWED if not any(_ASKS_ENGINE.search(t) for r, t in _sources() if r == rel)]
    assert not stale, f"remove from ALLOWED (no longer branches on the engine): {stale}"


def test_the_pattern_sees_a_branch_on_the_engine():
    # The check above is only as good as its pattern: these are the shapes the code used to have.
    for line in ('if tx.dialect == "sqlite":', "shards = SHARDS if tx.dialect != 'postgres' else 1",
                 'if getattr(store, "dialect", None) == "sqlite":', 'if "sqlite" == reg.store.dialect:',
                 'if dialect in ("sqlite",):'):
        assert _ASKS_ENGINE.search(line), line
    assert not _ASKS_ENGINE.search("found = tx.one(f\"SELECT {definitions_sql(tx.dialect)} AS d\")")


def test_the_registry_probes_its_store_for_nothing_undeclared():
    text = (ROOT / "loopx/ledger/registry.py").read_text()
    assert not re.search(r"getattr\((type\()?self\.store", text), "declare the member in loopx.store.base.Store"


def _declared() -> set[str]:
    from loopx.store.base import Store

    names = set(typing.get_type_hints(Store)) | {n for n, v in vars(Store).items()
                                                 if callable(v) and not n.startswith("_")}
    return names


def test_every_store_has_every_member_the_protocol_declares(registry_url, tmp_path):
    from loopx.ledger.registry import open_store

    declared = _declared()
    assert {"path", "missing", "holds_all_on_write", "checkpoints_by_ticket", "write", "read"} <= declared
    store = open_store(registry_url)
    try:
        assert not [n for n in declared if not hasattr(store, n)], type(store).__name__
        assert store.missing is False
        assert store.holds_all_on_write is (store.dialect == "sqlite")
        assert (store.path is None) is (store.dialect == "postgres")
        ran = []
        assert store.write(lambda tx: tx.one("SELECT 1 AS x")["x"], then=lambda: ran.append(1)) == 1
        assert ran == [1]  # then: once, after the commit
    finally:
        store.close()


def test_a_registry_not_made_yet_declares_the_same_members(tmp_path):
    from loopx.ledger.registry import open_store

    path = tmp_path / "new.db"
    store = open_store(str(path), create=False)
    assert store.missing is True and store.path == path and not path.exists()
    assert store.checkpoints_by_ticket() is False and store.holds_all_on_write is True
    ran = []
    store.write(lambda tx: None, then=lambda: ran.append(store.missing))
    assert path.exists() and store.missing is False and ran == [False]
    assert not [n for n in _declared() if not hasattr(store, n)]
    store.close()


def test_the_dialect_operations_answer_alike_on_both_backends(reg):
    from loopx.store.dialect import of

    with reg.read() as tx:
        engine = of(tx)
        assert engine is of(reg.store) and engine.name == tx.dialect
        assert engine.has_table(tx, "goals") and not engine.has_table(tx, "no_such_table")
        assert engine.columns(tx, "operations") == ["id", "goal_id", "actor", "request", "result", "at"]
        assert tx.one(f"SELECT {engine.char(31)} AS c")["c"] == "\x1f"
        text = tx.one(f"SELECT {engine.row_json('o', ['id', 'goal_id'])} AS j FROM"
                      " (SELECT 'x' AS id, 'g' AS goal_id) o")["j"]
        assert text.replace(" ", "") == '{"id":"x","goal_id":"g"}'
        assert engine.location(tx).startswith(f"{engine.name}:")
        assert tx.one(f"SELECT {engine.trigger_definitions(['events'])} AS d")["d"]
