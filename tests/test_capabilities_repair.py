"""Repairs recorded as ``self_repair.repaired`` events, on every storage backend.

The self_repair plugin's own suite damages SQLite files byte-for-byte; here the damage is done with
backend-neutral SQL through the store, so the rebuild and the detectors run on PostgreSQL too.
"""

import pytest

from loopx.domain import gates, todos
from loopx.ledger import log as ledger
from loopx.domain import goals as project_prompt

detectors = pytest.importorskip("loopx_self_repair.detectors", reason="pip install -e ./plugins/self_repair")
repairs = pytest.importorskip("loopx_self_repair.repairs")


@pytest.fixture(autouse=True)
def self_repair_plugin(loopx_plugin):
    """The core suite loads no installed plugin: register self_repair's hooks for these tests."""
    import loopx_self_repair.plugin

    loopx_plugin(loopx_self_repair.plugin, name="self_repair")


def damage(reg, sql, params=()):
    reg.store.write(lambda tx: tx.execute(sql, params))


def codes(reg, g):
    return sorted({f["code"] for f in detectors.check(reg, goal_id=g)["findings"]})


def test_rebuild_and_reference_repairs_on_every_backend(reg, registry_url):
    g = project_prompt.create(reg, "user", title="T")["id"]
    a = todos.add(reg, "user", goal_id=g, text="a")["id"]
    b = todos.add(reg, "user", goal_id=g, text="b", depends_on=[a])["id"]
    gate = gates.add(reg, "user", goal_id=g, title="ok?", blocks=f"todo:{a}")["id"]
    assert codes(reg, g) == []
    # Current state lost a todo behind the ledger's back: the rebuild brings it back.
    damage(reg, "DELETE FROM todos WHERE id = ?", (a,))
    assert codes(reg, g) == ["dangling_gate", "ledger_drift", "missing_dependency", "state_digest_mismatch"]
    result = repairs.fix(registry_url, goal_id=g)
    # One rebuild; the references it restores are no longer findings.
    assert result["ok"] and [r["code"] for r in result["repaired"]] == ["state_digest_mismatch", "ledger_drift"]
    with reg.read() as tx:
        assert [t.id for t in todos.list_todos(tx, g)] == [a, b]
        assert tx.one("SELECT blocks FROM gates WHERE id = ?", (gate,))["blocks"] == f"todo:{a}"
    # The ledger entry of the todo was rewritten to another id: the rebuild trusts the ledger,
    # then the references to the todo that no longer exists go.
    ghost = "t-000000000000"
    damage(reg, "UPDATE events SET body = REPLACE(body, ?, ?) WHERE goal_id = ? AND kind = 'todo.added'"
           " AND body LIKE ?", (a, ghost, g, f'%"todo_id":"{a}"%'))
    # The edited event no longer matches its hash: fix never copies it into state.
    result = repairs.fix(registry_url, goal_id=g)
    assert not result["ok"] and "event_tampered" in {f["code"] for f in result["remaining"]}
    with reg.read() as tx:
        assert [t.id for t in todos.list_todos(tx, g)] == [a, b]
    # Damage that predates the chain (an older LoopX; the migration chained it as it stood).
    from loopx.ledger import integrity

    def rechain(tx):
        integrity.rechain(tx, g, 1)
        integrity.seal(tx, g)

    reg.store.write(rechain)
    # The rollback anchor (keyed integrity) only ever saw hashes the migration computed: the chain
    # rewritten here must not look like a copy replacing the registry (registry_rolled_back).
    from loopx.ledger import rekey

    rekey.anchor_as_it_stands(reg)
    result = repairs.fix(registry_url, goal_id=g)
    assert result["ok"], result
    assert [r["result"] for r in result["repaired"]] == ["state_rebuilt", "dependency_dropped", "gate_widened"]
    with reg.read() as tx:
        assert [t.id for t in todos.list_todos(tx, g)] == [ghost, b]
        assert todos.load_todo(tx, g, b).depends_on == []
        assert tx.one("SELECT blocks FROM gates WHERE id = ?", (gate,))["blocks"] == "all"
        live = ledger.normalise(ledger.snapshot(tx, g))
        assert live == ledger.normalise(ledger.replayed_snapshot(ledger.events(tx, g)))
    assert codes(reg, g) == []


def test_a_revision_behind_the_ledger_is_rebuilt_on_every_backend(reg, registry_url):
    g = project_prompt.create(reg, "user", title="T")["id"]
    todos.add(reg, "user", goal_id=g, text="a")
    damage(reg, "UPDATE goals SET revision = 1 WHERE id = ?", (g,))
    with reg.read() as tx:
        assert [f.code for f in detectors.veto_findings(tx, g)] == ["revision_mismatch"]
    assert repairs.fix(registry_url, goal_id=g)["ok"]
    with reg.read() as tx:
        assert project_prompt.load_goal(tx, g).revision == 3
        assert detectors.veto_findings(tx, g) == []
    todos.add(reg, "user", goal_id=g, text="writes work again")
