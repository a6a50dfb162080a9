"""The attention summary: one small row per goal that says where the overview ranks it.

``loopx status`` and ``GET /api/status`` show goals *attention first*, then the rest, newest
first. Finding the goals that need a human used to mean scanning every gate, run and budget
in the registry on every request. Instead, :func:`refresh` keeps a ``goal_summary`` row per goal
in the same transaction as every event that can change it (it is called from
:func:`loopx.ledger.log.apply`, so a replay rebuilds it like every other current-state table), and
the overview's first page is one indexed range query over it.

What is stored and what is computed when a page is read:

* **Stored** (depends only on the goal's rows): the goal's status, its creation order, the
  *lane* (0 closed, 1 nothing to see, 2 needs attention) and the attention codes that follow
  from the rows alone - ``gate_pending`` (a pending gate), ``budget_exhausted`` (usage from the
  runs against limits and grants), ``run_abandoned`` (the newest run was marked abandoned),
  ``run_failed`` (the newest finished run failed), ``no_ready_work`` (the goal has todos and
  none is unblocked). Lane 2 holds every goal that may need a person: whether one does, and
  why, is :func:`loopx.views.needs_you.needs` (the one definition), asked only for those goals and
  the ones shown.
* **Stored, judged at read time**: ``run_expires``, the earliest expiry among the goal's open
  runs. An open run past its expiry is abandoned *now*, before anyone has marked it, so the
  page query adds ``run_abandoned`` to every goal with ``run_expires <= now`` (an indexed range:
  only goals with an open run have a value). No other attention code depends on the clock:
  budgets count only closed runs, and cadence and todo leases decide whether an agent may run,
  not whether a human must look.

``summary_counts`` holds the overview's totals (goals per status, goals in lane 2). Triggers on
``goal_summary`` keep it equal to the table whatever writes the table (a replay, a repair that
deletes and rebuilds a goal, a registry copy). On PostgreSQL the counters are spread over
:data:`SHARDS` rows per key, chosen by the writer's backend, so concurrent writers rarely touch
the same counter row; a read sums them.
"""

from __future__ import annotations

import functools
import json

from loopx.ledger import usage_counts
from loopx.model import BUDGETS
from loopx.store.dialect import of as dialect_of
from loopx.store.queries import attention as q

STATIC_CODES = ("gate_pending", "budget_exhausted", "run_abandoned", "run_failed", "no_ready_work")
LANE_CLOSED, LANE_QUIET, LANE_ATTENTION = 0, 1, 2
COUNT_KEYS = ("open", "paused", "closed", "attention")
SHARDS = 16  # PostgreSQL counter rows per key (SQLite uses shard 0 only: it has one writer)


def _row_for(r: dict) -> tuple:
    """The summary row ``(status, created_seq, lane, attention, run_expires)`` a row of
    :func:`loopx.store.queries.attention.summary_inputs` gives."""
    if r["status"] == "closed":
        return (r["status"], r["created_seq"], LANE_CLOSED, "", None)
    codes = set()
    if r["gate_pending"]:
        codes.add("gate_pending")
    if r["newest"] == "abandoned":
        codes.add("run_abandoned")
    if r["newest_done"] == "failed":
        codes.add("run_failed")
    if r["has_todos"] and not r["has_ready"]:
        codes.add("no_ready_work")
    used = usage_counts.shown(usage_counts.read_row(r) if r["turns"] is not None else usage_counts.ZERO)
    if _limited(r) and _exhausted(r, used):
        codes.add("budget_exhausted")
    return (r["status"], r["created_seq"], LANE_ATTENTION if codes else LANE_QUIET, _codes(codes), r["expiry"])


def _codes(found) -> str:
    return ",".join(c for c in STATIC_CODES if c in found)


# ------------------------------------------------------------------------------ budgets
# The same arithmetic as loopx.domain.usage (usage, effective_limits, remaining, exhausted), here because
# the summary is kept by the ledger's apply, which sits below the domain modules; a test holds
# the two to the same verdicts.

_BUDGETS = tuple(BUDGETS.items())
_UNUSED = {"turns": 0, "tokens": 0, "cost": 0.0, "wall_seconds": 0.0}


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> dict:
    return json.loads(text or "{}")


def _limited(goal: dict) -> bool:
    limits = _parsed(goal["limits"])
    return any(limits.get(name) is not None for _, name in _BUDGETS)


