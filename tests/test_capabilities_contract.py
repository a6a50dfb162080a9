"""The capability contract: declarations, conflicts, ownership enforcement, quota needs."""

import json

import pytest

from loopx.seam import capabilities as caps
from loopx import hookimpl
from loopx.ledger import log as ledger
from loopx.seam.capabilities import Capability
from loopx.values.errors import LoopxError
from tests.factories import make_goal


class Declares:
    """A plugin object declaring the given capabilities."""

    def __init__(self, *declarations):
        self.declarations = declarations

    @hookimpl
    def loopx_register_capabilities(self, register):
        for d in self.declarations:
            register(d)


def alpha(**kw):
    return Capability(**{"name": "alpha", "version": "1.2.0", "summary": "Alpha does A.", "owns": ["alpha"],
                         "reads": ["todos"], "quota": {"turns": 1, "tokens": 5000, "wall_seconds": 60},
                         "commands": ["alpha"], "actions": ["step"], **kw})


def beta(**kw):
    return Capability(**{"name": "beta", "version": "0.1", "summary": "Beta does B.", "owns": ["beta"], **kw})


def count_events(reg, goal_id):
    with reg.read() as tx:
        return tx.one("SELECT COUNT(*) AS n FROM events WHERE goal_id = ?", (goal_id,))["n"]


# --- declarations and the CLI ----------------------------------------------------------------


def test_core_declares_no_capability():
    # Whatever plugins are installed, none of the declarations comes from the core's built-ins.
    assert all(not c.plugin.startswith("loopx.") for c in caps.load().values())


def test_list_and_show_text_and_json(loopx, loopx_plugin):
    loopx_plugin(Declares(alpha(), beta()), name="test-alpha-beta")
    listed = loopx("capabilities", "list", "--json")
    assert listed.code == 0, listed
    by_name = {c["name"]: c for c in listed.json}
    assert {"alpha", "beta"} <= set(by_name)
    a = by_name["alpha"]
    assert a["owns"] == ["alpha"] and a["reads"] == ["todos"] and a["actions"] == ["step"]
    assert a["quota"] == {"turns": 1, "tokens": 5000, "wall_seconds": 60}
    assert a["doc"] == "docs/capabilities/alpha.md" and a["plugin"] == "test-alpha-beta"
    text = loopx("capabilities", "list")
    assert text.code == 0 and "alpha" in text.out and "Alpha does A." in text.out
    shown = loopx("capabilities", "show", "alpha", "--json")
    assert shown.json == a
    shown_text = loopx("capabilities", "show", "alpha").out
    assert "owns:     alpha" in shown_text and "tokens 5000" in shown_text and "docs/capabilities/alpha.md" in shown_text
    missing = loopx("capabilities", "show", "nope", "--json")
    assert missing.code == 2 and missing.json["error"]["code"] == "capability_not_found"


def test_dict_declarations_are_accepted(loopx_plugin):
    loopx_plugin(Declares({"name": "gamma", "version": "1", "summary": "G.", "owns": "gamma"}))
    assert caps.get("gamma").owns == ("gamma",)


