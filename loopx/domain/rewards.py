"""The ``human_reward`` overlay: a user's score in [-1, 1] and comment on one run of a goal.

A reward overlays a run; it never edits it. The latest rewards reach the agent in the next
contract as feedback, and ``reward export`` writes them, joined with the run, the contract it
ran under and its evidence, as versioned JSON records for reward-model training
(``loopx/schemas/reward_record.json``, documented in ``docs/reward-export.md``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterator

from loopx.ledger import log as ledger
from loopx.values.errors import LoopxError
from loopx.model import to_json
from loopx.ledger.registry import Registry
from loopx.values.validate import check_id, check_number, check_text, new_id

if TYPE_CHECKING:  # the class is built on first use: should-run reads feedback without it
    from loopx.model import Reward

RECORD_SCHEMA = "loopx.reward_record/1"
# A run can gather a lot of evidence; a training record keeps the first ones and says how many.
MAX_EVIDENCE_PER_RECORD = 200


def reward_from_row(row: dict) -> Reward:
    """A :class:`Reward` from a ``rewards`` row."""
    from loopx.model import Reward

    return Reward(id=row["id"], goal_id=row["goal_id"], run_id=row["run_id"], score=float(row["score"]),
                  author=row["author"], created_at=row["created_at"], comment=row["comment"])


def list_rewards(tx, goal_id: str) -> list[Reward]:
    """The goal's rewards, oldest first."""
    from loopx.store.queries.rewards import goal_rewards

    return [reward_from_row(r) for r in goal_rewards(tx, goal_id)]


def feedback(tx, goal_id: str, limit: int = 3) -> list[dict]:
    """The latest ``limit`` rewards of the goal, newest first: ``{run_id, score, comment, at}``."""
    from loopx.store.queries.runs import latest_rewards  # (should-run's module: loaded on its path anyway)

    rows = latest_rewards(tx, goal_id, limit)
    return [{"run_id": r["run_id"], "score": float(r["score"]), "comment": r["comment"], "at": r["created_at"]}
            for r in rows]


def check_score(score) -> float:
    """A reward score: a finite number in [-1, 1] (NaN and infinities are refused)."""
    return float(check_number(score, what="--score", minimum=-1, maximum=1))


def add(reg: Registry, actor: str, *, goal_id: str, run_id: str, score, comment: str | None = None,
        operation_id: str | None = None) -> dict:
    """Score one run of the goal (user only); returns the reward."""
    check_id("goal", goal_id)
    check_id("run", run_id)
    score = check_score(score)
    comment = check_text(comment, what="--comment", limit="comment", required=False)
    if ledger.role(actor) != ledger.USER:
        # The event kind's writers refuse it too; this message says why.
        raise LoopxError("actor_forbidden", f"only a user may score a run; {actor} may not add a reward")
    reward_id = new_id("reward")

    from loopx.store.queries import rewards as q

    def work(w):
        run = q.run_goal(w.tx, run_id)
        if run is None:
            raise LoopxError("run_not_found", f"no run {run_id}")
        if run["goal_id"] != goal_id:
            raise LoopxError("run_not_found", f"run {run_id} belongs to another goal, not {goal_id}")
        body = {"reward_id": reward_id, "run_id": run_id, "score": score}
        if comment:
            body["comment"] = comment
        w.emit("reward.added", body)
        row = q.reward_row(w.tx, reward_id)
        return to_json(reward_from_row(row))

    # A closed goal's runs can still be scored: the overlay reviews work that is over.
    return reg.mutate(actor, work, goal_id=goal_id, operation_id=operation_id, allow_closed=True,
                      request={"op": "reward.add", "goal": goal_id, "run": run_id, "score": score,
                               "comment": comment})


def list_for(reg: Registry, goal_id: str) -> list[dict]:
    """``reward list``: the goal's rewards, oldest first, as JSON-ready data."""
    from loopx.domain.goals import load_goal

    check_id("goal", goal_id)
    with reg.read() as tx:
        load_goal(tx, goal_id)
        return [to_json(r) for r in list_rewards(tx, goal_id)]


