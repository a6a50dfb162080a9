"""Quota events: the user sets limits and grants more budget. Usage is never an event of its own:
it is derived from the runs that ``run.*`` events write (see :mod:`loopx.domain.usage`)."""

from __future__ import annotations

import json

from loopx.model.goal import BUDGETS as GRANT_KEYS  # the keys a grant may add to -> the limit each raises
from loopx.store.queries import projections as q


def set_limits(tx, event):
    """``body = {"limits": {...}}``: the goal's complete new limits (``None`` = unlimited)."""
    limits = {k: v for k, v in event.body["limits"].items() if v is not None}
    q.set_goal_limits(tx, event.goal_id, json.dumps(limits, sort_keys=True))


def granted(tx, event):
    """``body = {"turns": n, "tokens": n, "cost": x, "wall_seconds": x}`` (any subset) added to the grants."""
    row = q.goal_grants(tx, event.goal_id)
    grants = json.loads(row["grants"])
    for key, limit in GRANT_KEYS.items():
        amount = event.body.get(key)
        if amount:
            grants[limit] = grants.get(limit, 0) + amount
    q.set_goal_grants(tx, event.goal_id, json.dumps(grants, sort_keys=True))
