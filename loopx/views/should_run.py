"""``quota should-run``: the turn decision, the heart of LoopX.

:func:`should_run` decides, and when the decision is ``run`` it opens a run (charging one turn) in
the same transaction, with the goal locked, so concurrent callers cannot open two runs or
overspend. The arithmetic lives in :mod:`loopx.domain.usage`, the contract document in
:mod:`loopx.views.contract`, budgets and grants in :mod:`loopx.views.quota`.
"""

from __future__ import annotations

from loopx.values import clock
from loopx.values.errors import LoopxError
from loopx.ledger.registry import Registry, check_actor
from loopx.values.clock import add_seconds, seconds_between
from loopx.domain.usage import remaining
from loopx.values.validate import check_id, check_number, check_text, new_id

# What every should-run uses, imported with this module (the CLI imports it with the collector
# paused: loopx.values.lasting) rather than inside the functions.
from loopx.domain import claims, runs
from loopx.seam import capabilities, plugins
from loopx.views import contract, inputs

DEFAULT_AGENT = "agent"


def default_agent() -> str:
    """The agent name to use: ``LOOPX_AGENT``, else ``agent``."""
    import os

    return os.environ.get("LOOPX_AGENT") or DEFAULT_AGENT


def should_run(reg: Registry, actor: str, *, goal_id: str, agent: str | None = None,
               ttl_seconds: float | None = None, dry_run: bool = False, operation_id: str | None = None,
               owner: dict | None = None) -> dict:
    """Decide whether ``agent`` may take a turn on ``goal_id`` now, and issue its contract.

    A ``run`` decision opens a run (one turn charged) unless the agent already holds an open
    run, which it gets back (with a renewed contract when the goal's fingerprint changed).
    Expired open runs are marked abandoned first, and so are open runs whose recorded owner
    process is gone (:mod:`loopx.domain.claims`). ``owner`` (``loopx.domain.claims.owner_here()``): the
    process that will carry out the run it opens, recorded with it. ``dry_run`` previews and
    writes nothing.
    """
    check_id("goal", goal_id)
    check_actor(actor)
    agent = check_text(agent if agent is not None else default_agent(), what="--agent", limit="agent")
    ttl = check_number(runs.DEFAULT_TTL_SECONDS if ttl_seconds is None else ttl_seconds,
                       what="--ttl-seconds", minimum=1, maximum=runs.MAX_TTL_SECONDS)
    if actor == "dashboard" and not dry_run:
        raise LoopxError("actor_forbidden", "the dashboard never writes; use --dry-run")
    run_id, contract_id = new_id("run"), new_id("contract")
    # Plugin hooks run here, before the write transaction begins: never while the lock is held.
    answers = _plugin_answers(reg, goal_id, agent, run_id)
    if dry_run:
        return _preview(reg, goal_id=goal_id, agent=agent, ttl=ttl, run_id=run_id, contract_id=contract_id,
                        answers=answers)

    # Step processes a dead owner left running are stopped before the goal is held (from the open
    # runs the hook phase just read, when it read them: not read a second time).
    seen = answers.inputs
    left = claims.stop_leftovers(reg, goal_id, clock.now(),
                                 known=(seen.revision, seen.open_runs) if seen is not None else None)

    def work(w):
        return _turn(w.tx, w, goal_id=goal_id, agent=agent, ttl=ttl, now=w.at, run_id=run_id,
                     contract_id=contract_id, answers=answers, owner=owner, check_owners=bool(left.dead),
                     leftovers=left)

    # Run and contract entries belong to the core; the caller's actor only asks.
    return reg.mutate("core", work, goal_id=goal_id, allow_closed=True, operation_id=operation_id,
                      request={"op": "quota.should_run", "goal": goal_id, "agent": agent, "ttl": ttl,
                               "by": actor})