def export_records(reg: Registry, goal_id: str | None = None) -> Iterator[dict]:
    """One ``loopx.reward_record/1`` per reward (of one goal, or of every goal), oldest first.

    Each record joins the reward with its goal, its run (outcome, tokens, cost, hand-off), the
    contract the run was issued under, and the run's evidence summaries. All records come from
    one consistent snapshot.
    """
    from loopx.domain.goals import load_goal
    from loopx.store.queries import rewards as q

    if goal_id is not None:
        check_id("goal", goal_id)
    with reg.read() as tx:
        if goal_id is not None:
            load_goal(tx, goal_id)
            rows = q.goal_rewards(tx, goal_id)
        else:
            rows = q.every_reward(tx)
        goals: dict[str, dict] = {}
        for row in rows:
            if row["goal_id"] not in goals:
                goals[row["goal_id"]] = _goal_part(load_goal(tx, row["goal_id"]))
            yield record(tx, reward_from_row(row), goals[row["goal_id"]])


def _goal_part(goal) -> dict:
    return {"id": goal.id, "title": goal.title, "objective": goal.description,
            "criteria": [c.text for c in goal.criteria]}


def record(tx, reward: Reward, goal_part: dict) -> dict:
    """The training record of one reward (see ``docs/reward-export.md``)."""
    from loopx.values import clock
    from loopx.store.queries import rewards as q
    from loopx.store.queries.runs import run_row

    run = run_row(tx, reward.run_id)
    wall = None
    if run["finished_at"]:
        wall = max(0.0, clock.seconds_between(run["opened_at"], run["finished_at"]))
    contract = q.contract_row(tx, run["contract_id"])
    total = q.evidence_count(tx, run["id"])
    evidence = q.first_evidence(tx, run["id"], MAX_EVIDENCE_PER_RECORD)
    return {
        "schema": RECORD_SCHEMA,
        "reward": {"id": reward.id, "score": reward.score, "comment": reward.comment,
                   "author": reward.author, "created_at": reward.created_at},
        "goal": goal_part,
        "run": {"id": run["id"], "agent": run["agent"], "status": run["status"], "outcome": run["outcome"],
                "opened_at": run["opened_at"], "finished_at": run["finished_at"], "wall_seconds": wall,
                "tokens": int(run["tokens"]), "cost": float(run["cost"]), "handoff": run["handoff"]},
        "contract": None if contract is None else {
            "id": contract["id"], "fingerprint": contract["fingerprint"], "issued_at": contract["issued_at"],
            "document": json.loads(contract["document"])},
        "evidence": [{k: e[k] for k in ("id", "kind", "summary", "actor", "created_at", "file_sha256")}
                     for e in evidence],
        "evidence_total": total,
    }


def latest_handoff(reg: Registry, goal_id: str) -> dict:
    """``handoff show``: the goal's latest hand-off note and a summary of the run that left it."""
    from loopx.domain import runs
    from loopx.domain.goals import load_goal

    check_id("goal", goal_id)
    with reg.read() as tx:
        load_goal(tx, goal_id)
        found = runs.latest_handoff(tx, goal_id)
        from loopx.ledger import artifacts

        shown = artifacts.of_goal(tx, goal_id)  # a reviewer packet a capability recorded, path and sha256
        if found is None:
            return {"goal_id": goal_id, "handoff": None, "run": None, "artifacts": shown}
        run = runs.load_run(tx, found.run_id)
        return {"goal_id": goal_id, "handoff": to_json(found), "artifacts": shown,
                "run": {"id": run.id, "agent": run.agent, "outcome": run.outcome, "opened_at": run.opened_at,
                        "finished_at": run.finished_at, "tokens": run.tokens, "cost": run.cost}}
