"""Helpers shared by the turn tests (no tests here): goals with budgets, actions and todos."""

from __future__ import annotations

import contextlib
import sys

from loopx.domain import gates
from loopx.views.should_run import should_run
from tests import factories

PY = sys.executable


def make_goal(via, *, title="Turn goal", criteria=("it works",), todo_texts=("first step",), **options) -> dict:
    """:func:`tests.factories.make_goal` with the turn tests' defaults: one criterion, one todo."""
    return factories.make_goal(via, title=title, criteria=criteria, todo_texts=todo_texts, **options)


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
    from loopx.seam.plugins import get_plugin_manager

    pm = get_plugin_manager()
    pm.register(obj, name=name)
    try:
        pm.check_pending()
        yield obj
    finally:
        pm.unregister(name=name)