def _preview(reg, *, goal_id, agent, ttl, run_id, contract_id, answers) -> dict:
    """``--dry-run``: the real call's own transaction - the same checks (integrity, rollback
    anchor), the same closing of expired and owner-gone runs, the same decision - rolled back at
    the end, so the answer is the one a real call would give and nothing is written.

    Unlike the real call it stops no leftover step process (it only looks for dead owners,
    inside the transaction) and replays no step journal. A registry that refuses writes (opened
    read-only, or read-only file or server) is previewed in a read transaction instead, which
    cannot close expired runs first (a real call could not run there at all).
    """
    from loopx.values.errors import LoopxError

    def work(w):
        return _turn(w.tx, w, goal_id=goal_id, agent=agent, ttl=ttl, now=w.at, run_id=run_id,
                     contract_id=contract_id, answers=answers, check_owners=True)

    try:
        out = reg.mutate("core", work, goal_id=goal_id, allow_closed=True, preview=True)
    except LoopxError as exc:
        if exc.code != "registry_readonly":
            raise
        out = _read_only_preview(reg, goal_id=goal_id, agent=agent, ttl=ttl, run_id=run_id,
                                 contract_id=contract_id, answers=answers)
    return _as_preview(out, run_id, contract_id)


def _read_only_preview(reg, *, goal_id, agent, ttl, run_id, contract_id, answers) -> dict:
    """The preview on a registry that cannot be written: the rollback anchor read beside the
    snapshot the way ``self-repair check`` reads it (:func:`loopx.ledger.integrity.verify_anchor`),
    then the decision in one read transaction."""
    from loopx.ledger import integrity

    behind = integrity.verify_anchor(reg, goal_id)
    with reg.read() as tx:
        return _turn(tx, None, goal_id=goal_id, agent=agent, ttl=ttl, now=clock.now(), run_id=run_id,
                     contract_id=contract_id, answers=answers, rolled_back=behind)


def _as_preview(out: dict, run_id: str, contract_id: str) -> dict:
    """A real call's answer, shown as the preview it is: no run id or contract id a real call
    would not use (an agent's own open run, and the contract it holds, are shown: a real call
    hands them back); the steps keep the run id this preview drew, so what a real call would
    list can be seen."""
    out = dict(out)
    doc = out.get("interaction_contract")
    opened = doc is not None and doc.get("run_id") == run_id
    if doc is not None and doc.get("contract_id") == contract_id:  # opened or renewed by this call
        doc = {**doc, "contract_id": None, **({"run_id": None} if opened else {})}
        out["interaction_contract"] = doc
    out["dry_run"] = True
    out["preview"] = ("dry run: nothing was written and no run was opened; the steps are shown with the run id "
                      f"this preview drew ({run_id}): a real call opens a run of its own and lists them with its id"
                      if opened else "dry run: nothing was written")
    return out


class _Answers:
    """What the plugins said about one should-run, asked for before its transaction, and the
    inputs they saw (reused by the transaction when the goal's revision has not moved since)."""

    __slots__ = ("veto", "run_id", "actions", "inputs", "problems")

    def __init__(self, veto=None, run_id=None, actions=None, inputs=None, problems=None):
        self.veto, self.run_id, self.actions, self.inputs = veto, run_id, actions, inputs
        self.problems = problems or []  # contributions dropped as malformed, named by plugin

    def actions_for(self, run_id: str) -> list:
        # Asked for another run than the one the transaction found (a race with another
        # should-run): offer none rather than call plugins under the lock.
        return list(self.actions or []) if run_id == self.run_id else []


def _plugin_answers(reg, goal_id: str, agent: str, run_id: str) -> _Answers:
    hooks = plugins.hooks()
    veto_on, actions_on = hooks.implemented(hooks.contract_veto), hooks.implemented(hooks.contract_actions)
    if not (veto_on or actions_on):
        return _Answers()
    now = clock.now()
    # Which capabilities serve the goal decides whose hooks are asked; the declarations are hook
    # answers too, read before any transaction (then cached for the process).
    capabilities.load()
    with reg.read() as tx:
        # The goal, its open runs and side rows, and what the hooks read of it, in two statements;
        # the hooks' view serves their reads of those rows (loopx.views.contract.HookTx.known).
        seen = inputs.gather(tx, goal_id, for_hooks=True)
        goal = seen.goal
        if goal.status != "open":
            return _Answers(inputs=seen)
        view = contract.HookTx(tx, seen.for_hooks)
        try:
            vetoed = contract.veto(view, goal) if veto_on else None
            if vetoed or not actions_on:
                return _Answers(vetoed, inputs=seen)
            own = next((r for r in seen.live_runs(now) if r.agent == agent), None)
            for_run = own.id if own else run_id
            used = seen.usage()
            if own is None:  # the turn about to be opened counts
                used = type(used)(turns=used.turns + 1, tokens=used.tokens, cost=used.cost,
                                  wall_seconds=used.wall_seconds)
            problems: list[str] = []
            found = contract.contributions(view, goal, for_run, remaining(goal, used), problems)
        finally:
            view.revoke()
    return _Answers(None, for_run, found, seen, problems)


