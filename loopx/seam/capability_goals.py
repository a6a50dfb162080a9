"""Which goals a capability serves: the goals that enable it, or every goal for a default-on one.

A goal lists the capabilities it uses (``goals.capabilities``, set by a user at creation or with
``loopx project-prompt capabilities``). For any other goal the core does not call the hooks of a
plugin whose capabilities all stay out of it: contract actions, vetoes and
``loopx_event_committed`` observers (:func:`skipped_plugins`, passed to
:class:`loopx.seam.hooks.Hooks` as ``skip``). A plugin that declares no capability is a plain plugin and
is never skipped. A capability declared ``default_on=True`` (with a ``why`` its document repeats)
serves every goal. Nothing here reads the registry: the list comes from the goal row the caller
already holds.
"""

from __future__ import annotations

import json

from loopx.seam.capabilities import check_name, get, load
from loopx.values.errors import LoopxError


def check_enabling(names) -> list[str]:
    """``names`` sorted and deduplicated, if a goal may enable each; raises otherwise.

    A name must be a capability an installed plugin declares (``capability_not_found``); one on
    for every goal needs no enabling (``invalid_argument``).
    """
    out = set()
    for name in names:
        cap = get(check_name(name))
        if cap.default_on:
            raise LoopxError("invalid_argument",
                             f"capability {name!r} is on for every goal ({cap.why.strip()}); it needs no enabling")
        out.add(name)
    return sorted(out)


def enabled(goal) -> set[str]:
    """The capabilities serving ``goal``: those it lists and those on for every goal."""
    return set(goal.capabilities) | {cap.name for cap in load().values() if cap.default_on}


def skipped_plugins(goal) -> frozenset:
    """The plugins whose goal hooks are not called for ``goal``: each declares capabilities, and
    none of them serves the goal. Plugins that declare none (plain plugins) are never skipped."""
    return _skipped(goal.capabilities)


def skipped_for_events(goal_row: dict | None, events) -> frozenset:
    """:func:`skipped_plugins` for the goal one mutation wrote ``events`` to, by its capability
    list after them: the locked ``goal_row``'s (``None`` when the mutation created the goal), or
    the last list an event of the batch set (``goal.created``, ``goal.capabilities_set``).
    Reads nothing: the row was locked by the mutation."""
    names = json.loads(goal_row["capabilities"]) if goal_row and goal_row.get("capabilities") else []
    for event in events:
        if event.kind in ("goal.created", "goal.capabilities_set"):
            names = event.body.get("capabilities") or []
    return _skipped(names)


def _skipped(names) -> frozenset:
    serving = set(names) | {cap.name for cap in load().values() if cap.default_on}
    declared: dict[str, bool] = {}
    for cap in load().values():
        declared[cap.plugin] = declared.get(cap.plugin, False) or cap.name in serving
    return frozenset(plugin for plugin, serves in declared.items() if not serves)


def serving_only(contributions, goal) -> list:
    """Drop contributed actions naming a capability that does not serve ``goal`` (a plugin
    declaring two capabilities is asked for a goal enabling either; only that one's actions stay).
    Actions naming no capability pass through."""
    contributions = list(contributions)
    if not any(isinstance(c, dict) and c.get("capability") for c in contributions):
        return contributions
    serving = enabled(goal)
    return [c for c in contributions if not (isinstance(c, dict) and c.get("capability"))
            or c["capability"] in serving]