def _exhausted(goal: dict, used: dict) -> bool:
    """Whether any budget of ``goal`` (a row with ``limits`` and ``grants``) has nothing left."""
    limits, grants = _parsed(goal["limits"]), _parsed(goal["grants"])
    for key, name in _BUDGETS:
        base = limits.get(name)
        if base is None:
            continue
        left = max(0, base + (grants.get(name) or 0) - used[key])
        if (round(left, 6) if isinstance(left, float) else left) <= 0:
            return True
    return False


def _usage(tx) -> dict[str, dict]:
    """``{goal_id: used}`` for every goal with runs, summed from the runs rows by the counters'
    rules (a migration's rebuild runs before the counters exist; :mod:`loopx.ledger.usage_counts`)."""
    return {g: usage_counts.shown(dict(zip(("turns", "tokens", "cost_micros", "wall_us", "last_opened"), c)))
            for g, c in usage_counts.from_runs(tx).items()}


def refresh(tx, goal_id: str) -> None:
    """Bring ``goal_id``'s summary row up to date with its current rows (inside the writer's transaction).

    Writes only when something changed, so the counter triggers fire only on a real change.
    """
    r = q.summary_inputs(tx, goal_id)
    if r is None:  # the goal's row is gone
        q.delete_summary(tx, goal_id)
        return
    want = _row_for(r)
    if r["have"] is None:
        q.insert_summary(tx, goal_id, want)
    elif (r["have_status"], r["have_created_seq"], r["have_lane"], r["have_attention"], r["have_run_expires"]) != want:
        q.update_summary(tx, goal_id, want)


def rebuild_all(tx) -> int:
    """Fill ``goal_summary`` for every goal (the schema migration; also a repair tool). Returns the count.

    Set queries over the whole registry (the same rules as :func:`refresh`), then batched
    inserts: a migration of a million goals takes seconds, not one query per goal.
    """
    q.clear_summaries(tx)
    codes: dict[str, set] = {}
    for r in q.goals_with_pending_gates(tx):
        codes.setdefault(r["goal_id"], set()).add("gate_pending")
    newest: dict[str, tuple] = {}
    newest_done: dict[str, tuple] = {}
    for r in q.every_run(tx):
        order = (r["opened_at"], r["id"])
        if r["goal_id"] not in newest or order > newest[r["goal_id"]][0]:
            newest[r["goal_id"]] = (order, r["status"])
        if r["status"] == "finished" and (r["goal_id"] not in newest_done or order > newest_done[r["goal_id"]][0]):
            newest_done[r["goal_id"]] = (order, r["outcome"])
    for goal_id, (_, status) in newest.items():
        if status == "abandoned":
            codes.setdefault(goal_id, set()).add("run_abandoned")
    for goal_id, (_, outcome) in newest_done.items():
        if outcome == "failed":
            codes.setdefault(goal_id, set()).add("run_failed")
    if _has_ready_index(tx):  # the schema step that first built the summary came before the ready index
        with_todos = q.goals_with_todos(tx)
        with_ready = q.goals_with_ready_todos(tx)
        for goal_id in with_todos - with_ready:
            codes.setdefault(goal_id, set()).add("no_ready_work")
    used = _usage(tx)
    expiries = q.open_run_expiries(tx)
    rows = []
    for g in q.goal_budgets(tx):
        if g["status"] == "closed":
            rows.append((g["id"], g["status"], g["created_seq"], LANE_CLOSED, "", None))
            continue
        mine = codes.get(g["id"], set())
        if _limited(g) and _exhausted(g, used.get(g["id"], _UNUSED)):
            mine = mine | {"budget_exhausted"}
        rows.append((g["id"], g["status"], g["created_seq"], LANE_ATTENTION if mine else LANE_QUIET, _codes(mine),
                     expiries.get(g["id"])))
    q.insert_summaries(tx, rows)
    return len(rows)


def _has_ready_index(tx) -> bool:
    return dialect_of(tx).has_table(tx, "todo_ready")


def counts(tx) -> dict:
    """``{"open", "paused", "closed", "attention"}``: the stored totals (attention without expired runs)."""
    out = {k: 0 for k in COUNT_KEYS}
    for r in q.summary_counts(tx):
        out[r["key"]] = int(r["n"] or 0)
    return out


def seed_counts(tx) -> None:
    """Schema step: the counter rows (all zero) before any summary row is written."""
    shards = SHARDS if dialect_of(tx).parallel_writers else 1
    for key in COUNT_KEYS:
        for shard in range(shards):
            q.seed_count(tx, key, shard)
