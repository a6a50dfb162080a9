"""The vocabulary of LoopX as attrs classes, and the one cattrs converter for the edges.

These are plain values: the registry builds them from rows, the CLI and the status server turn
them into JSON with :func:`to_json`. Nothing here touches storage.

Classes live in one module per area (``goal``, ``gate``, ``todo``, ``run``, ``evidence``,
``event``) and are imported on first use (``from loopx.model import Gate`` works as usual):
creating an attrs class costs about half a millisecond, and ``quota should-run`` runs before
every agent turn, so a command pays only for the classes it touches.
"""

from __future__ import annotations

import importlib

import cattrs

GOAL_STATUSES = ("open", "paused", "closed")
GATE_SCOPES = ("production", "privacy", "safety", "other")
GATE_STATUSES = ("pending", "approved", "rejected")
TODO_STATUSES = ("open", "done", "blocked")
TODO_PRIORITIES = ("P0", "P1", "P2", "P3", "P4")
RUN_STATUSES = ("open", "finished", "abandoned")
RUN_OUTCOMES = ("ok", "partial", "failed")
ACTORS = ("user", "executor", "dashboard", "core")  # plus "capability:NAME"

_WHERE = {
    "Criterion": "goal",
    "QuotaLimits": "goal",
    "QuotaUsage": "goal",
    "Goal": "goal",
    "Gate": "gate",
    "Claim": "todo",
    "Todo": "todo",
    "Action": "run",
    "Handoff": "run",
    "Run": "run",
    "Contract": "run",
    "UsageEntry": "run",
    "Evidence": "evidence",
    "Reward": "evidence",
    "Event": "event",
}

__all__ = [*_WHERE, "converter", "to_json", "from_json", "from_row"]


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'loopx.model' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"loopx.model.{module}"), name)
    globals()[name] = value
    return value


converter = cattrs.Converter()


def to_json(value):
    """Turn a model value (or list/dict of them) into JSON-ready data."""
    return converter.unstructure(value)


def from_json(data, cls):
    """Build a model value of ``cls`` from JSON-ready data."""
    return converter.structure(data, cls)


def from_row(row: dict, cls, json_columns: tuple[str, ...] = ()):
    """Build a model value of ``cls`` from a SQL row whose ``json_columns`` hold JSON text.

    Columns the class does not have (sequence numbers, foreign keys) are ignored.
    """
    import json

    data = dict(row)
    for column in json_columns:
        if data.get(column) is not None:
            data[column] = json.loads(data[column])
    return converter.structure(data, cls)
