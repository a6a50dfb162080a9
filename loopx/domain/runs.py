"""Runs: one agent turn each, opened by ``quota should-run`` and closed by ``run finish``.

Two kinds of command act under a run. *Doing* commands (``exec``, ``todo claim``...) need the
run open, unexpired, and its contract fresh (:func:`check_fresh`). *Recording* commands
(``evidence add``, ``run finish``) need only a run that has not been finished: what happened is
always recorded, even after the contract went stale or the run's lease ran out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopx.values import clock
from loopx.values.errors import LoopxError
from loopx.model import RUN_OUTCOMES, to_json
from loopx.ledger.registry import Registry, check_actor
from loopx.store.queries import runs as q
from loopx.values.validate import check_id, check_number, check_text, new_id

if TYPE_CHECKING:
    from loopx.model import Run

DEFAULT_TTL_SECONDS = 3600
MAX_TTL_SECONDS = 7 * 24 * 3600
MAX_TOKENS = 10**12
MAX_COST = 10**9


def run_from_row(row: dict) -> Run:
    """A :class:`loopx.model.Run` from a ``runs`` row."""
    from loopx.model.run import Run  # (a module, not the package: no package import machinery per row)

    return Run(
        id=row["id"],
        goal_id=row["goal_id"],
        agent=row["agent"],
        status=row["status"],
        contract_id=row["contract_id"],
        fingerprint=row["fingerprint"],
        opened_at=row["opened_at"],
        expires_at=row["expires_at"],
        finished_at=row["finished_at"],
        outcome=row["outcome"],
        tokens=int(row["tokens"]),
        cost=float(row["cost"]),
        handoff=row["handoff"],
    )


def load_run(tx, run_id: str) -> Run:
    """The run ``run_id`` (``run_not_found`` if there is none)."""
    row = q.run_row(tx, check_id("run", run_id))
    if row is None:
        raise LoopxError("run_not_found", f"no run {run_id}")
    return run_from_row(row)


def state(run, now: str) -> str:
    """``open``, ``finished`` or ``abandoned``; an open run past its expiry counts as abandoned."""
    if run.status == "open" and run.expires_at <= now:
        return "abandoned"
    return run.status


def _of_goal(run, goal_id: str | None):
    if goal_id is not None and run.goal_id != goal_id:
        raise LoopxError("run_not_found", f"run {run.id} belongs to goal {run.goal_id}, not {goal_id}")
    return run


def check_fresh(tx, run_id: str, *, goal_id: str | None = None, now: str | None = None,
                goal_row: dict | None = None) -> Run:
    """The run, if a *doing* command may act under it now.

    ``run_not_open`` when it is finished, abandoned or past its expiry; ``contract_stale`` when
    the goal's fingerprint (gates, lifecycle, limits, actions, exhausted budgets) is no longer
    the one its contract was issued under. Ask ``quota should-run`` again for a fresh contract.
    ``goal_row``: the goal's row as this transaction holds it (a writer's locked goal, before it
    wrote anything), instead of reading it again.
    """
    from loopx.domain.goals import goal_from_row, load_goal
    from loopx.domain.usage import fingerprint

    run = _of_goal(load_run(tx, run_id), goal_id)
    status = state(run, now or clock.now())
    if status != "open":
        detail = "expired at " + run.expires_at if run.status == "open" else status
        raise LoopxError("run_not_open", f"run {run_id} is {detail}; ask `loopx quota should-run` for a new turn")
    goal = (goal_from_row(goal_row) if goal_row is not None and goal_row["id"] == run.goal_id
            else load_goal(tx, run.goal_id))
    current = fingerprint(tx, goal, exclude_run=run.id)
    if current != run.fingerprint:
        raise LoopxError(
            "contract_stale",
            f"the contract of run {run_id} is stale (the goal's gates, lifecycle, limits or actions changed); "
            f"run `loopx quota should-run --goal-id {run.goal_id} --agent {run.agent}` for a fresh one",
        )
    return run


def check_owner(run, agent: str | None):
    """Refuse (``run_not_yours``) a caller that names an agent other than the one that opened ``run``."""
    if agent is not None and agent != run.agent:
        raise LoopxError("run_not_yours", f"run {run.id} belongs to agent {run.agent}, not {agent}")
    return run


def check_recordable(tx, run_id: str, *, goal_id: str | None = None, run: Run | None = None) -> Run:
    """The run, if what happened under it may still be recorded (it is not finished). ``run``:
    the row as this transaction already read it (nothing written since), instead of reading it again."""
    run = _of_goal(run if run is not None and run.id == run_id else load_run(tx, run_id), goal_id)
    if run.status == "finished":
        raise LoopxError("run_not_open", f"run {run_id} was finished at {run.finished_at}")
    return run


def recent(tx, goal_id: str, runs: int, rewards: int = 3) -> dict:
    """One statement for what a turn decision and its contract read of the goal's past: its newest
    ``runs`` closed runs (``id, outcome, contract_id, opened_at``, newest first), its latest
    hand-off note (``handoff``: the text or None) and its latest ``rewards`` rewards
    (``{run_id, score, comment, at}``, newest first) - each an index range, whatever the history."""
    rows = q.recent_history(tx, goal_id, runs, rewards)
    newest = sorted((r for r in rows if r["part"] == "run"), key=lambda r: (r["at"], r["id"]), reverse=True)
    given = sorted((r for r in rows if r["part"] == "reward"), key=lambda r: (r["at"], r["rid"]), reverse=True)
    note = next((r["note"] for r in rows if r["part"] == "handoff"), None)
    return {"runs": [{"id": r["id"], "outcome": r["outcome"], "contract_id": r["contract_id"], "opened_at": r["at"]}
                     for r in newest],
            "handoff": note,
            "feedback": [{"run_id": r["id"], "score": float(r["score"]), "comment": r["note"], "at": r["at"]}
                         for r in given]}


def latest_handoff(tx, goal_id: str):
    """The :class:`loopx.model.Handoff` of the goal's most recently finished run that left one, or ``None``."""
    row = q.latest_handoff_row(tx, goal_id)
    if row is None:
        return None
    from loopx.model import Handoff

    return Handoff(run_id=row["id"], note=row["handoff"], at=row["finished_at"])


