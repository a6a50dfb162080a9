"""The attention summary behind the overview: kept on every write, rebuilt by replay and by the
schema migration for registries made before it, and paging by cursor in the CLI."""

from __future__ import annotations

import pytest

from loopx.ledger import log as ledger
from loopx.ledger.registry import Registry
from loopx.store import schema
from tests.factories import make_goal


def _run(loopx, goal_id, outcome):
    r = loopx("quota", "should-run", "--goal-id", goal_id, "--json")
    assert r.code == 0 and r.json["decision"] == "run", r
    run_id = r.json["interaction_contract"]["run_id"]
    assert loopx("run", "finish", "--run-id", run_id, "--outcome", outcome, "--json").code == 0


def _mixed(loopx) -> dict:
    ids = {name: make_goal(loopx, title=name)["goal"] for name in ("quiet", "gated", "broke", "failing", "paused", "closed")}
    assert loopx("gate", "add", "--goal-id", ids["gated"], "--title", "Deploy?", "--scope", "production").code == 0
    assert loopx("quota", "set", "--goal-id", ids["broke"], "--max-turns", "1").code == 0
    _run(loopx, ids["broke"], "ok")
    _run(loopx, ids["failing"], "failed")
    assert loopx("project_prompt", "pause", "--goal-id", ids["paused"]).code == 0
    assert loopx("gate", "add", "--goal-id", ids["closed"], "--title", "x", "--scope", "production").code == 0
    assert loopx("project_prompt", "close", "--goal-id", ids["closed"]).code == 0
    return ids


def _view(loopx, *args):
    r = loopx("status", "--json", *args)
    assert r.code == 0, r
    view = r.json
    view.pop("generated_at")
    for g in view["goals"]:
        if g["last_run"]:
            g["last_run"].pop("state", None)
    return view


def _downgrade(url: str, to: int) -> None:
    """Make ``url`` look like a registry written before the summary existed (schema ``to``)."""
    with Registry.open(url) as reg:
        def drop(tx):
            # Later steps go too (tamper evidence, v4; usage counters, v5): the migration then re-runs them.
            if to < schema.USAGE_VERSION:
                for table in ("goal_usage", "todo_deps", "todo_ready"):
                    tx.execute(f"DROP TABLE {table}")
            if to < schema.INTEGRITY_VERSION:
                tx.execute("DROP TABLE goal_heads")
                tx.execute("ALTER TABLE events DROP COLUMN prev_hash")
                tx.execute("ALTER TABLE events DROP COLUMN hash")
            if tx.dialect == "sqlite":
                for t in ("insert", "delete", "update"):
                    tx.execute(f"DROP TRIGGER goal_summary_counted_{t}")
                tx.execute("DROP TABLE goal_summary")
                tx.execute("DROP TABLE summary_counts")
                tx.execute(f"PRAGMA user_version = {to}")
            else:
                tx.execute("DROP TABLE goal_summary, summary_counts CASCADE")
                tx.execute("DROP FUNCTION goal_summary_counted()")
                tx.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(to),))

        reg.store.write(drop)


def test_migration_builds_the_summary_of_an_existing_registry(loopx):
    # _downgrade undoes the steps after the summary up to the usage counters; the later steps
    # (v6's tables, created IF NOT EXISTS; v7's keying, which finds the registry's id in meta and
    # the registry keyed already; v8's goal capabilities column, added only when missing; v9's
    # per-row MACs, tables and triggers created IF NOT EXISTS; v10's index, IF NOT EXISTS; v11's
    # history guard, its tables and triggers created IF NOT EXISTS and its marks made again; v12's
    # rebuild of the summary; v13's goal_workspaces, IF NOT EXISTS) change nothing when re-run.
    assert schema.MACS_VERSION == schema.CAPABILITIES_VERSION + 1 == schema.KEYED_VERSION + 2 == schema.CURRENT_VERSION - 4
    assert schema.USAGE_VERSION == schema.INTEGRITY_VERSION + 1 == schema.SUMMARY_VERSION + 2, \
        "_downgrade undoes the steps after the summary"
    ids = _mixed(loopx)
    before = _view(loopx, "--all")
    # Who needs a person (loopx.views.needs_you): the gate and the budget; one failed run does not yet.
    assert before["counts"] == {"goals": {"open": 4, "paused": 1, "closed": 1}, "attention": 2}

    _downgrade(loopx.url, schema.SUMMARY_VERSION - 1)
    with Registry.open(loopx.url) as reg:  # opening read-write migrates
        assert reg.store.schema_version() == schema.CURRENT_VERSION
    assert _view(loopx, "--all") == before

    # And it is kept from then on: settle the gate, the goal leaves the attention part.
    gate = loopx("status", "--goal-id", ids["gated"], "--json").json["gates"]["pending"][0]["id"]
    assert loopx("gate", "approve", "--goal-id", ids["gated"], "--gate-id", gate).code == 0
    after = _view(loopx)
    assert after["counts"]["attention"] == 1
    assert {g["id"] for g in after["goals"] if g["attention"]} == {ids["broke"], ids["failing"]}
    assert [g["id"] for g in after["goals"] if g["needs_you"]] == [ids["broke"]]


