"""The repair API (one ``loopx.api.RepairSession``: ``loopx.domain.damage`` reads, ``loopx.domain.repairs``
writes) as a third-party repair capability meets it, and a contract's repair advice coming from the capability that
offers it, never from the core."""

from __future__ import annotations

import json
import sqlite3

import pytest

from loopx import hookimpl
from loopx.api import LoopxError


class Fixer:
    """A third-party repair capability: declares one repair, offers its own command."""

    @hookimpl
    def loopx_register_capabilities(self, register):
        from loopx.api import Capability

        register(Capability(name="fixer", version="1", summary="repairs leases", owns=["fixer"],
                            repairs=["lease_released"], repair_argv=["loopx", "fixer-fix", "{goal_id}"],
                            doc="docs/capabilities/fixer.md"))

    @hookimpl
    def loopx_register_event_kinds(self, register):
        from loopx.api import RepairSession

        register("fixer.repaired", RepairSession.apply_event, writers=("capability",), guard=RepairSession.guard_event)


def goal_with_claim(loopx_cli, ttl="3600"):
    g = loopx_cli("project-prompt", "create", "--title", "Audit invoices", "--json").json["id"]
    t = loopx_cli("todo", "add", "--goal-id", g, "--text", "fetch", "--json").json["id"]
    r = loopx_cli("quota", "should-run", "--goal-id", g, "--agent", "a1", "--ttl-seconds", ttl, "--json").json
    assert r["decision"] == "run", r
    loopx_cli("todo", "claim", "--goal-id", g, "--todo-id", t, "--run-id", r["interaction_contract"]["run_id"],
              "--json")
    return g, t


def tamper(reg, g):
    con = sqlite3.connect(reg.store.path)
    con.execute("UPDATE todos SET text = 'edited behind LoopX' WHERE goal_id = ?", (g,))
    con.commit()
    con.close()


def events(reg, g):
    with reg.read() as tx:
        return [(r["seq"], r["kind"]) for r in tx.query("SELECT seq, kind FROM events WHERE goal_id = ? ORDER BY seq",
                                                        (g,))]


def test_without_a_repair_capability_the_contract_says_repair_and_names_no_command(loopx_registry, loopx_cli):
    g = loopx_cli("project-prompt", "create", "--title", "Audit invoices", "--json").json["id"]
    loopx_cli("todo", "add", "--goal-id", g, "--text", "fetch", "--json")
    tamper(loopx_registry, g)
    r = loopx_cli("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json")
    assert r.code == 0 and r.json["decision"] == "repair" and r.json["reasons"] == ["integrity_mismatch"], r
    assert r.json["interaction_contract"]["cli_channel"]["next_cli_actions"] == []
    assert "self-repair" not in r.out and "no repair capability is installed" in r.out


def test_the_contract_names_the_command_the_installed_capability_offers(loopx_registry, loopx_cli, loopx_plugin,
                                                                          monkeypatch):
    loopx_plugin(Fixer())
    g = loopx_cli("project-prompt", "create", "--title", "Audit invoices", "--json").json["id"]
    loopx_cli("todo", "add", "--goal-id", g, "--text", "fetch", "--json")
    tamper(loopx_registry, g)
    r = loopx_cli("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json")
    assert r.json["decision"] == "repair"
    assert r.json["interaction_contract"]["cli_channel"]["next_cli_actions"] == [f"loopx fixer-fix {g}"]
    shown = loopx_cli("capabilities", "show", "fixer")
    assert "repair:   loopx fixer-fix '{goal_id}'" in shown.out, shown
    assert loopx_cli("capabilities", "show", "fixer", "--json").json["repair_argv"] == [
        "loopx", "fixer-fix", "{goal_id}"]
    # With self-repair instead (the plugin manager is rebuilt without the test's plugin): its own.
    monkeypatch.setenv("LOOPX_PLUGINS", "self_repair")
    r = loopx_cli("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json")
    assert r.json["interaction_contract"]["cli_channel"]["next_cli_actions"] == [
        f"loopx self-repair fix --goal-id {g}"]


def test_a_capability_without_repairs_may_not_offer_a_repair_command(loopx_registry, loopx_cli, loopx_plugin):
    class Liar:
        @hookimpl
        def loopx_register_capabilities(self, register):
            from loopx.api import Capability

            register(Capability(name="liar", version="1", summary="s", repair_argv=["rm", "-rf", "{goal_id}"]))

    loopx_plugin(Liar())
    r = loopx_cli("capabilities", "list", "--json")
    assert r.code == 2 and "repair_argv" in r.out + r.err


