"""A capability serves the goals that enable it: a goal lists the capabilities it uses (at creation
or later, by a user), and only those add steps to its contracts, veto its turns or hear its events;
a capability on for every goal says why."""

from __future__ import annotations

import shlex
import sqlite3

import pytest

from loopx import hookimpl
from loopx.seam.capabilities import Capability
from tests.reliability.tamper import raw


class Scoped:
    """A capability with a contract action, a veto (for the goals in ``broken``) and an observer."""

    def __init__(self, name="scoped", **declared):
        self.name, self.declared = name, declared
        self.broken: set[str] = set()
        self.heard: list[tuple[str, str]] = []

    @hookimpl
    def loopx_register_capabilities(self, register):
        register(Capability(name=self.name, version="1", summary="Scoped work.", actions=["step"], **self.declared))

    @hookimpl
    def loopx_contract_actions(self, tx, goal, run_id, remaining):
        return [{"argv": ["loopx", self.name, "step", "--goal-id", goal.id], "note": f"{self.name} step",
                 "capability": self.name, "action": "step"}]

    @hookimpl
    def loopx_contract_veto(self, tx, goal):
        if goal.id in self.broken:
            return {"reason": f"{self.name}_broken", "message": "broken", "actions": [["loopx", self.name, "fix"]]}
        return None

    @hookimpl
    def loopx_event_committed(self, registry, events):
        self.heard += [(e.goal_id, e.kind) for e in events]


def create(loopx, *capabilities, title="T"):
    r = loopx("project-prompt", "create", "--title", title, *[a for c in capabilities for a in ("--capability", c)],
              "--json")
    assert r.code == 0, r
    return r.json["id"]


def turn(loopx, goal_id):
    """One real should-run: (decision, the commands its steps run through `loopx exec`, the run id)."""
    r = loopx("quota", "should-run", goal_id, "--json")
    assert r.code == 0, r
    contract = r.json.get("interaction_contract") or {}
    steps = contract.get("cli_channel", {}).get("steps", [])
    run_id = contract.get("run_id")
    if run_id and r.json["decision"] == "run":
        assert loopx("run", "finish", "--run-id", run_id, "--outcome", "partial").code == 0
    return r.json["decision"], [shlex.join(s["argv"][s["argv"].index("--") + 1:]) for s in steps if "--" in s["argv"]]


def count_events(url, goal_id):
    from loopx.ledger.registry import Registry

    with Registry.open(url) as reg, reg.read() as tx:
        return tx.one("SELECT COUNT(*) AS n FROM events WHERE goal_id = ?", (goal_id,))["n"]


def test_steps_only_on_goals_that_enable_the_capability_and_gone_once_disabled(loopx, loopx_plugin):
    loopx_plugin(Scoped())
    plain, using = create(loopx), create(loopx, "scoped")
    assert turn(loopx, plain) == ("run", [])
    assert turn(loopx, using) == ("run", [f"loopx scoped step --goal-id {using}"])
    # Disabled mid-way: the next contract no longer lists the step; enabled again, it is back.
    r = loopx("project-prompt", "capabilities", using, "--disable", "scoped", "--json")
    assert r.code == 0 and r.json["capabilities"] == [], r
    assert turn(loopx, using) == ("run", [])
    assert loopx("project-prompt", "capabilities", plain, "--enable", "scoped").code == 0
    assert turn(loopx, plain) == ("run", [f"loopx scoped step --goal-id {plain}"])


class Pair:
    """One plugin declaring two capabilities, contributing an action for each."""

    @hookimpl
    def loopx_register_capabilities(self, register):
        for name in ("left", "right"):
            register(Capability(name=name, version="1", summary="Half a pair.", actions=["go"]))

    @hookimpl
    def loopx_contract_actions(self, tx, goal, run_id, remaining):
        return [{"argv": ["loopx", name, "go"], "capability": name, "action": "go"} for name in ("left", "right")]


def test_a_plugin_with_two_capabilities_offers_only_the_ones_the_goal_enables(loopx, loopx_plugin):
    loopx_plugin(Pair())
    assert turn(loopx, create(loopx)) == ("run", [])
    assert turn(loopx, create(loopx, "right")) == ("run", ["loopx right go"])
    assert turn(loopx, create(loopx, "left", "right")) == ("run", ["loopx left go", "loopx right go"])