def test_two_capabilities_owning_one_namespace_is_a_load_error_naming_both(loopx, loopx_plugin):
    loopx_plugin(Declares(alpha()), name="plugin-one")
    loopx_plugin(Declares(beta(owns=["beta", "alpha"])), name="plugin-two")
    with pytest.raises(LoopxError) as err:
        caps.load()
    assert err.value.code == "capability_conflict"
    assert "'alpha'" in err.value.message and "'beta'" in err.value.message
    r = loopx("capabilities", "list", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "capability_conflict"
    assert set(r.json["error"]["details"]["capabilities"]) == {"alpha", "beta"}


def test_nested_namespace_is_a_conflict_too(loopx_plugin):
    loopx_plugin(Declares(alpha(), beta(owns=["alpha.sub"])))
    with pytest.raises(LoopxError) as err:
        caps.load()
    assert err.value.code == "capability_conflict" and "alpha" in err.value.message and "beta" in err.value.message


def test_one_name_declared_twice_is_a_conflict(loopx_plugin):
    loopx_plugin(Declares(alpha()), name="first")
    loopx_plugin(Declares(alpha(owns=["alpha2"])), name="second")
    with pytest.raises(LoopxError) as err:
        caps.load()
    assert err.value.code == "capability_conflict" and "first" in err.value.message and "second" in err.value.message


@pytest.mark.parametrize("bad, field", [
    ({"name": "Bad Name"}, "name"),
    ({"version": ""}, "version"),
    ({"owns": ["no spaces"]}, "namespace"),
    ({"quota": {"turns": -1}}, "turns"),
    ({"quota": {"tokens": float("inf")}}, "tokens"),
    ({"doc": "docs/x.txt"}, "doc"),
])
def test_malformed_declarations_are_refused_by_name(loopx_plugin, bad, field):
    loopx_plugin(Declares(alpha(**bad)))
    with pytest.raises(LoopxError) as err:
        caps.load()
    assert err.value.code == "plugin_error" and field in err.value.message


def test_unknown_quota_need_is_refused():
    with pytest.raises(LoopxError) as err:
        alpha(quota={"cost": 1})
    assert err.value.code == "plugin_error" and "cost" in err.value.message


def test_a_plugin_failing_inside_the_hook_is_named_and_skipped(loopx_plugin, capsys):
    class Broken:
        @hookimpl
        def loopx_register_capabilities(self, register):
            register(alpha())
            raise RuntimeError("kaput")

    loopx_plugin(Broken(), name="broken-decl")
    # Contained: the half-done declaration does not count, the others still load.
    assert "alpha" not in caps.load()
    err = capsys.readouterr().err
    assert "broken-decl" in err and "kaput" in err


# --- ownership -------------------------------------------------------------------------------


def test_capability_writes_and_reads_its_own_state(reg, loopx_plugin):
    loopx_plugin(Declares(alpha(), beta()))
    g = make_goal(reg, title="T")["goal"]
    state = caps.set_state(reg, "alpha", g, {"phase": "reproduce", "attempts": 1})
    assert state == {"attempts": 1, "phase": "reproduce"}
    caps.set_state(reg, "alpha", g, {"attempts": 2})
    caps.set_state(reg, "beta", g, {"x": [1, 2]})
    assert caps.get_state(reg, g, "alpha") == {"attempts": 2, "phase": "reproduce"}
    assert caps.get_state(reg, g) == {"alpha": {"attempts": 2, "phase": "reproduce"}, "beta": {"x": [1, 2]}}
    assert caps.delete_state(reg, "alpha", g, ["phase"]) == {"attempts": 2}
    with reg.read() as tx:
        kinds = [(e.actor, e.kind) for e in ledger.events(tx, g)][1:]
    assert kinds == [("capability:alpha", "capability.state_set")] * 2 + [
        ("capability:beta", "capability.state_set"), ("capability:alpha", "capability.state_deleted")]


def test_writing_another_capabilitys_namespace_is_refused_and_writes_nothing(reg, loopx_plugin):
    loopx_plugin(Declares(alpha(), beta()))
    g = make_goal(reg, title="T")["goal"]
    caps.set_state(reg, "beta", g, {"x": 1})
    before = count_events(reg, g)
    with pytest.raises(LoopxError) as err:
        caps.set_state(reg, "alpha", g, {"x": 2}, namespace="beta")
    assert err.value.code == "ownership_violation" and "'beta'" in err.value.message
    with pytest.raises(LoopxError) as err:
        caps.set_state(reg, "alpha", g, {"x": 2}, namespace="nobody")
    assert err.value.code == "ownership_violation" and "no capability declares it" in err.value.message
    assert count_events(reg, g) == before
    assert caps.get_state(reg, g) == {"beta": {"x": 1}}


def test_ownership_is_enforced_at_the_registry_for_any_emitter(reg, loopx_plugin):
    """Even code that emits the event itself (no set_state helper) cannot write foreign state."""
    loopx_plugin(Declares(alpha(), beta()))
    g = make_goal(reg, title="T")["goal"]
    before = count_events(reg, g)

    def sneaky(w):
        w.emit("capability.state_set", {"namespace": "beta", "values": {"x": 1}})

    with pytest.raises(LoopxError) as err:
        reg.mutate("capability:alpha", sneaky, goal_id=g)
    assert err.value.code == "ownership_violation"
    # The user and the executor may not write capability state at all.
    for actor in ("user", "executor"):
        with pytest.raises(LoopxError) as err:
            reg.mutate(actor, lambda w: w.emit("capability.state_set", {"namespace": "alpha", "values": {"x": 1}}),
                       goal_id=g)
        assert err.value.code == "actor_forbidden"
    assert count_events(reg, g) == before


def test_an_uninstalled_capability_owns_nothing(reg, loopx_plugin):
    g = make_goal(reg, title="T")["goal"]
    with pytest.raises(LoopxError) as err:
        reg.mutate("capability:ghost", lambda w: caps.put_state(w, "ghost", {"x": 1}), goal_id=g)
    assert err.value.code == "ownership_violation" and "not installed" in err.value.message
    with pytest.raises(LoopxError) as err:
        caps.set_state(reg, "ghost", g, {"x": 1})
    assert err.value.code == "capability_not_found"


def test_acting_lets_a_user_command_record_capability_state_in_one_transaction(reg, loopx_plugin):
    loopx_plugin(Declares(alpha()))
    goal_id = "g-0123456789ab"

    def work(w):
        w.emit("goal.created", {"title": "fix it", "description": "", "criteria": [], "parallel_runs": False},
               goal_id=goal_id)
        with caps.acting(w, "alpha") as cw:
            caps.put_state(cw, "alpha", {"repo": "/tmp/r"})
        assert w.actor == "user"
        return caps.get_state(w.tx, goal_id, "alpha")

    assert reg.mutate("user", work) == {"repo": "/tmp/r"}
    with reg.read() as tx:
        assert [(e.actor, e.kind) for e in ledger.events(tx, goal_id)] == [
            ("user", "goal.created"), ("capability:alpha", "capability.state_set")]
    # ...but acting as a capability still checks what it owns.
    with pytest.raises(LoopxError) as err:
        reg.mutate("user", lambda w: _act(w, "alpha", "beta"), goal_id=goal_id)
    assert err.value.code == "ownership_violation"


def _act(w, name, namespace):
    with caps.acting(w, name) as cw:
        caps.put_state(cw, namespace, {"x": 1})


@pytest.mark.parametrize("values", [{}, {"Bad Key": 1}, {"k": float("nan")}, {"k": object()},
                                    {"k": "x" * (caps.MAX_VALUE_BYTES + 1)}])
def test_bad_state_values_are_refused(reg, loopx_plugin, values):
    loopx_plugin(Declares(alpha()))
    g = make_goal(reg, title="T")["goal"]
    with pytest.raises(LoopxError) as err:
        caps.set_state(reg, "alpha", g, values)
    assert err.value.code == "invalid_argument"


def test_capability_state_replays_from_the_ledger(reg, loopx_plugin):
    loopx_plugin(Declares(alpha()))
    g = make_goal(reg, title="T")["goal"]
    caps.set_state(reg, "alpha", g, {"a": 1, "b": {"nested": [1, "two"]}})
    caps.set_state(reg, "alpha", g, {"c": True}, namespace="alpha.sub")
    caps.delete_state(reg, "alpha", g, ["a"])
    with reg.read() as tx:
        live = ledger.normalise(ledger.snapshot(tx, g))
        replayed = ledger.normalise(ledger.replayed_snapshot(ledger.events(tx, g)))
    assert live == replayed
    assert [r["namespace"] for r in live["capability_state"]] == ["alpha", "alpha.sub"]


def test_state_written_by_a_since_uninstalled_plugin_still_replays(reg, loopx_plugin):
    plugin = loopx_plugin(Declares(alpha()), name="temporary")
    g = make_goal(reg, title="T")["goal"]
    caps.set_state(reg, "alpha", g, {"a": 1})
    from loopx.seam.plugins import get_plugin_manager

    get_plugin_manager().unregister(plugin)
    assert "alpha" not in caps.load()
    with reg.read() as tx:
        assert ledger.replayed_snapshot(ledger.events(tx, g))["capability_state"][0]["key"] == "a"


def test_operation_id_retry_writes_once(reg, loopx_plugin):
    loopx_plugin(Declares(alpha()))
    g = make_goal(reg, title="T")["goal"]
    first = caps.set_state(reg, "alpha", g, {"n": 1}, operation_id="op-1")
    before = count_events(reg, g)
    assert caps.set_state(reg, "alpha", g, {"n": 1}, operation_id="op-1") == first
    assert count_events(reg, g) == before


def test_repairs_are_no_longer_written_as_core_vocabulary_and_loss_needs_declared_repairs(reg, loopx_plugin):
    # A repair is a capability's own event kind now (through the repair API): the old core name
    # capability.repaired is replayed by the core for older registries, and nobody writes it.
    loopx_plugin(Declares(alpha(), beta(repairs=["lease_released"])))
    g = make_goal(reg, title="T")["goal"]
    body = {"namespace": "beta", "repair": "lease_released", "todo_id": "t-0123456789ab", "finding": "stale_lease"}
    with pytest.raises(LoopxError) as err:
        reg.mutate("capability:beta", lambda w: w.emit("capability.repaired", body), goal_id=g)
    assert err.value.code == "actor_forbidden" and "nobody writes it" in err.value.message
    assert ledger.unknown_kind("capability.repaired") is None
    # What the core still reads - loss a repair recorded - is written only by a capability that
    # declared repairs.
    loss = {"lost": [3], "acknowledged": []}
    with pytest.raises(LoopxError) as err:
        reg.mutate("capability:alpha", lambda w: w.emit("capability.loss_recorded", loss), goal_id=g)
    assert err.value.code == "ownership_violation" and "declared no repairs" in err.value.message
    with pytest.raises(LoopxError) as err:
        reg.mutate("user", lambda w: w.emit("capability.loss_recorded", loss), goal_id=g)
    assert err.value.code == "actor_forbidden"
    with pytest.raises(LoopxError) as err:
        reg.mutate("capability:beta", lambda w: w.emit("capability.loss_recorded", {"lost": ["3"], "acknowledged": []}),
                   goal_id=g)
    assert err.value.code == "invalid_argument"
    reg.mutate("capability:beta", lambda w: w.emit("capability.loss_recorded", loss), goal_id=g)


# --- quota needs -----------------------------------------------------------------------------


def test_capability_whose_needs_exceed_what_remains_is_not_offered(loopx_plugin):
    loopx_plugin(Declares(alpha(), beta()))  # alpha needs 1 turn, 5000 tokens, 60 s; beta nothing
    names = lambda remaining: {c.name for c in caps.offerable(None, remaining)} & {"alpha", "beta"}
    assert names(None) == {"alpha", "beta"}
    assert names({"turns": None, "tokens": None, "wall_seconds": None, "cost": 0.0}) == {"alpha", "beta"}
    assert names({"turns": 1, "tokens": 5000, "wall_seconds": 60}) == {"alpha", "beta"}
    assert names({"turns": 3, "tokens": 4999}) == {"beta"}
    assert names({"wall_seconds": 59.5}) == {"beta"}
    assert names({"turns": 0}) == {"beta"}
    contributed = [
        {"command": "loopx alpha step --goal-id g-0123456789ab", "capability": "alpha", "action": "step"},
        {"command": "loopx beta go", "capability": "beta"},
        {"command": "loopx ghost go", "capability": "ghost"},
        {"command": "loopx plain thing"},
    ]
    kept = lambda remaining: [c["command"] for c in caps.filter_actions(contributed, None, remaining)]
    assert kept({"tokens": 100}) == ["loopx beta go", "loopx plain thing"]
    assert kept({}) == ["loopx alpha step --goal-id g-0123456789ab", "loopx beta go", "loopx plain thing"]


# --- documents -------------------------------------------------------------------------------

GOOD_DOC = """# alpha — does A

## State owned
- `alpha` — phase, attempts.

## Interaction protocol
Run `loopx alpha step`.

## Quota needs
- turns: 1
- tokens: 5000
- wall_seconds: 60

## Actions
- `step` — the next step.

## Failure modes
- it breaks.
"""


def test_check_doc_accepts_a_matching_document():
    assert caps.check_doc(alpha(), GOOD_DOC) == []


@pytest.mark.parametrize("edit, complaint", [
    (lambda d: d.replace("## Failure modes", "## Failures"), "missing section"),
    (lambda d: d.replace("- `alpha` —", "- `alpha` —\n- `other` —"), "State owned"),
    (lambda d: d.replace("- `step`", "- `jump`"), "Actions"),
    (lambda d: d.replace("tokens: 5000", "tokens: 500"), "Quota needs"),
    (lambda d: d.replace("# alpha", "# beta"), "title"),
])
def test_check_doc_finds_disagreements(edit, complaint):
    problems = caps.check_doc(alpha(), edit(GOOD_DOC))
    assert problems and any(complaint in p for p in problems), problems
