"""The ``self_repair`` plugin: its capability declaration, its commands and its contract veto.

This module is imported on every ``loopx`` start-up (``quota should-run`` included), so it
imports nothing heavy: detectors, repairs and the CLI load inside the hooks that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopx.api import hookimpl

from loopx_self_repair import __version__

if TYPE_CHECKING:
    import click

    from loopx.api import ReadTx, Veto, goals, registrars

#: Why self-repair serves every goal (docs/capabilities/self_repair.md repeats it).
WHY_DEFAULT_ON = ("its veto stops a turn on state that disagrees with the ledger, and damage can reach any goal, "
                  "so a goal that never enabled it must not be driven on broken state")
REPAIRS = ("state_rebuilt", "lease_released", "dependency_dropped", "gate_widened", "evidence_unbound",
           "data_escaped")


@hookimpl
def loopx_register_capabilities(register: registrars.Capabilities) -> None:
    """Declare the ``self_repair`` capability (see docs/capabilities/self_repair.md)."""
    from loopx.api import Capability

    register(Capability(
        name="self_repair",
        version=__version__,
        summary="Detects state that disagrees with the ledger or points at nothing, and repairs it.",
        owns=["self_repair"],
        reads=["ledger", "goals", "todos", "gates", "runs", "evidence", "quota", "storage"],
        quota={"turns": 0, "tokens": 0, "wall_seconds": 0},
        commands=["self-repair"],
        user_commands=["self-repair accept"],  # confirming what a repair kept is a user's judgement
        actions=["fix"],
        repairs=REPAIRS,
        # What a contract names when LoopX's own integrity check answers repair.
        repair_argv=["loopx", "self-repair", "fix", "--goal-id", "{goal_id}"],
        doc="docs/capabilities/self_repair.md",
        # Every goal, enabled or not: damage to state is found where nobody thought to look.
        default_on=True,
        why=WHY_DEFAULT_ON,
    ))


@hookimpl
def loopx_register_event_kinds(register: registrars.EventKinds) -> None:
    """``self_repair.repaired``: one repair of a goal's current state, recorded in its ledger
    (applied and guarded by LoopX's repair API: ``RepairSession.apply_event``, ``guard_event``,
    which is what lets LoopX replay these events itself when this plugin is not installed).

    Older registries hold ``capability.repaired``, its name when LoopX's core defined it: the core
    replays those itself.
    """
    from loopx.api import RepairSession

    register("self_repair.repaired", RepairSession.apply_event, writers=("capability",),
             guard=RepairSession.guard_event)


@hookimpl
def loopx_register_commands(cli: click.Group) -> None:
    """Add ``loopx self-repair check|fix|skill``."""
    from loopx_self_repair.cli import self_repair

    cli.add_command(self_repair, "self-repair")


@hookimpl
def loopx_contract_veto(tx: ReadTx, goal: goals.Goal) -> Veto | dict[str, Any] | None:
    """Turn a goal's contract into ``repair`` while a cheap detector finds damage.

    Runs on every ``quota should-run``, so only the cheap detectors run here (a few indexed
    queries over the goal's own rows; no ledger replay): see ``detectors.veto_findings``.
    """
    from loopx_self_repair import detectors

    found = detectors.veto_findings(tx, goal.id)
    if not found:
        return None
    from loopx_self_repair import repairs  # the commands it names; only when there is damage

    codes = sorted({f.code for f in found})
    if codes == ["repair_needs_user"]:
        # A repair kept human control the ledger lacked: only a person can say what is true
        # (the veto's documented "decision": "ask_user", docs/plugins.md).
        return {
            "decision": "ask_user",
            "reason": "repair_needs_user",
            "message": found[0].message,
            "findings": codes,
            "actions": [],
            "user_actions": [repairs.accept_command(goal.id)],
        }
    return {
        "reason": "needs_repair",
        "message": "; ".join(f.message for f in found[:3]) + (f" (+{len(found) - 3} more)" if len(found) > 3 else ""),
        "findings": codes,
        "actions": [repairs.fix_command(goal.id)],
    }
