"""One rule for each domain check, whichever way in (issue 27): the CLI (a one-transaction domain
operation) and a plugin's ``loopx.api.*.*_in`` inside a mutation refuse the same input with the
same code, and write nothing. ``loopx.api`` is a table of names, so there is no second copy of a
rule to drift (``gates.request_in(blocks="todo:<missing>")`` once went through)."""

from __future__ import annotations

import pytest

import loopx.api as api


@pytest.fixture
def goal(loopx_registry, loopx_cli):
    """A goal with one criterion, a done todo and an open one."""
    g = loopx_cli("project-prompt", "create", "--title", "Audit invoices", "--criterion", "all checked",
                  "--json").json["id"]
    done = loopx_cli("todo", "add", "--goal-id", g, "--text", "fetch", "--json").json["id"]
    loopx_cli("todo", "done", "--goal-id", g, "--todo-id", done, "--json")
    return {"id": g, "done": done}


def ledger_of(reg):
    with reg.read() as tx:
        return tx.query("SELECT goal_id, seq, kind FROM events ORDER BY goal_id, seq")


def both_refuse(reg, loopx_cli, code, cli_args, writer, *, actor="user", goal_id=None, env=None,
                allow_closed=False):
    """The CLI command and the writer function refuse with ``code``; the ledger is unchanged."""
    before = ledger_of(reg)
    r = loopx_cli(*cli_args, "--json", env=env)
    assert r.code == 2 and r.json["error"]["code"] == code, r
    with pytest.raises(api.LoopxError) as err:
        reg.mutate(actor, writer, goal_id=goal_id, allow_closed=allow_closed)
    assert err.value.code == code, err.value
    assert ledger_of(reg) == before