def _turn(tx, w, *, goal_id, agent, ttl, now, run_id, contract_id, answers, owner=None,
          check_owners=False, leftovers=None, rolled_back=()) -> dict:
    # One read of the goal's inputs per call: the one taken before the transaction when nothing
    # changed since (same revision), else one now (reusing the goal row the writer locked).
    if w is not None and owner is not None and owner.get("lease_token") is not None:
        from loopx.domain.supervision import check_fence

        check_fence(tx, goal_id, owner, now)  # a worker's turn: only under its current lease
    seen = answers.inputs
    if seen is None or w is None or w.goal is None or w.goal["revision"] != seen.revision:
        # The open runs stop_leftovers read just before, when the goal has not moved since.
        known = (leftovers.open_runs_at(w.goal["revision"])
                 if leftovers is not None and w is not None and w.goal is not None else None)
        if known is None and leftovers is not None:
            check_owners = True  # runs moved since stop_leftovers looked: look at their owners here
        seen = inputs.gather(tx, goal_id, goal_row=w.goal if w is not None else None, open_runs=known)
    if seen.goal.status != "closed":
        tampered = _tampered(tx, w, seen, agent=agent, now=now, rolled_back=rolled_back)
        if tampered is not None:
            return tampered
    if w is not None and seen.goal.status != "closed":
        seen = _abandon_dead_runs(tx, w, seen, goal_id=goal_id, now=now, check_owners=check_owners)
    goal = seen.goal
    own = next((r for r in seen.live_runs(now) if r.agent == agent), None)
    d = contract.decide(tx, seen, agent=agent, now=now, own_run=own, vetoed=answers.veto)
    out = {"goal_id": goal_id, "should_run": d.decision == "run", "decision": d.decision, "reasons": d.reasons}
    if d.decision != "run":
        fp = seen.fingerprint(own.id if own else None)
        out["interaction_contract"] = contract.document(tx, d, seen, contract_id=None,
                                                        run_id=own.id if own else None, fingerprint=fp,
                                                        issued_at=now)
        return out
    if own is not None:
        fp = seen.fingerprint(own.id)
        if fp == own.fingerprint:
            out["interaction_contract"] = runs.load_contract(tx, own.contract_id)
            return out
        doc = contract.document(tx, d, seen, contract_id=contract_id, run_id=own.id, fingerprint=fp,
                                issued_at=now, expires_at=own.expires_at, contributed=answers.actions_for(own.id),
                                problems=answers.problems)
        if w is not None:
            w.emit("run.renewed", {"run_id": own.id, "contract": doc})
        out["interaction_contract"] = doc
        return out
    fp = seen.fingerprint()
    # A run cannot outlive the wall-clock budget: an agent that crashes is charged at most
    # what remained when its run was opened. Parallel runs each reserve their lease out of what
    # remains, so together they never exceed the budget.
    left = remaining(goal, seen.usage())["wall_seconds"]
    if left is not None:
        # An open run will be charged from its opening up to its expiry at most: all of that is
        # spoken for (usage counts closed runs only).
        live = seen.live_runs(now)
        reserved = sum(max(0.0, seconds_between(r.opened_at, r.expires_at)) for r in live)
        left = round(left - reserved, 3)
        if left <= 0:
            soonest = min(r.expires_at for r in live)
            d = contract.Decision("wait", ["wall_budget_reserved"], goal=goal, agent=agent,
                                  next_eligible_at=soonest, other_run=live[0])
            out.update(should_run=False, decision="wait", reasons=d.reasons)
            out["interaction_contract"] = contract.document(tx, d, seen, contract_id=None, run_id=None,
                                                            fingerprint=fp, issued_at=now)
            return out
    expires = add_seconds(now, ttl if left is None else min(ttl, left))
    doc = contract.document(tx, d, seen, contract_id=contract_id, run_id=run_id, fingerprint=fp, issued_at=now,
                            expires_at=expires, opening=True, contributed=answers.actions_for(run_id),
                            problems=answers.problems)
    if w is not None:
        w.emit("run.opened", {"run_id": run_id, "agent": agent, "expires_at": expires, "contract": doc})
        if owner is not None:
            claims.emit_owner(w, run_id, owner)
    out["interaction_contract"] = doc
    return out


