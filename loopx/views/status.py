"""The status projection: one versioned, read-only view of the registry for people and machines.

``loopx status`` (text or JSON) and every ``/api/*`` route of the status server return what
this module builds, so the terminal, the HTTP API and the dashboard can never disagree. The
schema (``loopx.views.status/1``) is documented in ``docs/status-schema.md``; fields are only ever
added to a schema version, never renamed or removed.

Two views:

* :func:`overview` - all goals, *attention first* (pending gates, exhausted budgets, abandoned
  runs, a failing last run), then the rest, newest first, one page at a time. Which goals need
  attention is kept on every write in the ``goal_summary`` table (:mod:`loopx.ledger.attention`, which
  also says what is stored and what is judged against the clock at read time), so a page is an
  indexed range over it; everything shown per goal is then fetched for the page only, in
  batches, so the cost follows the page size, not the number of goals.
* :func:`goal_view` - one goal in full: gates, todos and the ready set, quota used/remaining,
  runs, evidence, the merged timeline, rewards, the latest hand-off and actions.

Nothing here writes; every function takes a transaction or a registry opened read-only.
"""

from __future__ import annotations

import json

from loopx.values import clock
from loopx.values.errors import LoopxError
# revision, usage_many and quota_picture are this module's public names too (loopx.views.status.usage_many).
from loopx.views.status_batches import (  # noqa: F401
    latest_runs,
    loads_or,
    quota_for,
    quota_picture,
    revision,
    usage_many,
)
from loopx.store.queries import status as q
from loopx.values.validate import check_id, check_number

SCHEMA = "loopx.views.status/1"
ATTENTION = ("gate_pending", "budget_exhausted", "run_abandoned", "run_failed", "no_ready_work")
#: Above this many goals in the attention lane, the overview's "need you" count is the lane's
#: stored count (each candidate costs a decision: :func:`loopx.views.needs_you.needs`).
NEEDS_COUNTED = 200
MAX_LIMIT = 1000
MAX_EVENTS = 1000
# How much history one goal view carries; older rows stay reachable through the ledger.
RECENT_RUNS = 20
RECENT_EVIDENCE = 50
RECENT_REWARDS = 20
RECENT_GATES = 20
MAX_TODOS = 500


# ----------------------------------------------------------------------------- overview


def parse_cursor(cursor: str | None) -> tuple[str, int | None]:
    """``None`` -> start; ``a.N`` / ``r.N`` -> after created_seq N in the attention / rest part."""
    if cursor is None:
        return "a", None
    from loopx.values.validate import ascii_whole

    part, _, seq = str(cursor).partition(".")
    if cursor == "r":
        return "r", None
    after = ascii_whole(seq)  # ASCII only: "a.²" is no cursor (str.isdigit() would say it is)
    if part not in ("a", "r") or after is None:
        raise LoopxError("invalid_argument", f"--cursor: {cursor!r} is not a cursor this command returned")
    return part, after


def _goal_row_summary(g: dict) -> dict:
    return {
        "id": g["id"],
        "title": g["title"],
        "status": g["status"],
        "status_reason": g["status_reason"],
        "revision": g["revision"],
        "created_at": g["created_at"],
        "updated_at": g["updated_at"],
        # The goal's own list, in the row the page already reads (no query of its own).
        "capabilities": loads_or(g.get("capabilities"), []),
    }


def overview(reg, *, limit: int = 50, cursor: str | None = None, include_closed: bool = False) -> dict:
    """All goals, attention first, one page at a time (see the module doc and the schema doc)."""
    limit = check_number(limit, what="--limit", minimum=1, maximum=MAX_LIMIT, integer=True)
    part, after = parse_cursor(cursor)
    with reg.read() as tx:
        return overview_tx(tx, limit=limit, part=part, after=after, include_closed=include_closed)


