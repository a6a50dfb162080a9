"""What the goal view adds for looking back over time: the dashboard's charts and the last contract.

* ``history.runs`` - the newest runs (oldest first): when each opened and finished, its state and
  outcome, its duration and how much evidence it recorded (the run timeline);
* ``history.usage`` - what the goal had used after each of those runs, cumulatively (the budget
  burn-down: each limit minus these, against time);
* ``history.rewards`` - the newest rewards (oldest first) with the running mean (the reward trend);
* ``last_contract`` - the newest contract filed (decision, reasons, primary action, steps);
* ``decide`` on each pending gate - the exact commands that approve or reject it.

Everything is bounded (``HISTORY_RUNS``, ``HISTORY_REWARDS``) so the cost of a goal view does not
grow with a goal's age; the cumulative usage starts from the totals of the runs before the window.
"""

from __future__ import annotations

import json

from loopx.values.clock import seconds_between
from loopx.store.queries import status as q

HISTORY_RUNS = 100
HISTORY_REWARDS = 200


def history(tx, goal_id: str, used: dict, at: str) -> dict:
    """``{"runs", "usage", "rewards"}`` for ``goal_id``; ``used`` is the goal's total usage now."""
    rows = q.history_runs(tx, goal_id, HISTORY_RUNS)
    rows.reverse()
    counts = {r["run_id"]: int(r["n"]) for r in q.evidence_counts(tx, [r["id"] for r in rows])}
    runs = []
    for r in rows:
        state = r["status"]
        if state == "open" and r["expires_at"] < at:
            state = "abandoned"  # past its lease, whether or not anyone has said so yet
        end = r["finished_at"] or (at if state == "open" else None)
        runs.append({
            "id": r["id"], "agent": r["agent"], "state": state, "outcome": r["outcome"],
            "opened_at": r["opened_at"], "finished_at": r["finished_at"],
            "duration_seconds": round(max(0.0, seconds_between(r["opened_at"], end)), 3) if end else None,
            "tokens": int(r["tokens"]), "cost": float(r["cost"]), "evidence": counts.get(r["id"], 0),
        })
    return {"runs": runs, "usage": _burn(runs, used), "rewards": _rewards(tx, goal_id)}


def _burn(runs: list[dict], used: dict) -> list[dict]:
    """Cumulative usage after each run in ``runs``, ending at ``used`` (the goal's totals now)."""
    # The window's own charges; what came before it is the rest of the totals.
    wall = [r["duration_seconds"] or 0.0 if r["state"] in ("finished", "abandoned") and r["finished_at"] else 0.0
            for r in runs]
    turns = used["turns"] - len(runs)
    tokens = used["tokens"] - sum(r["tokens"] for r in runs)
    cost = used["cost"] - sum(r["cost"] for r in runs)
    wall_total = used["wall_seconds"] - sum(wall)
    points = []
    for r, w in zip(runs, wall):
        turns += 1
        tokens += r["tokens"]
        cost += r["cost"]
        wall_total += w
        points.append({"at": r["finished_at"] or r["opened_at"], "run_id": r["id"], "turns": turns,
                       "tokens": tokens, "cost": round(cost, 6), "wall_seconds": round(max(0.0, wall_total), 3)})
    return points


def _rewards(tx, goal_id: str) -> list[dict]:
    rows = q.history_rewards(tx, goal_id, HISTORY_REWARDS)
    rows.reverse()
    out, total = [], 0.0
    for n, r in enumerate(rows, 1):
        total += float(r["score"])
        out.append({"at": r["created_at"], "id": r["id"], "run_id": r["run_id"], "score": float(r["score"]),
                    "mean": round(total / n, 4)})
    return out


def last_contract(tx, goal_id: str) -> dict | None:
    """The newest contract filed for the goal (contracts are filed when should-run opens or renews a run)."""
    row = q.newest_contract(tx, goal_id)
    if row is None:
        return None
    doc = json.loads(row["document"])
    cli = doc.get("cli_channel") or {}
    agent = doc.get("agent_channel") or {}
    user = doc.get("user_channel") or {}
    return {
        "contract_id": row["id"], "run_id": row["run_id"], "issued_at": row["issued_at"],
        "expires_at": row["expires_at"],
        # A filed contract is always a `run` decision: the others open nothing and are not stored.
        "decision": doc.get("decision", "run"),
        "reasons": doc.get("reasons", []),
        "primary_action": agent.get("primary_action"),
        "steps": _steps(cli),
        "next_cli_actions": cli.get("next_cli_actions", []),
        "next_user_actions": user.get("next_user_actions", []),
    }


def _steps(cli: dict) -> list[dict]:
    """The contract's steps, each with ``command``: the shell-quoted line a person can read and
    paste (contracts filed before steps existed have only ``next_cli_actions``)."""
    import shlex

    steps = cli.get("steps")
    if not steps:
        return [{"command": c} for c in cli.get("next_cli_actions", [])]
    return [{**s, "command": shlex.join(s["argv"])} if isinstance(s.get("argv"), list) else s for s in steps]


def decide_commands(gate_json: dict) -> dict:
    """``{"approve": cmd, "reject": cmd}`` for a pending gate, exactly as a user types them."""
    from loopx.domain.gates import decision_commands
    from loopx.model import Gate, from_json

    approve, reject = decision_commands(from_json(gate_json, Gate))
    return {"approve": approve, "reject": reject}
