"""The vocabulary of LoopX as attrs classes, and the one cattrs converter for the edges.

Rows become values one way: each area's hand-written ``<area>_from_row`` (``goal_from_row``,
``todo_from_row``, ``gate_from_row``, ``run_from_row``, ``action_from_row``, ``evidence_from_row``,
``reward_from_row``, ``event_from_row``).

These are plain values: the registry builds them from rows, the CLI and the status server turn
them into JSON with :func:`to_json`. Nothing here touches storage.

Classes live in one module per area (``goal``, ``gate``, ``todo``, ``run``, ``evidence``,
``event``) and are imported on first use (``from loopx.model import Gate`` works as usual):
creating an attrs class costs about half a millisecond, and ``quota should-run`` runs before
every agent turn, so a command pays only for the classes it touches.
"""

from __future__ import annotations

import importlib

# What a type checker sees of the lazy names below: the real classes, imported from the module
# that defines each (``tests/test_plugin_api.py`` keeps this block equal to ``_WHERE``). A constant
# named TYPE_CHECKING is typing's for mypy and pyright, and costs no import at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from loopx.model.event import Event as Event
    from loopx.model.evidence import Evidence as Evidence
    from loopx.model.evidence import Reward as Reward
    from loopx.model.gate import Gate as Gate
    from loopx.model.goal import Criterion as Criterion
    from loopx.model.goal import Goal as Goal
    from loopx.model.goal import QuotaLimits as QuotaLimits
    from loopx.model.goal import QuotaUsage as QuotaUsage
    from loopx.model.run import Action as Action
    from loopx.model.run import Contract as Contract
    from loopx.model.run import Handoff as Handoff
    from loopx.model.run import Run as Run
    from loopx.model.run import UsageEntry as UsageEntry
    from loopx.model.todo import Claim as Claim
    from loopx.model.todo import Todo as Todo

GOAL_STATUSES = ("open", "paused", "closed")
GATE_SCOPES = ("production", "privacy", "safety", "other")
GATE_STATUSES = ("pending", "approved", "rejected")
TODO_STATUSES = ("open", "done", "blocked")
TODO_PRIORITIES = ("P0", "P1", "P2", "P3", "P4")
RUN_STATUSES = ("open", "finished", "abandoned")
RUN_OUTCOMES = ("ok", "partial", "failed", "interrupted")  # interrupted: SIGTERM/SIGINT (loopx.sandbox.interrupt)
ACTORS = ("user", "executor", "dashboard", "core")  # plus "capability:NAME"
#: The one budget-name table: usage/grant name -> limit name. Here, beside the other constants
#: and away from the attrs classes, so that the ledger's apply (loopx.ledger.attention) reads it for free.
BUDGETS = {"turns": "max_turns", "tokens": "max_tokens", "cost": "max_cost", "wall_seconds": "max_wall_seconds"}

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

__all__ = [*_WHERE, "BUDGETS", "to_json", "from_json"]


if not TYPE_CHECKING:  # a type checker sees the imports above, and no catch-all

    def __getattr__(name: str):
        module = _WHERE.get(name)
        if module is None:
            raise AttributeError(f"module 'loopx.model' has no attribute {name!r}")
        value = getattr(importlib.import_module(f"loopx.model.{module}"), name)
        globals()[name] = value
        return value


_converter = None


def _get_converter():
    # cattrs is imported only to build values from JSON (rare): its import (~15 ms) stays off the
    # path of the commands that merely print values; rows become values through each area's
    # hand-written ``*_from_row``.
    global _converter
    if _converter is None:
        import cattrs

        _converter = cattrs.Converter()
    return _converter


def to_json(value):
    """Turn a model value (or list/dict of them) into JSON-ready data.

    The model's fields hold only JSON-ready data, other model values, lists and dicts, so this
    is attrs' own ``asdict`` (the same data cattrs' ``unstructure`` gives, which
    ``tests/test_model_json.py`` checks) without importing cattrs on every command's path.
    """
    import attrs

    if attrs.has(type(value)):
        return attrs.asdict(value)
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value


def from_json(data, cls):
    """Build a model value of ``cls`` from JSON-ready data."""
    return _get_converter().structure(data, cls)
