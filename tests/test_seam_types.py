"""The types at the plugin seam: a plugin that answers with the typed values (a ``Veto``, a list
of ``ContributedAction``, a ``Capability``) gets exactly the contract the dict forms give, and a
register hook's ``register`` is a registrar whose calls become typed records."""

from __future__ import annotations

import re
import shlex

import attrs
import pytest

from loopx import hookimpl
from loopx.seam import plugins
from loopx.seam.capabilities import Capability, QuotaNeeds
from loopx.seam.hookspecs.answers import ContributedAction, Veto
from loopx.seam.plugin_register import (
    CapabilityRegistration, ErrorCodeRegistration, EventKindRegistration, StoreRegistration, StoreRegistrar,
)
from tests.factories import make_goal


class Typed:
    """A capability contributing its action, and vetoing goals titled "veto", with the typed values."""

    def __init__(self, name: str, typed: bool):
        self.name, self.typed = name, typed

    @hookimpl
    def loopx_register_capabilities(self, register):
        register(Capability(name=self.name, version="1", summary="Typed answers.", owns=[self.name], actions=["go"]))

    @hookimpl
    def loopx_contract_actions(self, tx, goal, run_id, remaining):
        argv = ["loopx", "status", "--goal-id", goal.id]
        if self.typed:
            return [ContributedAction(argv=argv, note="look", capability=self.name, action="go"),
                    ContributedAction(command=f"loopx todo list --goal-id {goal.id}", capability=self.name, action="go")]
        return [{"argv": argv, "note": "look", "capability": self.name, "action": "go"},
                {"command": f"loopx todo list --goal-id {goal.id}", "capability": self.name, "action": "go"}]

    @hookimpl
    def loopx_contract_veto(self, tx, goal):
        if goal.title == "ask":
            if self.typed:
                return Veto(reason="needs_user", message="look", ask_user=True, user_actions=["loopx doctor"],
                            findings=["odd"])
            return {"reason": "needs_user", "message": "look", "decision": "ask_user", "user_actions": ["loopx doctor"],
                    "findings": ["odd"]}
        if goal.title != "veto":
            return None
        actions = [["loopx", "doctor"], f"loopx status --goal-id {goal.id}", "loopx ; rm -rf /"]
        if self.typed:
            return Veto(reason="needs_repair", message="broken", actions=actions)
        return {"reason": "needs_repair", "message": "broken", "actions": actions}


def _contract(loopx, goal_id):
    r = loopx("quota", "should-run", "--goal-id", goal_id, "--agent", "a1", "--json")
    assert r.code == 0, r
    c = r.json["interaction_contract"]
    steps = [shlex.join(s["argv"][s["argv"].index("--") + 1:]) if "--" in s["argv"] else s["kind"]
             for s in c["cli_channel"]["steps"]]
    return (r.json["decision"], r.json["reasons"], steps,
            c["cli_channel"]["next_cli_actions"] + c["user_channel"]["next_user_actions"], r.err)


@pytest.mark.parametrize("title", ["run", "veto", "ask"])
def test_typed_answers_give_the_contract_the_dict_answers_give(loopx, loopx_plugin, title):
    loopx_plugin(Typed("typed_cap", typed=True), name="typed")
    loopx_plugin(Typed("dict_cap", typed=False), name="dicts")
    seen = []
    for cap in ("typed_cap", "dict_cap"):
        g = make_goal(loopx, title=title, capabilities=(cap,))["goal"]
        decision, reasons, steps, actions, err = _contract(loopx, g)
        def same(text):  # the goal's and the run's ids are each goal's own
            return re.sub(r"\br-[0-9a-f]{12}\b", "R", text.replace(g, "G"))

        seen.append((decision, reasons, [same(s) for s in steps], [same(a) for a in actions]))
        if title == "veto":  # the shell operator is dropped and named, whichever form carried it
            assert "dropped a repair action" in err and ("'typed'" in err or "'dicts'" in err), err
    assert seen[0] == seen[1]
    if title == "run":
        assert "loopx status --goal-id G" in seen[0][2] and "loopx todo list --goal-id G" in seen[0][2]
    elif title == "ask":
        assert seen[0][:2] == ("ask_user", ["needs_user"]) and "loopx doctor" in seen[0][3]
    else:
        assert seen[0][:2] == ("repair", ["needs_repair"])
        assert seen[0][3] == ["loopx doctor", "loopx status --goal-id G"]


def test_a_veto_of_another_type_still_fails_closed(loopx, loopx_plugin, capsys):
    class Wrong:
        @hookimpl
        def loopx_contract_veto(self, tx, goal):
            return ContributedAction(argv=["loopx", "doctor"])  # not a veto

    loopx_plugin(Wrong(), name="wrong")
    g = make_goal(loopx, title="t")["goal"]
    decision, reasons, _steps, _actions, err = _contract(loopx, g)
    assert (decision, reasons) == ("repair", ["plugin_failed"])
    assert "a Veto or a dict, not ContributedAction" in err + capsys.readouterr().err