def overview_tx(tx, *, limit: int, part: str = "a", after: int | None = None, include_closed: bool = False) -> dict:
    """:func:`overview` inside an open read transaction.

    Reads the attention summary (:mod:`loopx.ledger.attention`), never the whole registry: the stored
    counters, the goals whose open run expired by now (an indexed range), and then one indexed
    range per part of the page; what each goal shows is fetched for the page's goals only.
    """
    from loopx.ledger import attention as summary

    at = clock.now()
    rev = revision(tx)
    stored = summary.counts(tx)
    # The one clock-dependent code: goals in the quiet lane whose open run has expired by now.
    # (The lane is checked here, not in SQL, so the planner has only the expiry index to use.)
    late = {r["goal_id"]: r["created_seq"] for r in q.summaries_expired_by(tx, at) if r["lane"] == 1}
    quiet = include_closed

    page: list[tuple[str, int]] = []  # (goal id, created_seq)
    next_cursor = None
    if part == "a":
        pending = _attention_after(tx, after, limit + 1, late)
        page = pending[:limit]
        if len(pending) > limit:
            next_cursor = f"a.{page[-1][1]}"
        elif len(page) == limit and _quiet_after(tx, quiet, None, 1, late):
            next_cursor = "r"
        part, after = "r", None
    if next_cursor is None and len(page) < limit:
        want = limit - len(page)
        rest = _quiet_after(tx, quiet, after, want + 1, late)
        if len(rest) > want:
            rest = rest[:want]
            next_cursor = f"r.{rest[-1][1]}"
        page.extend(rest)

    ids = [gid for gid, _ in page]
    goals = _summaries(tx, ids, attention_of(tx, ids, at), at)
    _with_needs_you(tx, goals, at)
    supervision = _supervision(tx, at)
    _with_retry(tx, goals, supervision["workers"])
    return {
        "schema": SCHEMA,
        "view": "overview",
        "generated_at": at,
        "revision": rev,
        "counts": {"goals": {k: stored[k] for k in ("open", "paused", "closed")},
                   "attention": _needs_count(tx, stored["attention"], late, goals, at)},
        "goals": goals,
        "page": {"limit": limit, "next": next_cursor},
        **supervision,
    }


def _with_needs_you(tx, goals: list[dict], at: str) -> None:
    """Each goal's ``needs_you`` (:mod:`loopx.views.needs_you`, ``None`` when no person is needed); the
    goals waiting for a person first, the one waiting longest (the oldest) first; the others in
    their order."""
    from loopx.views.needs_you import many

    found = many(tx, [g["id"] for g in goals if g["status"] == "open"], at)
    for g in goals:
        g["needs_you"] = found.get(g["id"])
    waiting = sorted((g for g in goals if g["needs_you"] is not None), key=lambda g: (g["created_at"], g["id"]))
    goals[:] = waiting + [g for g in goals if g["needs_you"] is None]


def _with_retry(tx, goals: list[dict], workers: list[dict]) -> None:
    """``retry`` on each open goal a worker is backing off from (its newest turns failed and no
    person is needed yet): ``{"at", "failed_turns", "retry_seconds"}`` - when the worker tries
    again (:func:`loopx.domain.supervision.retry_at`, with the newest worker's ``--retry-seconds``)."""
    from loopx.domain.supervision import failed_streak, retry_at

    seconds = next((w["retry_seconds"] for w in workers if w.get("retry_seconds") is not None), None)
    for g in goals:
        g["retry"] = None
        if seconds is None or g["status"] != "open" or g.get("needs_you") or "run_failed" not in g["attention"]:
            continue
        streak, last = failed_streak(tx, g["id"])
        at = retry_at(streak, last, seconds)
        if at is not None:
            g["retry"] = {"at": at, "failed_turns": streak, "retry_seconds": seconds}


def _needs_count(tx, lane: int, late: dict, goals: list[dict], at: str) -> int:
    """How many goals need a person: :func:`loopx.views.needs_you.needs` asked of every goal of the
    attention lane (which holds every goal that may) and of the goals shown; past
    :data:`NEEDS_COUNTED` candidates, the lane's stored count."""
    if lane + len(late) > NEEDS_COUNTED:
        return lane + len(late)
    from loopx.views.needs_you import many

    candidates = q.open_attention_goals(tx)
    candidates += [g for g in late if g not in candidates]
    shown = {g["id"] for g in goals if g.get("needs_you") is not None}
    found = set(many(tx, [g for g in candidates if g not in shown], at))
    return len(found | shown)


def _now_and_needs(tx, goal_id: str, status: str, at: str) -> dict:
    """``current_contract`` (the decision now, :func:`loopx.views.needs_you.current`) and ``needs_you``."""
    from loopx.views.needs_you import current, needs

    return {"current_contract": current(tx, goal_id, at),
            "needs_you": needs(tx, goal_id, at) if status == "open" else None}


def _supervision(tx, at: str) -> dict:
    """The workers seen lately (heartbeats) and the clock jumps they noticed (:mod:`loopx.domain.supervision`)."""
    from loopx.domain.supervision import clock_jumps, workers

    return {"workers": workers(tx, at), "clock_jumps": clock_jumps(tx)}


def _attention_after(tx, bound: int | None, n: int, late: dict[str, int]) -> list[tuple[str, int]]:
    """Up to ``n`` attention goals newer than ``bound``, oldest first (the one waiting longest
    first): the stored lane, merged with the goals whose open run expired by now."""
    rows = [(r["goal_id"], r["created_seq"]) for r in q.attention_page(tx, bound, n)]
    rows.extend((g, seq) for g, seq in late.items() if bound is None or seq > bound)
    rows.sort(key=lambda r: r[1])
    return rows[:n]