def test_every_name_is_one_function_of_the_module_that_holds_it():
    """``loopx.api`` and its namespaces define nothing: each name is a value of the core or a
    namespace of :mod:`loopx.plugin_api`, and each namespace member a function or class of the
    core, re-exported as it is."""
    import ast
    import importlib
    import inspect

    source = open(api.__file__, encoding="utf-8").read()
    # No function or class is defined in loopx/api.py itself: each name is re-exported.
    assert "\ndef " not in source.split("if not TYPE_CHECKING", 1)[0] and "\nclass " not in source
    for name, target in api._LAZY.items():
        module, _, attr = target.partition(":")
        assert module != "loopx.api"
        if attr:
            assert getattr(api, name) is getattr(importlib.import_module(module), attr), name
            continue
        space = getattr(api, name)
        assert space is importlib.import_module(module) and module == f"loopx.plugin_api.{name}", name
        tree = ast.parse(inspect.getsource(space))
        assert not [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign))
                    and not (isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__")], name
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                assert not node.module.startswith("loopx.plugin_api"), (name, node.module)
                for alias in node.names:
                    held = getattr(importlib.import_module(node.module), alias.name)
                    assert getattr(space, alias.asname or alias.name) is held, (name, alias.name)


def test_each_group_of_names_is_documented_under_its_heading():
    """Each name under its heading of docs/plugins.md, and each member of a namespace as
    ``NAMESPACE.MEMBER`` under the heading of its namespace."""
    import re

    from tests.conftest import ROOT

    guide = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    api_part = guide[guide.index("## The plugin API"):guide.index("## Every hook")]
    sections = dict(part.split("\n", 1) for part in api_part.split("\n### ")[1:])
    assert set(api.GROUPS) <= set(sections), set(api.GROUPS) - set(sections)
    misplaced = [(heading, n) for heading, names in api.GROUPS.items() for n in names
                 if not re.search(rf"`{re.escape(n)}[`(.]", sections[heading])]
    assert not misplaced, misplaced
    undocumented = [(heading, f"{n}.{member}") for heading, names in api.GROUPS.items() for n, target in names.items()
                    if ":" not in target for member in getattr(api, n).__all__
                    if not re.search(rf"`{re.escape(n)}\.{re.escape(member)}[`(]", sections[heading])]
    assert not undocumented, undocumented


def test_a_gate_on_a_missing_todo(loopx_registry, loopx_cli, goal):
    g = goal["id"]
    both_refuse(loopx_registry, loopx_cli, "todo_not_found",
                ["gate", "add", "--goal-id", g, "--title", "ok?", "--blocks", "todo:t-00000000dead"],
                lambda w: api.gates.request_in(w, title="ok?", blocks="todo:t-00000000dead"), goal_id=g)


def test_a_gate_on_a_missing_action(loopx_registry, loopx_cli, goal):
    g = goal["id"]
    both_refuse(loopx_registry, loopx_cli, "action_not_found",
                ["gate", "add", "--goal-id", g, "--title", "ok?", "--blocks", "action:deploy"],
                lambda w: api.gates.request_in(w, title="ok?", blocks="action:deploy"), goal_id=g)


def test_an_approval_only_gate_names_an_action_nobody_allows_and_holds_nothing_back(loopx_registry, loopx_cli, goal):
    """A capability's approval (Issue-Fix's "accept these changed tests") is a gate on an action
    name the goal does not allow: asked for explicitly, it is pending and blocks no work; the same
    request for a todo is refused, and without approval_only the missing action is refused."""
    g = goal["id"]
    loopx_cli("todo", "add", "--goal-id", g, "--text", "work that goes on", "--json")
    made = loopx_registry.mutate("user", lambda w: api.gates.request_in(
        w, title="accept?", blocks="action:not-an-action", approval_only=True), goal_id=g)
    with loopx_registry.read() as tx:
        gate = tx.one("SELECT status, blocks FROM gates WHERE id = ?", (made,))
    assert gate == {"status": "pending", "blocks": "action:not-an-action"}
    assert loopx_cli("quota", "should-run", "--goal-id", g, "--dry-run", "--json").json["decision"] == "run"
    with pytest.raises(api.LoopxError) as err:
        loopx_registry.mutate("user", lambda w: api.gates.request_in(
            w, title="accept?", blocks=f"todo:{goal['done']}", approval_only=True), goal_id=g)
    assert err.value.code == "invalid_argument"


def test_too_many_criteria(loopx_registry, loopx_cli):
    many = [f"criterion {i}" for i in range(51)]
    both_refuse(loopx_registry, loopx_cli, "invalid_argument",
                ["project-prompt", "create", "--title", "t", *[a for c in many for a in ("--criterion", c)]],
                lambda w: api.goals.create_in(w, title="t", criteria=many))


def test_closing_a_closed_goal(loopx_registry, loopx_cli, goal):
    g = goal["id"]
    assert loopx_cli("project-prompt", "close", "--goal-id", g, "--json").code == 0
    both_refuse(loopx_registry, loopx_cli, "goal_closed", ["project-prompt", "close", "--goal-id", g],
                lambda w: api.goals.close_in(w, reason="again"), goal_id=g, allow_closed=True)


def test_an_executor_changes_todos_only_inside_a_run(loopx_registry, loopx_cli, goal):
    g = goal["id"]
    both_refuse(loopx_registry, loopx_cli, "run_not_open", ["todo", "add", "--goal-id", g, "--text", "sneak in"],
                lambda w: api.todos.add_in(w, text="sneak in"), actor="executor", goal_id=g,
                env={"LOOPX_ACTOR": "executor"})


def test_an_executor_records_evidence_only_inside_a_run(loopx_registry, loopx_cli, goal):
    g = goal["id"]
    both_refuse(loopx_registry, loopx_cli, "run_not_open",
                ["evidence", "add", "--goal-id", g, "--kind", "note", "--summary", "x"],
                lambda w: api.evidence.add_in(w, kind="note", summary="x"), actor="executor", goal_id=g,
                env={"LOOPX_ACTOR": "executor"})


def test_an_action_behind_a_missing_gate(loopx_registry, loopx_cli, goal):
    g, missing = goal["id"], api.ids.new("gate")
    both_refuse(loopx_registry, loopx_cli, "gate_not_found",
                ["action", "add", "--goal-id", g, "--name", "deploy", "--gate-id", missing, "make"],
                lambda w: api.runs.add_action_in(w, name="deploy", argv=["make"], gate_id=missing), goal_id=g)