def test_a_veto_whose_actions_are_one_string_is_not_split_into_characters(loopx, loopx_plugin):
    class Careless:
        @hookimpl
        def loopx_contract_veto(self, tx, goal):
            return Veto(reason="needs_repair", actions="loopx doctor")  # type: ignore[arg-type]

    loopx_plugin(Careless(), name="careless")
    g = make_goal(loopx, title="t")["goal"]
    decision, reasons, _steps, actions, err = _contract(loopx, g)
    assert (decision, reasons, actions) == ("repair", ["needs_repair"], []), err
    assert "plugin 'careless'" in err and "veto actions must be a list, not str" in err, err


def test_an_action_whose_argv_is_one_string_is_dropped_and_named(loopx, loopx_plugin):
    class Careless:
        @hookimpl
        def loopx_contract_actions(self, tx, goal, run_id, remaining):
            return [ContributedAction(argv="loopx status")]  # type: ignore[arg-type]

    loopx_plugin(Careless(), name="careless")
    g = make_goal(loopx, title="t")["goal"]
    decision, _reasons, steps, _actions, err = _contract(loopx, g)
    assert decision == "run" and not any("status" in s for s in steps), steps
    assert "plugin 'careless'" in err and "argv is a string, not a list of arguments" in err, err


def test_each_register_call_is_a_typed_record(loopx_plugin):
    def factory(url, readonly=False):
        raise AssertionError("not opened")

    def apply(tx, event):
        pass

    class Registers:
        @hookimpl
        def loopx_register_stores(self, register):
            assert isinstance(register, StoreRegistrar)
            register("recstore", factory)

        @hookimpl
        def loopx_register_capabilities(self, register):
            register({"name": "rec_cap", "version": "1", "summary": "A dict declaration."})

        @hookimpl
        def loopx_register_event_kinds(self, register):
            register("recprobe.noted", apply, writers="user")

        @hookimpl
        def loopx_register_error_codes(self, register):
            register("recprobe.nope")

    loopx_plugin(Registers(), name="registers")
    h = plugins.hooks()
    mine = [r for r in h.register_stores() if r.plugin == "registers"]
    assert [r.item for r in mine] == [StoreRegistration(scheme="recstore", factory=factory)]
    assert mine[0].builtin is False and plugins.store_factories()["recstore"] is factory
    assert [r.item for r in h.register_capabilities() if r.plugin == "registers"] == [
        CapabilityRegistration({"name": "rec_cap", "version": "1", "summary": "A dict declaration."})]
    assert [r.item for r in h.register_event_kinds() if r.plugin == "registers"] == [
        EventKindRegistration("recprobe.noted", apply, "user", None, ())]
    assert [r.item for r in h.register_error_codes() if r.plugin == "registers"] == [
        ErrorCodeRegistration("recprobe.nope", "")]
    builtin = {r.item.scheme: r.builtin for r in h.register_stores()}
    assert builtin["sqlite"] is True


def test_capability_is_an_attrs_class_that_normalises_its_declaration():
    cap = Capability(name="x", version="1", summary="s", owns="x", reads=["todos"], quota={"turns": 1})
    assert attrs.has(Capability) and attrs.has(QuotaNeeds)
    assert cap.owns == ("x",) and cap.reads == ("todos",) and cap.quota == QuotaNeeds(turns=1)
    assert cap.doc == "docs/capabilities/x.md"
    assert cap == Capability(name="x", version="1", summary="s", owns=("x",), reads=("todos",),
                             quota=QuotaNeeds(turns=1), doc="docs/capabilities/x.md")
    assert cap.replace(plugin="p").plugin == "p" and cap.plugin is None
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        cap.name = "y"  # type: ignore[misc]


SEAM = ("loopx/seam/hooks.py", "loopx/seam/hook_guard.py", "loopx/seam/plugins.py", "loopx/seam/plugin_register.py", "loopx/seam/capabilities.py",
        "loopx/seam/capability_checks.py", "loopx/seam/capability_docs.py", "loopx/ledger/caps.py")


def test_the_plugin_seam_uses_no_private_interpreter_names_and_its_files_stay_short():
    """pluggy and the interpreter used as documented (issue 38): no ``sys._getframe``, no
    ``os.environ._data``, no ``_thread`` or other private CPython module; files under 500 lines."""
    import ast

    from tests.conftest import ROOT

    offenders = []
    for rel in SEAM:
        text = (ROOT / rel).read_text()
        assert len(text.splitlines()) < 500, rel
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Attribute) and node.attr in ("_getframe", "_data", "_current_frames"):
                offenders.append(f"{rel}:{node.lineno}: .{node.attr}")
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{rel}:{node.lineno}: import {n}" for n in names if n.startswith("_") and n != "__future__"]
    assert offenders == []