def _abandon_dead_runs(tx, w, seen, *, goal_id, now, check_owners):
    """Mark abandoned the goal's open runs past their expiry (and, with ``check_owners``, those
    whose owning process is gone); the goal's inputs read again if any was."""
    expired = seen.expired_runs(now)
    for stale in expired:
        if claims_started(tx, stale.id):  # a step was running: "ran, result unknown" (loopx.domain.claims)
            from loopx.domain.claims import emit_abandoned

            emit_abandoned(w, stale, reason="lease_expired")
        else:
            w.emit("run.abandoned", {"run_id": stale.id, "agent": stale.agent})
    if expired:
        seen = inputs.gather(tx, goal_id)
    if check_owners:
        dead = claims.dead_runs(tx, seen.live_runs(now))
        for run in dead:
            claims.emit_abandoned(w, run, reason="owner_gone")
        if dead:
            seen = inputs.gather(tx, goal_id)
    return seen


def claims_started(tx, run_id: str) -> bool:
    """Whether a step of ``run_id`` recorded its start and no result (see :mod:`loopx.domain.claims`)."""
    from loopx.domain.claims import unfinished_steps

    return bool(unfinished_steps(tx, run_id))


def _tampered(tx, w, seen, *, agent, now, rolled_back=()) -> dict | None:
    """``repair`` (writing nothing) when the goal's ledger or state fails its integrity check.

    The mutation already verified the goal before this turn (``w.integrity_problems``); a
    preview on a registry that cannot be written checks here (``rolled_back``: what the anchor
    check it made before its snapshot found). See :mod:`loopx.ledger.integrity`.
    """
    from loopx.ledger import integrity

    goal = seen.goal
    problems = w.integrity_problems if w is not None else [*rolled_back, *integrity.verify_head(tx, goal.id)]
    if not problems:
        # The rows this decision reads, each against its MAC (one statement; see loopx/ledger/state_macs.py).
        gated = sum(1 for g in seen.gates if g.status in ("pending", "rejected") and g.blocks.startswith("todo:"))
        problems = integrity.verify_turn_rows(tx, goal.id, agent=agent, now=now, limit=contract.READY_SHOWN + gated)
    if not problems:
        return None
    import shlex

    from loopx.domain import repairs

    codes = sorted({p.code for p in problems})
    # A registry replaced by an older copy says so: a rebuild cannot bring back what the copy
    # lacks (restore the newest copy, or the user accepts it with `loopx registry reanchor`).
    # (Only when that is all that is wrong: events removed at the head are a mismatch first.)
    reason = "registry_rolled_back" if codes == ["registry_rolled_back"] else "integrity_mismatch"
    # The command comes from the repair capability that offers one (its declared repair_argv);
    # with none installed the contract still says repair and names no command.
    argvs = repairs.advice(goal.id)
    veto = {"reason": reason, "findings": codes,
            "message": "; ".join(p.message for p in problems[:3]) + (
                ": run the repair, which never drops a gate, claim or evidence" if argvs else
                ": no repair capability is installed; restore a backup or install one"),
            "actions": [shlex.join(a) for a in argvs],
            # The contract's steps are built from argv lists only (see loopx.values.steps).
            "argvs": argvs}
    d = contract.Decision("repair", [reason], goal=goal, agent=agent, veto=veto)
    out = {"goal_id": goal.id, "should_run": False, "decision": "repair", "reasons": d.reasons}
    out["interaction_contract"] = contract.document(tx, d, seen, contract_id=None, run_id=None,
                                                    fingerprint=seen.fingerprint(), issued_at=now)
    return out


__all__ = ["should_run", "default_agent", "DEFAULT_AGENT"]