def latest_handoff_note(tx, goal_id: str) -> str | None:
    """Just the text of :func:`latest_handoff` (what a contract carries)."""
    row = q.latest_handoff_row(tx, goal_id)
    return None if row is None else row["handoff"]


def open_runs(tx, goal_id: str, now: str) -> list:
    """The goal's runs that are open and unexpired at ``now``, oldest first."""
    return [run_from_row(r) for r in q.live_runs(tx, goal_id, now)]


def expired_runs(tx, goal_id: str, now: str) -> list:
    """The goal's runs still marked open whose expiry has passed (to be marked abandoned)."""
    return [run_from_row(r) for r in q.expired_open_runs(tx, goal_id, now)]


def load_contract(tx, contract_id: str) -> dict:
    """The document of an issued contract."""
    import json

    row = q.contract_document(tx, contract_id)
    if row is None:
        raise LoopxError("not_found", f"no contract {contract_id}")
    return json.loads(row["document"])


def results(tx, run_id: str, doc: dict | None) -> list[dict]:
    """Each ``do`` step of the run's contract ``doc`` with its latest result
    (:func:`loopx.values.steps.results_from`)."""
    from loopx.values import steps

    return _results(tx, run_id, [s for s in steps.of(doc) if s.get("kind") == "do"])


def _results(tx, run_id: str, do: list[dict]) -> list[dict]:
    if not do:
        return []
    from loopx.values import steps

    return steps.results_from(q.step_evidence(tx, run_id), do)


def run_results(tx, run) -> list[dict]:
    """:func:`results` for a run row (its current contract; ``not_found`` if it has none)."""
    from loopx.values import steps

    row = q.contract_document(tx, run.contract_id)
    if row is None:
        raise LoopxError("not_found", f"no contract {run.contract_id}")
    return _results(tx, run.id, steps.do_steps_of(row["document"]))


def refusals(tx, run_id: str) -> list[str]:
    """What the broker refused during the run, one line each (:func:`loopx.values.steps.refusal_lines`)."""
    from loopx.values import steps

    return steps.refusal_lines(q.refused_evidence(tx, run_id))


