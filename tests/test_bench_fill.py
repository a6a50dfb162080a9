"""The benchmark's bulk fill writes the goals a command writes (issue 25).

``bench/fill.py`` makes its first goals through the API and copies them in bulk. Here: a small
fill passes ``self-repair check`` (chain, head, digest and replay), its copies hold the same rows
as goals made through the API with the same mix (ids, times, hashes and creation numbers put
aside), and should-run decides on a copy as on an API goal.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from loopx.store import schema

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import fill  # noqa: E402

GOALS = 200
EXPIRED_EVERY = 97  # goal 98 and 195 copy the expired-run goal (1)

_ID = re.compile(r"\b[a-z]-[0-9a-f]{12}\b")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
_HEX = re.compile(r"\b[0-9a-f]{64}\b")
_TITLE = re.compile(r"goal \d+\b")


def _normal(value, ids: dict):
    if not isinstance(value, str):
        return value
    value = _ID.sub(lambda m: ids.setdefault(m.group(0), f"{m.group(0)[0]}-#{len(ids)}"), value)
    return _HEX.sub("#hex", _TIME.sub("#time", _TITLE.sub("goal #", value)))


def shape(tx, goal_id: str) -> dict:
    """Every row the goal has, with ids, times, hashes, titles and event numbers made neutral."""
    ids: dict = {}
    events = tx.query("SELECT * FROM events WHERE goal_id = ? ORDER BY seq", (goal_id,))
    first = events[0]["id"]
    out = {"events": [{k: (v - first if k == "id" else _normal(v, ids)) for k, v in e.items()} for e in events]}
    for table, keys in schema.GOAL_TABLES.items():
        column = "id" if table == "goals" else "goal_id"
        rows = []
        for r in tx.query(f"SELECT * FROM {table} WHERE {column} = ?", (goal_id,)):
            row = {k: (v - first if k == "created_seq" else _normal(v, ids)) for k, v in r.items()}
            if table == "goal_usage":
                row["wall_us"] = r["wall_us"] > 0  # how long the run took
            rows.append(row)
        out[table] = sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))
    out["state_macs"] = sorted((r["tbl"], _normal(r["k"], ids), len(r["mac"])) for r in tx.query(
        "SELECT tbl, k, mac FROM state_macs WHERE goal_id = ?", (goal_id,)))
    head = tx.one("SELECT seq, head_hash, state_digest FROM goal_heads WHERE goal_id = ?", (goal_id,))
    out["goal_heads"] = {"seq": head["seq"], "head_is_last_event": head["head_hash"] == events[-1]["hash"],
                         "digest": _normal(head["state_digest"], ids)}
    return out


@pytest.fixture
def filled(reg, monkeypatch):
    monkeypatch.setattr(fill, "EXPIRED_EVERY", EXPIRED_EVERY)
    fill.fill(reg, GOALS)
    with reg.read() as tx:
        number = {int(r["title"].split()[1]): r["id"] for r in tx.query("SELECT id, title FROM goals")}
    return reg, [number[i] for i in range(GOALS)]  # the goals by their number in the mix


@pytest.mark.slow
def test_bulk_fill_passes_self_repair_check(filled, loopx):
    reg, order = filled
    assert len(order) == GOALS
    out = loopx("self-repair", "check", "--json", env={"LOOPX_PLUGINS": "self_repair"}).json
    assert out["checked"]["goals"] == GOALS
    assert {"chain_broken", "event_tampered", "head_mismatch", "state_digest_mismatch", "goal_unsealed",
            "ledger_drift", "quota_drift", "revision_mismatch"} <= set(out["checked"]["detectors"])
    # The only findings: the runs the mix leaves open past their lease (goals 1, 98 and 195).
    assert sorted((f["code"], f["goal_id"]) for f in out["findings"]) == sorted(
        ("abandoned_run", order[i]) for i in (1, 98, 195))


def test_the_filled_registry_has_the_schema_a_new_one_has(filled, tmp_path):
    reg, _ = filled
    if reg.store.dialect != "sqlite":
        pytest.skip("the fill changes no PostgreSQL schema object but the change log's triggers")
    from loopx.ledger.registry import Registry

    def objects(r):
        with r.read() as tx:
            return [tuple(row.values()) for row in tx.query("SELECT type, name, tbl_name, sql FROM sqlite_master"
                                                               " ORDER BY name")]

    with Registry.open(str(tmp_path / "new.db")) as fresh:
        assert objects(reg) == objects(fresh)  # every index and change-log trigger back as the schema made it
    with reg.read() as tx:
        assert tx.query("SELECT key FROM meta WHERE key LIKE 'bench%'") == []
        assert tx.one("SELECT count(*) AS n FROM state_dirty")["n"] == 0


def test_bulk_copies_hold_the_rows_the_api_writes(filled):
    reg, order = filled
    # Goals made now through the API, one of each mix, against a bulk copy of the same mix.
    for api_i, copy_i in ((203, 13), (240, 90), (230, 110), (257, 107), (292, 195)):
        assert fill.variant(api_i) == fill.variant(copy_i) and copy_i >= fill.TEMPLATE_GOALS
        made = fill.api_goal(reg, api_i)
        with reg.read() as tx:
            api, copy = shape(tx, made), shape(tx, order[copy_i])
        assert copy == api, (api_i, copy_i)
    # Each copy has ids of its own.
    with reg.read() as tx:
        todo_ids = [r["id"] for r in tx.query("SELECT id FROM todos")]
        assert len(set(todo_ids)) == len(todo_ids) == 3 * (GOALS + 5)


def test_should_run_on_a_copy_decides_as_on_an_api_goal(filled, loopx):
    reg, order = filled
    made = fill.api_goal(reg, 202)
    for goal in (made, order[150]):
        out = loopx("quota", "should-run", "--goal-id", goal, "--agent", "a1", "--json").json
        assert (out["decision"], out["reasons"]) == ("run", ["ready_work"]), goal
