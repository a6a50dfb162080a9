"""Helpers shared by the turn tests (no tests here): goals with budgets, actions and todos."""

from __future__ import annotations

import contextlib
import sys

from loopx import actions, gates, quota, todos
from loopx import goals as project_prompt
from loopx.should_run import should_run

PY = sys.executable


def make_goal(reg, *, title="Turn goal", limits=None, parallel=False, todo_texts=("first step",), acts=None) -> dict:
    """A goal with optional limits, todos and actions (``acts``: {name: argv}); returns ids."""
    goal = project_prompt.create(reg, "user", title=title, criteria=["it works"], parallel_runs=parallel)
    g = goal["id"]
    if limits:
        quota.set_limits(reg, "user", goal_id=g, values=limits)
    made = [todos.add(reg, "user", goal_id=g, text=t)["id"] for t in todo_texts]
    for name, argv in (acts or {}).items():
        actions.add(reg, "user", goal_id=g, name=name, argv=argv)
    return {"goal": g, "todos": made}


def ask(reg, goal_id, agent="me", **kw) -> dict:
    """``quota should-run`` through the Python API."""
    return should_run(reg, "user", goal_id=goal_id, agent=agent, **kw)


def add_gate(reg, goal_id, blocks="all", title="Needs a look", scope="other") -> dict:
    """A pending gate."""
    return gates.add(reg, "user", goal_id=goal_id, title=title, scope=scope, blocks=blocks)


def decide_gate(reg, goal_id, gate_id, verb="approve", comment=None) -> dict:
    """Approve or reject a gate as the user."""
    return gates.decide(reg, "user", verb, goal_id=goal_id, gate_id=gate_id, comment=comment)


def count(reg, sql, params=()) -> int:
    """``SELECT COUNT(*) ...`` -> int."""
    with reg.read() as tx:
        return tx.one(sql, params)["n"]


@contextlib.contextmanager
def plugin(obj, name):
    """Register a plugin object for the duration of a block, always unregistering it."""
    from loopx.plugins import get_plugin_manager

    pm = get_plugin_manager()
    pm.register(obj, name=name)
    try:
        pm.check_pending()
        yield obj
    finally:
        pm.unregister(name=name)
