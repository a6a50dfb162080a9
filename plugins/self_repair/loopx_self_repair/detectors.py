"""What self-repair finds: LoopX's damage detectors (through its :func:`session`, a
``loopx.api.RepairSession``: ``check`` and friends, the reading half of the repair API) plus its
own ``repair_needs_user``; none of them writes.

The detectors and what each finding means are LoopX's (``RepairSession.CODES``); self-repair
decides which of them block a goal's turns: only the cheap ones (``RepairSession.cheap``: a
few indexed queries, no ledger replay), because the contract veto runs on every
``quota should-run``, and a repair that waits for a person.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loopx.api import ReadTx, Registry, RepairSession

NAMESPACE = "self_repair"
#: This plugin's repair event kind; older ledgers hold it as ``capability.repaired``.
KIND = "self_repair.repaired"

#: Self-repair's own finding, on top of LoopX's.
OWN_CODES = {
    "repair_needs_user": "a repair kept a gate, claim, approval or evidence the ledger lacked; a person must accept",
}


def session() -> RepairSession:
    """Self-repair's session of LoopX's repair API: every detector and repair goes through it, as
    ``capability:self_repair`` recording ``self_repair.repaired`` events."""
    from loopx.api import RepairSession

    return RepairSession(NAMESPACE, kind=KIND)


def _codes() -> dict[str, str]:
    from loopx.api import RepairSession

    return {**RepairSession.CODES, **OWN_CODES}


def __getattr__(name: str) -> dict[str, str]:
    # CODES resolves lazily: this module is imported by the contract veto before every turn.
    if name == "CODES":
        return _codes()
    raise AttributeError(name)


def needs_user(tx: ReadTx, goal_id: str) -> list[Any]:
    """A repair kept state the ledger did not hold and waits for a person (``self-repair accept``)."""
    from loopx.api import RepairSession, state

    value = state.get(tx, goal_id, NAMESPACE).get("needs_user")
    if value is None:
        return []
    return [RepairSession.Finding("repair_needs_user", goal_id, goal_id, value.get("message") or
                    f"goal {goal_id}: a repair kept state its ledger did not hold; a person must look",
                    None, details=value)]


def veto_findings(tx: ReadTx, goal_id: str) -> list[Any]:
    """What the contract veto looks at: whether a repair waits for a person, and the cheap damage
    detectors, for one goal."""
    return needs_user(tx, goal_id) + session().cheap(tx, goal_id)


def check(reg: Registry, *, goal_id: str | None = None, now: str | None = None) -> dict[str, Any]:
    """Run every detector (on one goal or all) and return ``{"ok", "findings", "checked"}``."""
    return session().check(reg, goal_id=goal_id, now=now, also=needs_user, codes=OWN_CODES)