def _quiet_after(tx, include_closed: bool, bound: int | None, n: int, late: dict[str, int]) -> list[tuple[str, int]]:
    """Up to ``n`` goals outside attention (the closed ones too with ``include_closed``) older than
    ``bound``, newest first (one index range; more only when expired runs moved goals out of the lane)."""
    out: list[tuple[str, int]] = []
    while len(out) < n:
        size = n - len(out) + min(len(late), 200)
        rows = q.quiet_page(tx, include_closed, bound, size)
        out.extend((r["goal_id"], r["created_seq"]) for r in rows if r["goal_id"] not in late)
        if len(rows) < size:
            break
        bound = rows[-1]["created_seq"]
    return out[:n]


def attention_of(tx, goal_ids: list[str], at: str) -> dict[str, list[str]]:
    """``{goal_id: [attention codes]}`` now, for a few goals, from their summary rows."""
    out: dict[str, list[str]] = {}
    for r in q.summary_rows(tx, goal_ids):
        if r["lane"] == 0:
            continue
        codes = set(filter(None, r["attention"].split(",")))
        if r["run_expires"] is not None and r["run_expires"] <= at:
            codes.add("run_abandoned")
        if codes:
            out[r["goal_id"]] = [c for c in ATTENTION if c in codes]
    return out


def _summaries(tx, ids: list[str], attention: dict[str, list[str]], at: str) -> list[dict]:
    """One summary per goal id, in the order given, from a few batched queries."""
    if not ids:
        return []
    rows = {r["id"]: r for r in q.goal_rows(tx, ids)}
    todo_counts: dict[str, dict] = {i: {"open": 0, "done": 0, "blocked": 0} for i in ids}
    for r in q.todo_counts(tx, ids):
        todo_counts[r["goal_id"]][r["status"]] = int(r["n"])
    gate_counts: dict[str, int] = {}
    for r in q.pending_gate_counts(tx, ids):
        gate_counts[r["goal_id"]] = int(r["n"])
    latest = latest_runs(tx, ids)
    quotas = quota_for(tx, [rows[i] for i in ids if i in rows])
    out = []
    for goal_id in ids:
        g = rows.get(goal_id)
        if g is None:
            continue
        run = latest.get(goal_id)
        out.append(
            _goal_row_summary(g)
            | {
                "attention": attention.get(goal_id, []),
                "gates_pending": gate_counts.get(goal_id, 0),
                "todos": todo_counts[goal_id],
                "last_run": _run_json(run, at) if run else None,
                "quota": quotas[goal_id],
            }
        )
    return out


def _run_json(r: dict, at: str) -> dict:
    import attrs

    from loopx.domain import runs

    run = runs.run_from_row(r)
    # "state": an open run past its expiry is abandoned whether or not anyone has said so yet.
    # (A run is flat: asdict is what cattrs would give, without cattrs on the overview's path.)
    return attrs.asdict(run) | {"state": runs.state(run, at)}


# ----------------------------------------------------------------------------- one goal


def goal_view(reg, goal_id: str) -> dict:
    """One goal in full (``goal_not_found`` if there is none)."""
    check_id("goal", goal_id)
    with reg.read() as tx:
        return goal_view_tx(tx, goal_id)


