"""What self-repair finds: LoopX's damage detectors (``loopx.api.find_damage`` and friends, the
reading half of the repair API) plus its own ``repair_needs_user``; none of them writes.

The detectors and what each finding means are LoopX's (``loopx.api.DAMAGE_CODES``); self-repair
decides which of them block a goal's turns: only the cheap ones (``loopx.api.cheap_damage``: a
few indexed queries, no ledger replay), because the contract veto runs on every
``quota should-run``, and a repair that waits for a person.
"""

from __future__ import annotations

NAMESPACE = "self_repair"

#: Self-repair's own finding, on top of LoopX's.
OWN_CODES = {
    "repair_needs_user": "a repair kept a gate, claim, approval or evidence the ledger lacked; a person must accept",
}


def _codes() -> dict:
    from loopx.api import DAMAGE_CODES

    return {**DAMAGE_CODES, **OWN_CODES}


def __getattr__(name):
    # CODES resolves lazily: this module is imported by the contract veto before every turn.
    if name == "CODES":
        return _codes()
    raise AttributeError(name)


def needs_user(tx, goal_id: str) -> list:
    """A repair kept state the ledger did not hold and waits for a person (``self-repair accept``)."""
    from loopx.api import Finding, get_state

    value = get_state(tx, goal_id, NAMESPACE).get("needs_user")
    if value is None:
        return []
    return [Finding("repair_needs_user", goal_id, goal_id, value.get("message") or
                    f"goal {goal_id}: a repair kept state its ledger did not hold; a person must look",
                    None, details=value)]


def veto_findings(tx, goal_id: str) -> list:
    """What the contract veto looks at: whether a repair waits for a person, and the cheap damage
    detectors, for one goal."""
    from loopx.api import cheap_damage

    return needs_user(tx, goal_id) + cheap_damage(tx, goal_id)


def check(reg, *, goal_id: str | None = None, now: str | None = None) -> dict:
    """Run every detector (on one goal or all) and return ``{"ok", "findings", "checked"}``."""
    from loopx.api import find_damage

    return find_damage(reg, goal_id=goal_id, now=now, also=needs_user, codes=OWN_CODES)
