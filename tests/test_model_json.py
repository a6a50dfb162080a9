"""``loopx.model.to_json``: the same data cattrs' ``unstructure`` gives, without importing cattrs
on the path of the commands an agent runs every step (evidence, todos, run finish)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.factories import make_goal


def _ok(result) -> dict:
    assert result.code == 0, result
    return result.json


def _one_of_each(loopx) -> tuple[str, str]:
    """A goal with criteria, limits, a gate, a claimed todo, evidence with nested data and a run."""
    made = make_goal(loopx, criteria=["it works"], todo_texts=["first", "second"], limits={"max_turns": 5},
                     gates=[{"title": "ship it", "scope": "production", "blocks": "action:ship"}],
                     acts={"ship": ["true"]})
    g = made["goal"]
    c = _ok(loopx("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json"))["interaction_contract"]
    _ok(loopx("todo", "claim", "--goal-id", g, "--todo-id", made["todos"][0], "--run-id", c["run_id"], "--json",
              env={"LOOPX_ACTOR": "executor"}))
    _ok(loopx("evidence", "add", "--goal-id", g, "--run-id", c["run_id"], "--kind", "note", "--summary", "s",
              "--data", json.dumps({"nested": {"list": [1, 2.5, None, True, "x"]}}), "--json",
              env={"LOOPX_ACTOR": "executor"}))
    return g, c["run_id"]


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_to_json_is_what_cattrs_gives_for_every_value_a_command_prints(registry_url, loopx):
    import cattrs

    from loopx.domain import evidence, gates, goals, runs, todos
    from loopx.model import to_json
    from loopx.ledger.registry import Registry

    g, _run = _one_of_each(loopx)
    with Registry.open(registry_url) as reg, reg.read() as tx:
        values = [goals.load_goal(tx, g), *gates.list_gates(tx, g), *todos.list_todos(tx, g)]
        values += [evidence.evidence_from_row(r) for r in tx.query("SELECT * FROM evidence WHERE goal_id = ?", (g,))]
        values += [runs.run_from_row(r) for r in tx.query("SELECT * FROM runs WHERE goal_id = ?", (g,))]
    assert {"Goal", "Gate", "Todo", "Evidence", "Run"} <= {type(v).__name__ for v in values}
    assert any(getattr(v, "claim", None) for v in values), "a todo with a nested claim"
    assert any(getattr(v, "criteria", None) for v in values), "a goal with nested criteria"
    converter = cattrs.Converter()
    for v in values:
        assert to_json(v) == converter.unstructure(v), v
    assert to_json(values) == converter.unstructure(values)
    assert to_json({"a": values[:2]}) == converter.unstructure({"a": values[:2]})


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
@pytest.mark.slow
def test_the_commands_of_a_step_do_not_import_cattrs(registry_url, loopx):
    from tests.conftest import loopx_env

    g, run = _one_of_each(loopx)
    env = loopx_env(registry_url, LOOPX_ACTOR="executor")
    todo = _ok(loopx("todo", "list", "--goal-id", g, "--json"))
    second = [t for t in (todo if isinstance(todo, list) else todo["todos"]) if t["text"] == "second"][0]["id"]
    for args in (["evidence", "add", "--goal-id", g, "--run-id", run, "--kind", "note", "--summary", "more"],
                 ["evidence", "list", "--goal-id", g],
                 ["todo", "done", "--goal-id", g, "--todo-id", second, "--run-id", run],
                 ["project-prompt", "show", g],
                 ["run", "finish", "--run-id", run, "--agent", "a1", "--outcome", "ok", "--handoff", "next"]):
        p = subprocess.run([sys.executable, "-X", "importtime", "-m", "loopx", *args, "--json"], env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, (args, p.stdout, p.stderr[-2000:])
        imported = [line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")]
        assert "loopx.model" in imported, args
        assert not [m for m in imported if m.split(".")[0] == "cattrs"], args
