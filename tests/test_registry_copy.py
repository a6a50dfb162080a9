"""``loopx registry copy``: a registry moves between SQLite and PostgreSQL, nothing lost, verified."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from loopx.ledger import log as ledger
from loopx.domain import goals as project_prompt
from loopx.values.errors import LoopxError
from loopx.ledger.registry import Registry
from loopx.views.registry_copy import copy_registry, snapshots
from tests import backends
from tests.conftest import Result

KIND_PARAMS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture
def make(tmp_path, request):
    """``make(kind)`` -> the URL of a new, empty registry of that kind (dropped after the test)."""
    made = []

    def new(kind):
        path = tmp_path / f"r{len(made)}"
        path.mkdir()
        url = backends.fresh_registry(kind, path)
        made.append((kind, url))
        return url

    yield new
    for kind, url in made:
        backends.drop_registry(kind, url)


def run(*args, env=None) -> Result:
    from loopx.cli import cli

    r = CliRunner().invoke(cli, [str(a) for a in args], env=env or {}, catch_exceptions=False)
    return Result(r.exit_code, r.stdout, r.stderr)


def fill(url: str) -> dict:
    """A registry with everything in it: the demo's governed loop (gates, actions, runs,
    contracts, evidence, a reward, quota), plus goals with idempotency keys and odd text."""
    r = run("--registry", url, "demo", env={"LOOPX_ACTOR": None})  # unset: the user
    assert r.code == 0, r
    with Registry.open(url) as reg:
        a = project_prompt.create(reg, "user", title="naïve ✓ 日本 'q' \"dq\" 100% ?", criteria=["x"],
                                  operation_id="op-a")
        b = project_prompt.create(reg, "user", title="second", operation_id="op-b")
        project_prompt.transition(reg, "user", "pause", b["id"], reason="waiting", operation_id="op-b-pause")
    return {"a": a, "b": b}


def everything(url: str) -> dict:
    with Registry.open(url, readonly=True) as reg, reg.read() as tx:
        goal_ids = [r["goal_id"] for r in tx.query("SELECT DISTINCT goal_id FROM events")]
        return {
            "events": {g: [(e.id, e.seq, e.at, e.actor, e.kind, e.body, e.operation_id)
                           for e in ledger.events(tx, g)] for g in goal_ids},
            "state": {g: ledger.normalise(s) for g, s in snapshots(tx).items()},
            "operations": sorted(tuple(r.values()) for r in tx.query("SELECT * FROM operations")),
            "bodies": sorted((r["id"], r["body"]) for r in tx.query("SELECT id, body FROM events")),
        }


@pytest.mark.parametrize("source_kind", KIND_PARAMS)
@pytest.mark.parametrize("target_kind", KIND_PARAMS)
def test_a_copy_holds_the_same_ledger_state_and_idempotency_keys(make, source_kind, target_kind):
    source, target = make(source_kind), make(target_kind)
    made = fill(source)
    before = everything(source)

    summary = copy_registry(source, target)

    assert summary["verified"] is True and summary["replaced"] is False
    assert summary["goals"] == len(before["events"]) == 3
    assert summary["events"] == sum(len(v) for v in before["events"].values())
    assert summary["operations"] == 3
    after = everything(target)
    assert after == before  # events (ids, order, bodies byte for byte), state, operations
    assert everything(source) == before  # the source is untouched
    with Registry.open(target) as reg:
        assert reg.store.integrity_check() == []
        for goal_id, events in after["events"].items():
            with reg.read() as tx:
                replayed = ledger.replayed_snapshot(ledger.events(tx, goal_id))
                assert ledger.normalise(replayed) == ledger.normalise(ledger.snapshot(tx, goal_id))
        # Idempotency survives the move: a retry against the target returns the first result.
        again = project_prompt.create(reg, "user", title="naïve ✓ 日本 'q' \"dq\" 100% ?", criteria=["x"],
                                      operation_id="op-a")
        assert again["id"] == made["a"]["id"]
        # New writes continue above the copied ledger: the new goal is the newest.
        fresh = project_prompt.create(reg, "user", title="after the move")
        listed = project_prompt.list_goals(reg, status="all")
        assert [g["id"] for g in listed][:3] == [fresh["id"], made["b"]["id"], made["a"]["id"]]


def test_summary_counts_and_cli_text_and_json(make, tmp_path):
    source, target = make("sqlite"), make("sqlite")
    with Registry.open(source) as reg:
        project_prompt.create(reg, "user", title="one")
    r = run("registry", "copy", "--from", source, "--to", target)
    assert r.code == 0, r
    assert "copied 1 goals, 1 events and 0 operations" in r.out and "verified" in r.out
    again = run("registry", "copy", "--from", source, "--to", target, "--json")
    assert again.code == 2
    assert again.json["error"]["code"] == "target_not_empty"
    forced = run("registry", "copy", "--from", source, "--to", target, "--force", "--json")
    assert forced.code == 0, forced
    assert forced.json == {"source": source, "target": target, "goals": 1, "events": 1, "operations": 0,
                           "replaced": True, "verified": True}


@pytest.mark.parametrize("target_kind", KIND_PARAMS)
def test_a_non_empty_target_is_refused_and_left_alone_unless_forced(make, target_kind):
    source, target = make("sqlite"), make(target_kind)
    with Registry.open(source) as reg:
        kept = project_prompt.create(reg, "user", title="from the source")
    with Registry.open(target) as reg:
        existing = project_prompt.create(reg, "user", title="already here")
    before = everything(target)
    with pytest.raises(LoopxError) as err:
        copy_registry(source, target)
    assert err.value.code == "target_not_empty"
    assert everything(target) == before

    summary = copy_registry(source, target, force=True)
    assert summary["replaced"] is True
    with Registry.open(target) as reg:
        ids = [g["id"] for g in project_prompt.list_goals(reg, status="all")]
    assert ids == [kept["id"]] and existing["id"] not in ids


@pytest.mark.parametrize("target_kind", KIND_PARAMS)
def test_a_source_whose_state_drifted_from_its_ledger_is_not_copied(make, target_kind):
    source, target = make("sqlite"), make(target_kind)
    with Registry.open(source) as reg:
        goal = project_prompt.create(reg, "user", title="honest")
        reg.store.write(lambda tx: tx.execute("UPDATE goals SET title = 'tampered' WHERE id = ?", (goal["id"],)))
    with pytest.raises(LoopxError) as err:
        copy_registry(source, target)
    assert err.value.code == "copy_mismatch" and goal["id"] in err.value.message
    with Registry.open(target) as reg, reg.read() as tx:  # nothing was committed
        assert tx.one("SELECT count(*) AS n FROM events")["n"] == 0
        assert tx.one("SELECT count(*) AS n FROM goals")["n"] == 0


def test_a_source_ledger_with_a_gap_is_not_copied(make):
    source, target = make("sqlite"), make("sqlite")
    with Registry.open(source) as reg:
        goal = project_prompt.create(reg, "user", title="g")
        project_prompt.transition(reg, "user", "pause", goal["id"])
        project_prompt.transition(reg, "user", "resume", goal["id"])
        reg.store.write(lambda tx: tx.execute("DELETE FROM events WHERE seq = 2"))
    with pytest.raises(LoopxError) as err:
        copy_registry(source, target)
    assert err.value.code == "copy_mismatch" and "numbered" in err.value.message


def test_copying_a_registry_onto_itself_is_refused(make):
    source = make("sqlite")
    with Registry.open(source) as reg:
        project_prompt.create(reg, "user", title="mine")
    for alias in (source, f"sqlite://{source}"):
        with pytest.raises(LoopxError) as err:
            copy_registry(source, alias, force=True)
        assert err.value.code == "invalid_argument"
    with Registry.open(source) as reg:
        assert len(project_prompt.list_goals(reg)) == 1


@pytest.mark.postgres
def test_the_same_postgres_schema_is_the_same_registry(make):
    url = make("postgres")
    Registry.open(url).close()
    with pytest.raises(LoopxError) as err:
        copy_registry(url, url.replace("postgresql://", "postgres://", 1), force=True)
    assert err.value.code == "invalid_argument"


def test_a_missing_source_is_an_error(make, tmp_path):
    with pytest.raises(LoopxError) as err:
        copy_registry(str(tmp_path / "nowhere.db"), make("sqlite"))
    assert err.value.code == "registry_not_found"


def test_an_empty_source_copies_nothing_and_verifies(make):
    source, target = make("sqlite"), make("sqlite")
    Registry.open(source).close()
    summary = copy_registry(source, target)
    assert (summary["goals"], summary["events"], summary["operations"]) == (0, 0, 0)


@pytest.mark.parametrize("kind", KIND_PARAMS)
def test_bulk_snapshots_equal_the_ledgers_snapshot_of_each_goal(make, kind):
    url = make(kind)
    fill(url)
    with Registry.open(url) as reg, reg.read() as tx:
        bulk = snapshots(tx)
        for goal_id in bulk:
            assert bulk[goal_id] == ledger.snapshot(tx, goal_id)
        assert len(bulk) == 3
