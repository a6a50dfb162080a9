"""``summary_all``: what happened on a goal (or on every goal), with the human overlays attached.

Per goal: runs by outcome and state, evidence by kind, the ``human_reward`` overlay (count,
mean score, latest comments), quota used and remaining, the gates still waiting or rejected,
the todos, and the latest hand-off. Everything is read from one consistent snapshot and
derived from current state: nothing here is stored.
"""

from __future__ import annotations

from loopx.model import RUN_OUTCOMES, RUN_STATUSES, TODO_STATUSES, to_json
from loopx.store.queries import status as queries
from loopx.values.validate import check_id

SCHEMA = "loopx.views.summary_all/1"
# A summary lists open todos up to this many (their count is always complete).
MAX_OPEN_TODOS = 20
#: ``by_outcome``'s keys: a finished run's outcome, and ``abandoned`` for a run that never finished
#: (expired, or its owner died), so they add up to every run that is no longer open.
OUTCOME_KEYS = (*RUN_OUTCOMES, "abandoned")


def summarize(reg, goal_id: str | None = None) -> dict:
    """The summary of one goal, or of every goal when ``goal_id`` is ``None``.

    Returns ``{"schema", "at", "goals": [per-goal summary], "totals": {...}}``.
    """
    from loopx.values import clock
    from loopx.domain.goals import goal_from_row, load_goal

    if goal_id is not None:
        check_id("goal", goal_id)
    with reg.read() as tx:
        at = clock.now()
        if goal_id is not None:
            goals = [load_goal(tx, goal_id)]
        else:
            goals = [goal_from_row(r) for r in queries.all_goal_rows(tx)]
        per_goal = [goal_summary(tx, g, at=at) for g in goals]
    return {"schema": SCHEMA, "at": at, "goals": per_goal, "totals": totals(per_goal)}


def _counts(rows: list[dict], keys=()) -> dict[str, int]:
    out = {k: 0 for k in keys}
    for row in rows:
        out[row["k"]] = out.get(row["k"], 0) + int(row["n"])
    return out


def goal_summary(tx, goal, *, at: str) -> dict:
    """One goal's summary, read through ``tx`` (``goal`` is a :class:`loopx.model.Goal`)."""
    from loopx.domain import gates, rewards, runs, todos, usage

    gid = goal.id
    by_status = _counts(queries.runs_by_status(tx, gid), RUN_STATUSES)
    # An open run past its expiry no longer counts as open (``quota should-run`` marks it later).
    stale = queries.open_runs_expired(tx, gid, at)
    by_status["open"] -= stale
    by_status["abandoned"] += stale
    by_outcome = _counts(queries.finished_by_outcome(tx, gid), OUTCOME_KEYS)
    by_outcome["abandoned"] = by_status["abandoned"]
    evidence = _counts(queries.evidence_by_kind(tx, gid))
    rw = queries.reward_count_mean(tx, gid)
    used = usage.usage(tx, gid)
    blocking = gates.list_gates(tx, gid)
    all_todos = todos.list_todos(tx, gid)
    todo_counts = {s: 0 for s in TODO_STATUSES}
    for t in all_todos:
        todo_counts[t.status] += 1
    open_todos = [t for t in all_todos if t.status == "open"]
    ready = todos.ready(tx, gid, agent=None, now=at)
    gated = todos.held_by_gates(tx, gid)
    # A claim outlives its run on the row; it holds the todo only under the one readiness rule.
    held = {r["id"] for r in queries.held_todo_ids(tx, gid, at)}
    handoff = runs.latest_handoff(tx, gid)
    return {
        "goal": {"id": gid, "title": goal.title, "status": goal.status, "revision": goal.revision},
        "runs": {"total": sum(by_status.values()), "by_outcome": by_outcome, "by_status": by_status},
        "evidence": {"total": sum(evidence.values()), "by_kind": dict(sorted(evidence.items()))},
        "rewards": {
            "count": int(rw["n"]),
            "mean": None if rw["mean"] is None else round(float(rw["mean"]), 6),
            "latest": rewards.feedback(tx, gid, limit=3),
        },
        "quota": {
            "limits": usage.attrs_dict(goal.limits),
            "grants": usage.attrs_dict(goal.grants),
            "used": to_json(used),
            "remaining": usage.remaining(goal, used),
            "exhausted": usage.exhausted(goal, used),
        },
        "gates": {
            "pending": [to_json(g) for g in blocking if g.status == "pending"],
            "rejected": [to_json(g) for g in blocking if g.status == "rejected"],
        },
        "todos": {
            "total": len(all_todos),
            "by_status": todo_counts,
            "ready": len(ready),
            "open": [todos.with_hold({**to_json(t), "claim_holds": t.id in held}, gated)
                     for t in open_todos[:MAX_OPEN_TODOS]],
        },
        "handoff": None if handoff is None else to_json(handoff),
    }