def test_a_repair_is_applied_under_the_rules_of_every_write(loopx_registry, loopx_cli, loopx_plugin):
    from loopx.api import RepairSession

    Repair = RepairSession.Repair
    reg = loopx_registry
    loopx_plugin(Fixer())
    g, t = goal_with_claim(loopx_cli)
    before = events(reg, g)

    def attempt(repair, kind="fixer.repaired"):
        session = RepairSession("fixer", kind=kind)
        return reg.mutate(session.actor, lambda w: session.apply(w, repair), goal_id=g)

    # The lease is live: releasing it is refused, whoever proposes it.
    live = Repair("lease_released", g, "stale_lease", t, {"todo_id": t, "agent": "a1", "expired_at": "x"})
    with pytest.raises(LoopxError) as err:
        attempt(live)
    assert err.value.code == "repair_not_needed"
    # A repair the capability did not declare, and one no one knows.
    with pytest.raises(LoopxError) as err:
        attempt(Repair("gate_widened", g, "dangling_gate", "gate-x", {"gate_id": "gate-x", "blocks": "all"}))
    assert err.value.code == "ownership_violation"
    with pytest.raises(LoopxError) as err:
        reg.mutate("capability:fixer", lambda w: w.emit("fixer.repaired", {"namespace": "fixer", "repair": "bogus"}),
                   goal_id=g)
    assert err.value.code == "invalid_argument"
    # Another capability's repair kind (its namespace is not ours).
    with pytest.raises(LoopxError) as err:
        attempt(live, kind="self_repair.repaired")
    assert err.value.code in ("ownership_violation", "invalid_argument")
    assert events(reg, g) == before

    # Once the lease expired, the damage is listed, the repair proposed and recorded as the capability.
    con = sqlite3.connect(reg.store.path)
    con.execute("UPDATE todos SET claim_expires_at = '2000-01-01T00:00:00Z' WHERE id = ?", (t,))
    con.commit()
    con.close()
    with reg.read() as tx:
        found = [f for f in RepairSession("fixer", kind="fixer.repaired").goal(tx, g, full=False)
                 if f.code == "stale_lease"]
    assert [f.subject for f in found] == [t]
    repair = RepairSession("fixer", kind="fixer.repaired").propose(found[0])
    assert repair.kind == "lease_released" and repair.body["todo_id"] == t
    seq = attempt(repair)
    with reg.read() as tx:
        row = tx.one("SELECT actor, kind, body FROM events WHERE goal_id = ? AND seq = ?", (g, seq))
        claim = tx.one("SELECT claim_agent FROM todos WHERE id = ?", (t,))
    assert (row["actor"], row["kind"], json.loads(row["body"])["repair"]) == (
        "capability:fixer", "fixer.repaired", "lease_released")
    assert claim["claim_agent"] is None
    # Done once: the same repair again finds nothing to repair.
    with pytest.raises(LoopxError) as err:
        attempt(repair)
    assert err.value.code == "repair_not_needed"


class Lax:
    """A plugin that registers a '.repaired' kind an executor could write, with its own apply and no guard."""

    @hookimpl
    def loopx_register_capabilities(self, register):
        from loopx.api import Capability

        register(Capability(name="lax", version="1", summary="s", owns=["lax"]))

    @hookimpl
    def loopx_register_event_kinds(self, register):
        register("lax.repaired", lambda tx, event: None, writers=("executor", "capability"))


def test_only_the_cores_repair_may_be_named_repaired_so_no_agent_writes_one(loopx_registry, loopx_cli, loopx_plugin,
                                                                           capsys):
    """The core replays a capability's ``NAME.repaired`` events itself when the plugin is gone, so
    the name is kept for the core's repair (its apply and guard, capabilities only): a kind that
    is not is refused at registration, and nobody - an agent least - can write it."""
    loopx_plugin(Lax())
    g, t = goal_with_claim(loopx_cli)
    run = loopx_cli("run", "list", "--goal-id", g, "--json").json[0]["id"]
    body = {"namespace": "lax", "repair": "lease_released", "todo_id": t, "agent": "a1", "expired_at": "x",
            "finding": "stale_lease"}
    for actor in ("executor", "capability:lax"):
        with pytest.raises(LoopxError) as err:
            loopx_registry.mutate(actor, lambda w: w.emit("lax.repaired", body), goal_id=g)
        assert err.value.code == "invalid_argument" and "unknown event kind" in err.value.message, err.value
    # The claim the repair would have released is still held, and the ledger holds no such event.
    todo = loopx_cli("todo", "list", "--goal-id", g, "--json").json[0]
    assert todo["claim"]["run_id"] == run and ("lax.repaired" not in [k for _, k in events(loopx_registry, g)])
    # The plugin is told why.
    assert "'.repaired' kind is a repair of the core's vocabulary" in capsys.readouterr().err