def test_status_show_and_history_carry_the_list(loopx, loopx_plugin):
    loopx_plugin(Scoped())
    loopx_plugin(Scoped("other"))
    g = create(loopx, "scoped")
    assert loopx("project-prompt", "show", g, "--json").json["capabilities"] == ["scoped"]
    r = loopx("project-prompt", "capabilities", g, "--enable", "other", "--json")
    assert r.json["capabilities"] == ["other", "scoped"]
    assert loopx("status", "--goal-id", g, "--json").json["goal"]["capabilities"] == ["other", "scoped"]
    assert "capabilities: other, scoped" in loopx("status", "--goal-id", g).out
    assert "capabilities: other, scoped" in loopx("project-prompt", "capabilities", g).out
    [changed] = [e for e in loopx("history", g, "--json").json if e["kind"] == "goal.capabilities_set"]
    assert changed["actor"] == "user" and changed["body"] == {"capabilities": ["other", "scoped"],
                                                              "enabled": ["other"], "disabled": []}
    # Asking for what already holds changes nothing and writes nothing.
    before = count_events(loopx.url, g)
    assert loopx("project-prompt", "capabilities", g, "--enable", "scoped").code == 0
    assert count_events(loopx.url, g) == before


@pytest.mark.parametrize("args, code", [
    (["--enable", "nope"], "capability_not_found"),
    (["--enable", "Not A Name"], "invalid_argument"),
    (["--enable", "always"], "invalid_argument"),  # on for every goal already: nothing to enable
    (["--enable", "other", "--disable", "other"], "invalid_argument"),
])
def test_bad_names_exit_2_and_change_nothing(loopx, loopx_plugin, args, code):
    loopx_plugin(Scoped("other"))
    loopx_plugin(Scoped("always", default_on=True, why="it checks every goal"))
    g = create(loopx)
    before = count_events(loopx.url, g)
    r = loopx("project-prompt", "capabilities", g, *args, "--json")
    assert r.code == 2 and r.json["error"]["code"] == code, r
    assert count_events(loopx.url, g) == before
    assert loopx("project-prompt", "show", g, "--json").json["capabilities"] == []