def totals(per_goal: list[dict]) -> dict:
    """Sums across goal summaries (the mean score is weighted by each goal's reward count)."""
    out = {
        "goals": len(per_goal),
        "runs": {"total": 0, "by_outcome": {o: 0 for o in OUTCOME_KEYS}},
        "evidence": 0,
        "rewards": {"count": 0, "mean": None},
        "gates_pending": 0,
        "todos_open": 0,
    }
    score_sum = 0.0
    for s in per_goal:
        out["runs"]["total"] += s["runs"]["total"]
        for k, v in s["runs"]["by_outcome"].items():
            out["runs"]["by_outcome"][k] = out["runs"]["by_outcome"].get(k, 0) + v
        out["evidence"] += s["evidence"]["total"]
        out["rewards"]["count"] += s["rewards"]["count"]
        if s["rewards"]["mean"] is not None:
            score_sum += s["rewards"]["mean"] * s["rewards"]["count"]
        out["gates_pending"] += len(s["gates"]["pending"])
        out["todos_open"] += s["todos"]["by_status"]["open"]
    if out["rewards"]["count"]:
        out["rewards"]["mean"] = round(score_sum / out["rewards"]["count"], 6)
    return out


def to_text(summary: dict) -> str:
    """The summary for people."""
    blocks = [_goal_text(s) for s in summary["goals"]]
    if not blocks:
        return "no goals"
    t = summary["totals"]
    if t["goals"] > 1:
        oc = t["runs"]["by_outcome"]
        mean = "-" if t["rewards"]["mean"] is None else f"{t['rewards']['mean']:+.2f}"
        blocks.append(
            f"All {t['goals']} goals: {t['runs']['total']} runs ({_kv(oc)}), {t['evidence']} evidence, "
            f"{t['rewards']['count']} rewards (mean {mean}), {t['gates_pending']} gates pending, "
            f"{t['todos_open']} todos open"
        )
    return "\n\n".join(blocks)


def _kv(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items() if v) or "none"


def _goal_text(s: dict) -> str:
    g, r, q = s["goal"], s["rewards"], s["quota"]
    lines = [f"{g['id']}  [{g['status']}]  {g['title']}"]
    lines.append(f"  runs      {s['runs']['total']}: {_kv(s['runs']['by_outcome'])}"
                 f"  (open {s['runs']['by_status']['open']}, abandoned {s['runs']['by_status']['abandoned']})")
    lines.append(f"  evidence  {s['evidence']['total']}: {_kv(s['evidence']['by_kind'])}")
    mean = "-" if r["mean"] is None else f"{r['mean']:+.2f}"
    lines.append(f"  rewards   {r['count']}, mean {mean}")
    for f in r["latest"]:
        lines.append(f"    {f['score']:+.2f} on {f['run_id']}: {f['comment'] or '(no comment)'}")
    used = q["used"]
    rem = ", ".join(f"{k} {'unlimited' if v is None else v}" for k, v in q["remaining"].items())
    lines.append(f"  quota     used turns {used['turns']}, tokens {used['tokens']}, cost {used['cost']}, "
                 f"wall {used['wall_seconds']}s; remaining {rem}")
    if q["exhausted"]:
        lines.append(f"            exhausted: {', '.join(q['exhausted'])}")
    for gate in s["gates"]["pending"]:
        lines.append(f"  gate      {gate['id']} pending ({gate['scope']}, blocks {gate['blocks']}): {gate['title']}")
    for gate in s["gates"]["rejected"]:
        why = f" - {gate['comment']}" if gate.get("comment") else ""
        lines.append(f"  gate      {gate['id']} rejected (blocks {gate['blocks']}): {gate['title']}{why}")
    td = s["todos"]
    lines.append(f"  todos     {td['total']}: {_kv(td['by_status'])}; ready {td['ready']}")
    for t in td["open"]:
        who = f"  [{t['claim']['agent']}]" if t.get("claim") and t.get("claim_holds") else ""  # while it holds
        held = f"  ({t['blocked_by']['text']})" if t.get("blocked_by") else ""
        lines.append(f"    {t['priority']} {t['id']} {t['text']}{who}{held}")
    if s["handoff"]:
        h = s["handoff"]
        lines.append(f"  handoff   {h['note']}  (run {h['run_id']}, {h['at']})")
    return "\n".join(lines)
