"""Every event kind of the core in one explicit table: its name, its apply function and the actor
roles that may cause it (docs/state-interaction-model.md lists the same).

An area's apply functions are imported when one of its kinds is first used (``quota
should-run`` touches a few areas only), through the loader listed for it in :data:`AREAS`;
the imports are plain ones, so import-linter sees them. A plugin's kinds are not here: they
come through ``loopx_register_event_kinds`` (:func:`loopx.ledger.events.applying.plugin_kind`).
"""

from __future__ import annotations

from typing import Callable

from loopx.ledger.events.roles import CAPABILITY, CORE, EXECUTOR, USER


class EventKind:
    """What one kind of event does, and which actor roles may cause it.

    A plain class rather than attrs: every command loads the ledger, and building an attrs
    class at import costs about half a millisecond.
    """

    __slots__ = ("name", "apply", "writers", "guard", "replays")

    def __init__(self, name: str, apply: Callable, writers: frozenset, guard: Callable | None = None):
        self.name = name
        self.apply = apply
        self.writers = writers
        #: Optional ``guard(writer, body)`` run by ``Writer.emit`` before the event is written
        #: (never on replay): it refuses with a LoopxError, e.g. capability state outside owned
        #: namespaces.
        self.guard = guard
        #: Whether ``apply`` replays other events (a rebuild repair): it is then called as
        #: ``apply(tx, event, replay)`` with the ledger's own apply, so that no apply function
        #: imports the dispatcher (:mod:`loopx.ledger.events.applying`) that imports it.
        self.replays = getattr(apply, "replays", False)

    def __repr__(self):
        return f"EventKind({self.name!r}, writers={sorted(self.writers)})"


def _kinds(*rows: tuple) -> dict[str, EventKind]:
    # A row: (name, apply, writer roles) or (name, apply, writer roles, guard).
    return {row[0]: EventKind(row[0], row[1], frozenset(row[2]), *row[3:]) for row in rows}


def _goal() -> dict[str, EventKind]:
    from loopx.ledger.events import goal

    return _kinds(
        ("goal.created", goal.created, {USER}),
        ("goal.workspace_set", goal.workspace_set, {USER, CORE}),
        ("goal.workspace_applied", goal.workspace_applied, {USER}),
        ("goal.workspace_discarded", goal.workspace_discarded, {USER}),
        ("goal.capabilities_set", goal.capabilities_set, {USER, CORE}),
        ("goal.paused", goal.paused, {USER}),
        ("goal.resumed", goal.resumed, {USER}),
        ("goal.retried", goal.retried, {USER}),
        ("goal.closed", goal.closed, {USER, CAPABILITY}),
        ("goal.criterion_met", goal.criterion_met, {USER, CAPABILITY}),
    )


def _gate() -> dict[str, EventKind]:
    from loopx.ledger.events import gate

    return _kinds(
        ("gate.added", gate.added, {USER, EXECUTOR}),
        ("gate.approved", gate.approved, {USER}),
        ("gate.rejected", gate.rejected, {USER}),
        ("gate.reopened", gate.reopened, {USER}),
    )


def _todo() -> dict[str, EventKind]:
    from loopx.ledger.events import todo

    return _kinds(
        ("todo.added", todo.added, {USER, EXECUTOR}),
        ("todo.depends", todo.depends, {USER, EXECUTOR}),
        ("todo.claimed", todo.claimed, {USER, EXECUTOR}),
        ("todo.done", todo.done, {USER, EXECUTOR}),
        ("todo.blocked", todo.blocked, {USER, EXECUTOR}),
        ("todo.reopened", todo.reopened, {USER, EXECUTOR}),
    )


def _action() -> dict[str, EventKind]:
    from loopx.ledger.events import action

    return _kinds(
        ("action.added", action.added, {USER}),
        ("action.removed", action.removed, {USER}),
    )


def _quota() -> dict[str, EventKind]:
    from loopx.ledger.events import quota

    return _kinds(
        ("quota.set", quota.set_limits, {USER}),
        ("quota.granted", quota.granted, {USER}),
    )


def _run() -> dict[str, EventKind]:
    from loopx.ledger.events import run

    return _kinds(
        ("run.opened", run.opened, {CORE}),
        ("run.renewed", run.renewed, {CORE}),
        ("run.finished", run.finished, {CORE}),
        ("run.abandoned", run.abandoned, {CORE, CAPABILITY}, run.check_only_expired),
    )


def _evidence() -> dict[str, EventKind]:
    from loopx.ledger.events import evidence

    return _kinds(
        ("evidence.added", evidence.added, {USER, EXECUTOR, CAPABILITY, CORE}, evidence.check_bounded),
    )


def _reward() -> dict[str, EventKind]:
    from loopx.ledger.events import reward

    return _kinds(
        ("reward.added", reward.added, {USER}),
    )


def _capability() -> dict[str, EventKind]:
    from loopx.ledger.events import capability

    return _kinds(
        ("capability.state_set", capability.state_set, {CAPABILITY}, capability.check_owned_bounded),
        ("capability.state_deleted", capability.state_deleted, {CAPABILITY}, capability.check_owned),
        # Written by nobody any more (older registries hold it): replayed by the repair API.
        ("capability.repaired", capability.repaired, set()),
        ("capability.loss_recorded", capability.loss_recorded, {CAPABILITY}, capability.check_declared_repairs),
    )


#: The core's areas (the part of a kind's name before the dot), each with the loader of its kinds.
AREAS: dict[str, Callable[[], dict[str, EventKind]]] = {
    "goal": _goal,
    "gate": _gate,
    "todo": _todo,
    "action": _action,
    "quota": _quota,
    "run": _run,
    "evidence": _evidence,
    "reward": _reward,
    "capability": _capability,
}


def all_kinds() -> dict[str, EventKind]:
    """Every core event kind by name (loads every area)."""
    found: dict[str, EventKind] = {}
    for load in AREAS.values():
        found.update(load())
    return found