def repeated_failure(tx, goal, history: dict | None = None) -> dict | None:
    """``{"step", "runs", "run_id", "exit_code", "output_tail"}`` when one step failed in the
    goal's last N runs in a row (N: the goal's ``stuck_after``, default 3; 0 turns it off).

    Cheap when nothing is wrong: one indexed query over the last N runs, and the evidence is
    read only when all of them failed. Runs opened before a user's ``project_prompt retry``
    do not count. ``history``: :func:`recent` read with ``stuck_after`` runs, when the
    caller has it.
    """
    from loopx.values.steps import TAIL_SHOWN, first_failure, stuck_after

    n = stuck_after(goal)
    if n <= 0:
        return None
    if history is not None and len(history["runs"]) <= n:  # (loopx.domain.runs.recent, read with at most n runs)
        rows = history["runs"]
    else:
        rows = q.closed_runs(tx, goal.id, n)
    if len(rows) < n or any(r["outcome"] != "failed" for r in rows):
        return None
    retried = q.latest_retry(tx, goal.id)
    if retried and retried["at"] and rows[-1]["opened_at"] <= retried["at"]:
        return None
    failures = []
    for r in rows:
        found = first_failure(results(tx, r["id"], load_contract(tx, r["contract_id"])))
        if found is None or (failures and found["step"] != failures[0]["step"]):
            return None
        failures.append(found)
    latest = failures[0]
    tail = latest.get("output_tail") or ""
    return {"step": latest["step"], "runs": n, "run_id": rows[0]["id"], "exit_code": latest["exit_code"],
            "output_tail": tail[-TAIL_SHOWN:]}


#: Why a run failed when the agent tried a command LoopX refused (a user-only one, a path it may not use).
REFUSED_COMMAND = "refused_command"


def _judge(w, run, actor: str, outcome: str | None, handoff: str | None,
           force_outcome: str | None) -> tuple[str, str | None, str, list[str]]:
    """``(outcome, hand-off, what the evidence supports, refused commands)`` for finishing ``run``
    (see :func:`finish`); a forced ``ok`` is recorded as evidence on ``w`` first."""
    from loopx.values import steps

    run_id = run.id
    res = run_results(w.tx, run)
    refused = refusals(w.tx, run_id)
    # A turn in which the agent tried a command LoopX refused (a user-only one such as
    # `gate approve`) failed, whatever the agent's exit status said.
    supported = "failed" if refused else steps.derive(res)
    final, note = outcome or supported, handoff
    if refused and final == "partial":
        final = "failed"
    if final == "ok" and supported == "failed":
        why = "; ".join([*(steps.describe(r) for r in res if r["status"] != "ok"), *refused])
        if force_outcome is None:
            raise LoopxError("outcome_contradicts_evidence",
                             f"run {run_id} cannot finish ok: {why}. Finish it without --outcome (its evidence "
                             "says failed), or add --force-outcome REASON to record ok anyway")
        w.emit("evidence.added", {"evidence_id": new_id("evidence"), "run_id": run_id, "kind": "outcome_forced",
                                  "summary": f"outcome ok forced by {actor} over: {why}"[:500],
                                  "data": {"reason": force_outcome, "by": actor, "evidence_outcome": supported}})
    if note is None and supported == "failed":
        open_todos = [r["id"] for r in q.todos_claimed_by_run(w.tx, run_id)]
        note = steps.handoff_for(res, open_todos)
    if refused and final == "failed":
        text = f"{REFUSED_COMMAND}: " + "; ".join(refused)
        note = text if not note else f"{text}; {note}"
        note = note[:2000]
    return final, note, supported, refused