def test_summary_is_what_the_ledger_replays(loopx, reg):
    ids = _mixed(loopx)
    with reg.read() as tx:
        for goal_id in ids.values():
            state = ledger.snapshot(tx, goal_id)
            assert len(state["goal_summary"]) == 1
            assert ledger.replayed_snapshot(ledger.events(tx, goal_id)) == state
        lanes = {r["goal_id"]: (r["lane"], r["attention"]) for r in tx.query("SELECT * FROM goal_summary")}
    assert lanes[ids["gated"]] == (2, "gate_pending")
    assert lanes[ids["broke"]] == (2, "budget_exhausted")
    assert lanes[ids["failing"]] == (2, "run_failed")
    assert lanes[ids["quiet"]] == (1, "") and lanes[ids["paused"]] == (1, "")
    assert lanes[ids["closed"]] == (0, "")  # closed goals never need attention


def test_counts_follow_every_status_change(loopx):
    ids = [make_goal(loopx, title=f"g{i}")["goal"] for i in range(4)]
    assert loopx("project_prompt", "pause", "--goal-id", ids[0]).code == 0
    assert loopx("project_prompt", "close", "--goal-id", ids[1]).code == 0
    assert loopx("project_prompt", "resume", "--goal-id", ids[0]).code == 0
    assert loopx("project_prompt", "pause", "--goal-id", ids[2]).code == 0
    assert _view(loopx)["counts"] == {"goals": {"open": 2, "paused": 1, "closed": 1}, "attention": 0}


def test_list_pages_by_cursor_through_every_goal(loopx):
    ids = [make_goal(loopx, title=f"goal {i}")["goal"] for i in range(7)]
    assert loopx("project_prompt", "close", "--goal-id", ids[3]).code == 0
    seen, cursor = [], None
    for _ in range(5):
        args = ["project_prompt", "list", "--status", "all", "--limit", "3", "--json"]
        r = loopx(*args, *(["--cursor", cursor] if cursor else []))
        assert r.code == 0, r
        seen += [g["id"] for g in r.json]
        if len(r.json) < 3:
            break
        cursor = r.json[-1]["id"]
    assert seen == ids[::-1]
    text = loopx("project_prompt", "list", "--limit", "2").out
    assert f"more: loopx project-prompt list --cursor {ids[-2]}" in text


@pytest.mark.parametrize("args", [["--cursor", "g-000000000000"], ["--cursor", "nonsense"], ["--limit", "1001"]])
def test_list_refuses_a_bad_page(loopx, args):
    make_goal(loopx, title="one")["goal"]
    r = loopx("project_prompt", "list", *args, "--json")
    assert r.code == 2, r
    assert r.json["error"]["code"] == "invalid_argument"


def test_stored_budget_verdict_matches_the_quota_module(loopx):
    """The summary's budget arithmetic (kept below the domain layer) agrees with loopx.domain.usage."""
    cases = {
        "turns at the limit": (["--max-turns", "1"], [("ok", {})], []),
        "turns left": (["--max-turns", "2"], [("ok", {})], []),
        "tokens exactly used": (["--max-tokens", "30"], [("ok", {"tokens": "10"}), ("ok", {"tokens": "20"})], []),
        "float cost used up": (["--max-cost", "0.3"], [("ok", {"cost": "0.1"}), ("ok", {"cost": "0.2"})], []),
        "granted back": (["--max-turns", "1"], [("ok", {})], ["--turns", "1"]),
        "wall seconds": (["--max-wall-seconds", "0.001"], [("ok", {})], []),
        "no limits": ([], [("failed", {})], []),
    }
    ids = {}
    for name, (limits, runs, grant) in cases.items():
        goal = ids[name] = make_goal(loopx, title=name)["goal"]
        if limits:
            assert loopx("quota", "set", "--goal-id", goal, *limits).code == 0
        for outcome, extra in runs:
            r = loopx("quota", "should-run", "--goal-id", goal, "--json")
            assert r.code == 0 and r.json["decision"] == "run", (name, r)
            args = ["run", "finish", "--run-id", r.json["interaction_contract"]["run_id"], "--outcome", outcome]
            for k, v in extra.items():
                args += [f"--{k}", v]
            assert loopx(*args).code == 0, name
        if grant:
            assert loopx("quota", "grant", "--goal-id", goal, *grant).code == 0
    for name, goal in ids.items():
        view = loopx("status", "--goal-id", goal, "--json").json
        assert ("budget_exhausted" in view["attention"]) == bool(view["quota"]["exhausted"]), (name, view["quota"])
    assert "budget_exhausted" in loopx("status", "--goal-id", ids["float cost used up"], "--json").json["attention"]
    assert "budget_exhausted" not in loopx("status", "--goal-id", ids["granted back"], "--json").json["attention"]