def test_creating_with_an_unknown_capability_creates_nothing(loopx):
    r = loopx("project-prompt", "create", "--title", "T", "--capability", "nope", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "capability_not_found", r
    assert loopx("project-prompt", "list", "--json").json == []


def test_a_retried_create_answers_what_was_recorded_after_the_capability_is_gone(loopx):
    """The capability list is checked once, inside the transaction: a retry of a recorded
    operation id replays its result, even once the plugin is uninstalled; a new request is refused."""
    from loopx.seam.plugins import get_plugin_manager

    pm = get_plugin_manager()
    name = pm.register(Scoped())
    try:
        args = ("project-prompt", "create", "--title", "T", "--capability", "scoped", "--operation-id", "op-1",
                "--json")
        first = loopx(*args)
        assert first.code == 0 and first.json["capabilities"] == ["scoped"], first
    finally:
        pm.unregister(name=name)
    again = loopx(*args)
    assert again.code == 0 and again.json["id"] == first.json["id"], again
    fresh = loopx("project-prompt", "create", "--title", "T", "--capability", "scoped", "--operation-id", "op-2",
                  "--json")
    assert fresh.code == 2 and fresh.json["error"]["code"] == "capability_not_found", fresh
    assert [g["id"] for g in loopx("project-prompt", "list", "--json").json] == [first.json["id"]]


def block_of(text: str, goal_id: str) -> list[str]:
    """The lines ``loopx status`` prints for one goal: its own line and those indented under it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if goal_id in line)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), len(lines))
    return lines[start:end]


def test_status_without_a_goal_shows_each_goals_capabilities(loopx, loopx_plugin):
    loopx_plugin(Scoped())
    loopx_plugin(Scoped("other"))
    plain, using = create(loopx, title="Plain"), create(loopx, "scoped", "other", title="Using")
    shown = {g["id"]: g["capabilities"] for g in loopx("status", "--json").json["goals"]}
    assert shown == {plain: [], using: ["other", "scoped"]}
    text = loopx("status").out
    assert block_of(text, using)[1:] == ["    todos 0/0 done", "    capabilities: other, scoped"], text
    assert not [line for line in block_of(text, plain) if "capabilities" in line], text
    # Disabled, it is gone from the page too.
    assert loopx("project-prompt", "capabilities", using, "--disable", "other").code == 0
    assert {g["id"]: g["capabilities"] for g in loopx("status", "--json").json["goals"]}[using] == ["scoped"]


@pytest.mark.parametrize("actor", ["executor", "dashboard"])
def test_only_a_user_changes_the_list(loopx, loopx_plugin, actor):
    loopx_plugin(Scoped())
    g = create(loopx)
    for args in (["--enable", "scoped"], ["--disable", "scoped"]):  # the second would change nothing
        r = loopx("project-prompt", "capabilities", g, *args, "--json", env={"LOOPX_ACTOR": actor})
        assert r.code == 2 and r.json["error"]["code"] == "actor_forbidden", r
    assert loopx("project-prompt", "show", g, "--json").json["capabilities"] == []


def test_the_broker_refuses_the_verb_inside_a_turn():
    from loopx.turn import broker

    for name in ("project-prompt", "project_prompt"):
        assert "is the user's" in broker.refusal([name, "capabilities", "g-0123456789ab", "--enable", "x"])


def test_vetoes_and_observers_serve_only_the_goals_that_enable_them(loopx, loopx_plugin):
    scoped = loopx_plugin(Scoped())
    plain, using = create(loopx), create(loopx, "scoped")
    scoped.broken |= {plain, using}
    assert turn(loopx, plain)[0] == "run"
    assert turn(loopx, using)[0] == "repair"
    assert {g for g, _ in scoped.heard} == {using}
    # The observer hears the change that enables it (the list after the change counts).
    assert loopx("project-prompt", "capabilities", plain, "--enable", "scoped").code == 0
    assert (plain, "goal.capabilities_set") in scoped.heard
    assert turn(loopx, plain)[0] == "repair"


def test_a_default_on_capability_serves_every_goal(loopx, loopx_plugin):
    always = loopx_plugin(Scoped("always", default_on=True, why="it checks every goal"))
    g = create(loopx)
    assert turn(loopx, g) == ("run", [f"loopx always step --goal-id {g}"])
    always.broken.add(g)
    assert turn(loopx, g)[0] == "repair"
    r = loopx("project-prompt", "capabilities", g, "--disable", "always", "--json")
    assert r.code == 0 and turn(loopx, g)[0] == "repair"  # not the goal's to switch off


def test_capabilities_show_says_which_goals_it_serves(loopx, loopx_plugin):
    loopx_plugin(Scoped())
    loopx_plugin(Scoped("always", default_on=True, why="it checks every goal"))
    assert "serves:   the goals that enable it" in loopx("capabilities", "show", "scoped").out
    assert "serves:   every goal: it checks every goal" in loopx("capabilities", "show", "always").out
    shown = loopx("capabilities", "show", "always", "--json").json
    assert (shown["default_on"], shown["why"]) == (True, "it checks every goal")


def test_default_on_without_a_why_is_a_load_error(loopx, loopx_plugin):
    loopx_plugin(Scoped("always", default_on=True))
    r = loopx("capabilities", "list", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "plugin_error" and "why" in r.json["error"]["message"], r


def test_the_list_is_goal_state_the_digest_covers(loopx, loopx_plugin):
    loopx_plugin(Scoped())
    g = create(loopx)
    assert raw(loopx.url, "UPDATE goals SET capabilities = ? WHERE id = ?", ('["scoped"]', g)) == 1
    r = loopx("quota", "should-run", g, "--json")
    assert r.code == 0 and r.json["decision"] == "repair", r.json


def test_a_v7_registry_gains_the_column_and_stays_trusted(tmp_path):
    """Migrating adds ``goals.capabilities`` and reseals every goal whose digest matched before;
    a goal damaged before the migration stays untrusted."""
    from loopx.domain import gates
    from loopx.domain import goals as goal_store
    from loopx.ledger.registry import Registry
    from loopx.views.should_run import should_run

    path = tmp_path / "v7.db"
    with Registry.open(str(path)) as reg:
        clean = goal_store.create(reg, "user", title="clean")["id"]
        damaged = goal_store.create(reg, "user", title="damaged")["id"]
        gate = gates.add(reg, "user", goal_id=damaged, title="prod?", scope="production")["id"]
    _as_v7(path, (clean, damaged))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE gates SET status = 'approved' WHERE id = ?", (gate,))  # damage before migrating
    conn.commit()
    conn.close()
    with Registry.open(str(path)) as reg:
        assert goal_store.show(reg, clean)["capabilities"] == []
        assert should_run(reg, "user", goal_id=clean, dry_run=True)["decision"] == "run"
        assert should_run(reg, "user", goal_id=damaged, dry_run=True)["decision"] == "repair"
    conn = sqlite3.connect(path)
    from loopx.store import schema

    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.CURRENT_VERSION
    conn.close()



def _as_v7(path, goal_ids):
    """Make ``path`` look like LoopX 7 left it: no capabilities column, digests over the rows without it."""
    from loopx.ledger import integrity
    from loopx.ledger.registry import Registry

    with Registry.open(str(path)) as reg:
        def strip(tx):
            # LoopX 7 had no per-row MACs either (schema v9), nor the history guard (schema v11,
            # loopx/ledger/history_guard.py): their triggers go first, since they name the tables.
            for r in tx.query("SELECT name FROM sqlite_master WHERE type = 'trigger'"
                              " AND (name LIKE 'state_dirty_%' OR name LIKE 'event%')"):
                tx.execute(f"DROP TRIGGER {r['name']}")
            tx.execute("DROP TABLE event_changes")
            tx.execute("DELETE FROM meta WHERE key = 'schema_mac'")
            tx.execute("DROP TABLE state_macs")
            tx.execute("DROP TABLE state_dirty")
            tx.execute("ALTER TABLE goals DROP COLUMN capabilities")
            for g in goal_ids:
                integrity.seal(tx, g, legacy=True)

        reg.store.write(strip)
    from loopx.store import schema

    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {schema.CAPABILITIES_VERSION - 1}")  # the version before the list
    conn.commit()
    conn.close()


def test_upgrading_keeps_a_goal_in_progress_using_the_capability_that_kept_its_state(tmp_path, loopx_plugin):
    """An Issue-Fix-like goal from before the list existed keeps its steps: the migration records,
    in the ledger, that it uses the capability that wrote its state; closed goals stay as they were."""
    from loopx.seam import capabilities
    from loopx.ledger import log as ledger
    from loopx.domain import goals as goal_store
    from loopx.ledger.registry import Registry
    from loopx.views.should_run import should_run

    loopx_plugin(Scoped(owns=["scoped"]))
    path = tmp_path / "v7.db"
    with Registry.open(str(path)) as reg:
        working, done, plain = (goal_store.create(reg, "user", title=t)["id"] for t in ("working", "done", "plain"))
        for g in (working, done):
            capabilities.set_state(reg, "scoped", g, {"phase": "fix"})
        goal_store.transition(reg, "user", "close", done)
    _as_v7(path, (working, done, plain))
    with Registry.open(str(path)) as reg:
        assert [goal_store.show(reg, g)["capabilities"] for g in (working, done, plain)] == [["scoped"], [], []]
        [event] = [e for e in goal_store.history(reg, working) if e["kind"] == "goal.capabilities_set"]
        assert event["actor"] == "core" and event["body"]["enabled"] == ["scoped"]
        preview = should_run(reg, "user", goal_id=working, dry_run=True)
        assert preview["decision"] == "run" and any(
            "loopx scoped step" in a for a in preview["interaction_contract"]["cli_channel"]["next_cli_actions"])
        with reg.read() as tx:  # the state is what the ledger replays to
            assert ledger.snapshot(tx, working) == ledger.replayed_snapshot(ledger.events(tx, working))


def test_the_plugin_api_creates_and_changes_the_list_under_the_same_rules(reg, loopx_plugin):
    from loopx import api

    loopx_plugin(Scoped())
    g = api.goals.create(reg, "user", title="T", capabilities=["scoped"])["id"]
    assert api.goals.set_capabilities(reg, "user", g, disable=["scoped"])["capabilities"] == []
    for bad, code in ((["nope"], "capability_not_found"), (["Bad"], "invalid_argument")):
        with pytest.raises(api.LoopxError) as err:
            api.goals.create(reg, "user", title="T", capabilities=bad)
        assert err.value.code == code

        def work(w, bad=bad):
            api.goals.create_in(w, title="T", capabilities=bad)

        with pytest.raises(api.LoopxError) as err:
            reg.mutate("user", work)
        assert err.value.code == code
    with pytest.raises(api.LoopxError) as err:
        api.goals.set_capabilities(reg, "executor", g, enable=["scoped"])
    assert err.value.code == "actor_forbidden"
    assert len(api.goals.list(reg, status="all")) == 1