def goal_view_tx(tx, goal_id: str) -> dict:
    """:func:`goal_view` inside an open read transaction."""
    from loopx.ledger import artifacts
    from loopx.domain import evidence, gates, rewards, runs, todos, usage
    from loopx.model import to_json
    from loopx.domain.goals import goal_from_row

    at = clock.now()
    row = q.goal_row(tx, goal_id)
    if row is None:
        raise LoopxError("goal_not_found", f"no goal {goal_id}")
    goal = goal_from_row(row)
    all_gates = gates.list_gates(tx, goal_id)
    pending = [to_json(x) for x in reversed(all_gates) if x.status == "pending"]
    decided = sorted((to_json(x) for x in all_gates if x.status != "pending"),
                     key=lambda x: x["decided_at"] or "", reverse=True)
    todo_list = todos.list_todos(tx, goal_id)
    ready = [t.id for t in todos.ready(tx, goal_id, agent=None, now=at)]
    recent = q.recent_runs(tx, goal_id, RECENT_RUNS)
    run_list = [_run_json(r, at) for r in recent]
    ev_list = [to_json(evidence.evidence_from_row(e)) for e in q.recent_evidence(tx, goal_id, RECENT_EVIDENCE)]
    rw_list = [to_json(rewards.reward_from_row(w)) for w in q.recent_rewards(tx, goal_id, RECENT_REWARDS)]
    totals = q.goal_totals(tx, goal_id)
    actions = q.action_rows(tx, goal_id)
    handoff = runs.latest_handoff(tx, goal_id)
    gated = todos.held_by_gates(tx, goal_id)
    items = [todos.with_hold(_todo_json(t, at), gated) for t in todo_list[:MAX_TODOS]]
    from loopx.views import status_history

    for x in pending:
        x["decide"] = status_history.decide_commands(x)
    quota = quota_picture(goal, usage.usage(tx, goal_id))
    return {
        "schema": SCHEMA,
        "view": "goal",
        "generated_at": at,
        "revision": revision(tx),
        "goal": to_json(goal),
        "attention": attention_of(tx, [goal_id], at).get(goal_id, []),
        "gates": {"pending": pending, "decided": decided[:RECENT_GATES]},
        "todos": {"counts": _todo_counts(todo_list), "items": items, "truncated": len(todo_list) > MAX_TODOS,
                  "ready": ready},
        "quota": quota,
        "history": status_history.history(tx, goal_id, quota["used"], at),
        "last_contract": status_history.last_contract(tx, goal_id),
        **_now_and_needs(tx, goal_id, goal.status, at),
        "runs": {"total": int(totals["runs"]), "recent": run_list},
        "evidence": {"total": int(totals["evidence"]), "recent": ev_list},
        "rewards": {"total": int(totals["rewards"]), "recent": rw_list,
                    "mean": None if totals["mean"] is None else round(float(totals["mean"]), 4)},
        "handoff": to_json(handoff) if handoff else None,
        "artifacts": artifacts.of_goal(tx, goal_id),  # what a human reviews, path and sha256 (checked)
        "actions": [{"name": a["name"], "argv": json.loads(a["argv"]), "source": a["source"],
                     "gate_id": a.get("gate_id"), "created_at": a["created_at"]} for a in actions],
        "timeline": _timeline(run_list, ev_list, rw_list),
        "workspace": _workspace(tx, goal_id),
    }


def _workspace(tx, goal_id: str) -> dict:
    """Where the goal's agent works (loopx.domain.workspace): path and branch, no git run."""
    from loopx.domain import workspace

    return workspace.view_tx(tx, goal_id)


def _todo_counts(todo_list) -> dict:
    counts = {"open": 0, "done": 0, "blocked": 0}
    for t in todo_list:
        counts[t.status] = counts.get(t.status, 0) + 1
    return counts


def _todo_json(todo, at: str) -> dict:
    from loopx.model import to_json

    out = to_json(todo)
    if out["claim"] is not None:
        out["claim"]["valid"] = todo.claim.expires_at > at
    return out


def _timeline(run_list: list[dict], ev_list: list[dict], rw_list: list[dict], limit: int = 50) -> list[dict]:
    """Runs, evidence and rewards merged into one list, newest first."""
    items = []
    for r in run_list:
        items.append({"at": r["opened_at"], "kind": "run.opened", "run_id": r["id"], "text": f"run by {r['agent']}"})
        if r["finished_at"]:
            text = r["outcome"] or r["status"]
            items.append({"at": r["finished_at"], "kind": f"run.{r['status']}", "run_id": r["id"],
                          "text": text + (f": {r['handoff']}" if r["handoff"] else "")})
    for e in ev_list:
        items.append({"at": e["created_at"], "kind": "evidence", "run_id": e["run_id"],
                      "text": f"[{e['kind']}] {e['summary']}"})
    for w in rw_list:
        items.append({"at": w["created_at"], "kind": "reward", "run_id": w["run_id"],
                      "text": f"score {w['score']:+g}" + (f": {w['comment']}" if w["comment"] else "")})
    items.sort(key=lambda i: i["at"], reverse=True)
    return items[:limit]


# ----------------------------------------------------------------------------- ledger


def goal_events(reg, goal_id: str, *, after: int = 0, limit: int = 200) -> dict:
    """A goal's ledger entries with ``seq > after`` (for a live tail: pass ``next_after`` back)."""
    check_id("goal", goal_id)
    after = check_number(after, what="after", minimum=0, maximum=2**62, integer=True)
    limit = check_number(limit, what="limit", minimum=1, maximum=MAX_EVENTS, integer=True)
    with reg.read() as tx:
        return goal_events_tx(tx, goal_id, after=after, limit=limit)


def goal_events_tx(tx, goal_id: str, *, after: int, limit: int) -> dict:
    """:func:`goal_events` inside an open read transaction."""
    from loopx.ledger import log as ledger
    from loopx.model import to_json

    if not q.goal_exists(tx, goal_id):
        raise LoopxError("goal_not_found", f"no goal {goal_id}")
    events = [to_json(e) for e in ledger.events(tx, goal_id, after=after, limit=limit)]
    return {
        "schema": SCHEMA,
        "view": "events",
        "goal_id": goal_id,
        "revision": revision(tx),
        "events": events,
        "next_after": events[-1]["seq"] if events else after,
    }
