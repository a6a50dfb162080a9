""""Needs you": whether a goal is waiting for a person now, why, and the exact command to type.

The answer is the goal's current decision (:func:`loopx.views.contract.decide`, the same rules a real
should-run applies, read-only and without plugin hooks) and, when it needs a person, the
contract's own ``user_channel.next_user_actions`` - the commands are never written twice.

A goal needs a person when its decision is ``ask_user`` (a gate pending or rejected, a budget
used up, the same step failing run after run, nothing left to do), or ``repair``, or when its
newest run was abandoned because the process that owned it died (``worker_died``: the work is
not going on; start a worker again). ``loopx status``, the dashboard and the ``loopx_notify``
hook (:mod:`loopx.views.notify`) all use :func:`needs`.
"""

from __future__ import annotations

import shlex

from loopx.store.queries.attention import holds_a_claim, newest_run

PERSON_DECISIONS = ("ask_user", "repair")


def needs(tx, goal_id: str, now: str) -> dict | None:
    """``{"decision", "reason", "reasons", "message", "commands", "decisions"}`` when ``goal_id`` waits
    for a person, else ``None``. At a gate the decision comes first: ``commands`` starts with the
    approve and reject commands, and ``decisions`` says what approving each pending gate does."""
    from loopx.views import contract, inputs

    seen = inputs.gather(tx, goal_id)
    if seen.goal.status != "open":
        return None
    d = contract.decide(tx, seen, agent="user", now=now, own_run=None)
    if d.reasons[:1] == ["no_ready_work"] and holds_a_claim(tx, goal_id, now):
        # An agent holds a todo's claim (the one readiness definition: a live lease under a run
        # still open): work is going on, nobody needs to add any. A claim its failed or finished
        # run left behind holds nothing.
        d = None
    if d is not None and d.decision in PERSON_DECISIONS:
        doc = contract.document(tx, d, seen, contract_id=None, run_id=None, fingerprint="", issued_at=now)
        reason = _reason(d.reasons)
        return {"decision": d.decision, "reason": reason, "reasons": list(d.reasons),
                "message": doc["agent_channel"]["primary_action"],
                "commands": list(doc["user_channel"]["next_user_actions"]),
                "decisions": list(doc["user_channel"].get("decisions") or [])}
    if d is None:
        return None
    pending = [g for g in seen.gates if g.status == "pending"]
    if pending:  # a gate in front of one action or todo: the goal runs, but someone must decide it
        from loopx.domain.gates import approving, decision_commands

        gate = pending[0]
        names = {a.name: a for a in seen.actions}
        decisions = [{"gate_id": g.id, "title": g.title[:160], "scope": g.scope, "approve": decision_commands(g)[0],
                      "reject": decision_commands(g)[1], "approving": approving(g, actions=names)} for g in pending]
        return {"decision": d.decision, "reason": "gate_pending", "reasons": ["gate_pending"],
                "message": f"gate {gate.id} ({gate.title[:80]}) waits for a decision; it holds back {gate.blocks}",
                "commands": [c for g in pending for c in decision_commands(g)], "decisions": decisions}
    died = _owner_died(tx, goal_id)
    if died is not None:
        return {"decision": d.decision, "reason": "worker_died", "reasons": ["worker_died"],
                "message": f"run {died} was abandoned: the process that took its turn died (its step's result is "
                           "unknown). Start a worker again; the next turn picks the work up.",
                "commands": [f"loopx run show --run-id {shlex.quote(died)}",
                             "systemctl --user restart loopx-worker  # or: loopx worker"]}
    return None


def _reason(reasons: list[str]) -> str:
    """The reason a person reads first: the budget-specific code reads better than the umbrella one."""
    if reasons and reasons[0] == "quota_exhausted":
        return "budget_exhausted"
    return reasons[0] if reasons else "ask_user"


def _owner_died(tx, goal_id: str) -> str | None:
    # The newest run was abandoned: its owner died (loopx.domain.claims) or its lease ran out unreported.
    row = newest_run(tx, goal_id)
    return row["id"] if row is not None and row["status"] == "abandoned" else None


def many(tx, goal_ids: list[str], now: str) -> dict[str, dict]:
    """``{goal id: needs}`` for the goals among ``goal_ids`` that wait for a person."""
    out = {}
    for goal_id in goal_ids:
        found = needs(tx, goal_id, now)
        if found is not None:
            out[goal_id] = found
    return out


def current(tx, goal_id: str, now: str) -> dict | None:
    """The goal's decision *now* (what a should-run dry run would answer, without plugin hooks):
    ``{"decision", "reasons", "primary_action", "next_user_actions", "next_eligible_at"}``; the goal
    page shows it beside the last run's contract."""
    from loopx.views import contract, inputs

    seen = inputs.gather(tx, goal_id)
    d = contract.decide(tx, seen, agent="user", now=now, own_run=None)
    doc = contract.document(tx, d, seen, contract_id=None, run_id=None, fingerprint="", issued_at=now)
    return {"decision": d.decision, "reasons": list(d.reasons), "primary_action": doc["agent_channel"]["primary_action"],
            "next_user_actions": list(doc["user_channel"]["next_user_actions"]),
            "next_eligible_at": doc.get("next_eligible_at")}