def finish(reg: Registry, actor: str, *, run_id: str, outcome: str | None = None, tokens: int = 0,
           cost: float = 0.0, handoff: str | None = None, agent: str | None = None,
           force_outcome: str | None = None, operation_id: str | None = None) -> dict:
    """Close a run with its outcome, the tokens and cost it used, and a hand-off note.

    Without ``outcome`` the outcome is what the run's own evidence supports
    (:func:`loopx.values.steps.derive`): ``failed`` when a ``do`` step failed or never ran, else ``ok``;
    a failed run without a hand-off gets one saying which step failed and which todo stays
    open. A run in which the broker refused a command the agent tried (evidence of kind
    ``refused``) is ``failed``, reason ``refused_command``, its hand-off starting with what was
    refused. ``outcome="ok"`` against failed evidence is refused (``outcome_contradicts_evidence``)
    unless ``force_outcome`` gives a reason, which is recorded as evidence of kind
    ``outcome_forced``. ``agent``: who reports; ``run_not_yours`` if the run is another's.

    Never refused for a stale contract or an expired lease (a late report is still recorded);
    refused with ``run_not_open`` only when the run was already finished.
    """
    check_id("run", run_id)
    check_actor(actor)
    if outcome is not None and outcome not in RUN_OUTCOMES:
        raise LoopxError("invalid_argument", f"--outcome must be one of {', '.join(RUN_OUTCOMES)}")
    force_outcome = check_text(force_outcome, what="--force-outcome", limit="note", required=False)
    if force_outcome is not None and outcome != "ok":
        raise LoopxError("invalid_argument", "--force-outcome REASON goes with --outcome ok")
    if agent is not None:
        agent = check_text(agent, what="--agent", limit="agent")
    tokens = check_number(tokens or 0, what="--tokens", minimum=0, maximum=MAX_TOKENS, integer=True)
    cost = float(check_number(cost or 0.0, what="--cost", minimum=0, maximum=MAX_COST))
    handoff = check_text(handoff, what="--handoff", limit="note", required=False)
    if actor == "dashboard":
        raise LoopxError("actor_forbidden", "the dashboard never writes")
    found = {}

    def goal_of(tx):
        found["tx"], found["run"] = tx, load_run(tx, run_id)
        return found["run"].goal_id

    def work(w):
        # The row goal_of read in this transaction, which has written nothing since.
        same = found.get("tx") is w.tx and not w.events
        run = check_owner(check_recordable(w.tx, run_id, goal_id=w.goal_id, run=found["run"] if same else None), agent)
        late = state(run, w.at) != "open"
        final, note, supported, refused = _judge(w, run, actor, outcome, handoff, force_outcome)
        body = {"run_id": run_id, "outcome": final, "tokens": tokens, "cost": cost, "handoff": note, "by": actor}
        if refused and final == "failed":
            body["reason"] = REFUSED_COMMAND
        if outcome is None:
            body["derived"] = True
        if force_outcome is not None and supported == "failed":
            body["forced"] = force_outcome
        w.emit("run.finished", body)
        done = load_run(w.tx, run_id)
        out = to_json(done)
        out["wall_seconds"] = round(clock.seconds_between(done.opened_at, done.finished_at), 3)
        out["late"] = late
        if "reason" in body:
            out["reason"] = body["reason"]
        return out

    # Run events belong to the core: whoever reports, the core writes the entry (and names them).
    # The run's goal is found in the write transaction itself (no read transaction of its own).
    return reg.mutate("core", work, goal_of=goal_of, operation_id=operation_id, allow_closed=True,
                      request={"op": "run.finish", "run": run_id, "outcome": outcome, "tokens": tokens,
                               "cost": cost, "handoff": handoff, "by": actor, "agent": agent,
                               "force": force_outcome})


def show(reg: Registry, run_id: str) -> dict:
    """One run with its contract and its evidence summaries."""
    check_id("run", run_id)
    with reg.read() as tx:
        run = load_run(tx, run_id)
        out = to_json(run)
        out["state"] = state(run, clock.now())
        out["contract"] = load_contract(tx, run.contract_id)
        out["evidence"] = [
            {"id": r["id"], "kind": r["kind"], "summary": r["summary"], "actor": r["actor"], "at": r["created_at"]}
            for r in q.run_evidence_summaries(tx, run_id)
        ]
        return out


def list_runs(reg: Registry, goal_id: str, *, limit: int = 50) -> list[dict]:
    """The goal's runs, newest first, each with its current state."""
    from loopx.domain.goals import load_goal

    check_id("goal", goal_id)
    limit = check_number(limit, what="--limit", minimum=1, maximum=1000, integer=True)
    now = clock.now()
    with reg.read() as tx:
        load_goal(tx, goal_id)
        rows = q.goal_runs(tx, goal_id, limit)
        out = []
        for row in rows:
            run = run_from_row(row)
            item = to_json(run)
            item["state"] = state(run, now)
            out.append(item)
        return out
