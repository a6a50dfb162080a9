"""Reward events: the ``human_reward`` overlay. Only a user scores a run; the run is never edited."""

from __future__ import annotations

from loopx.store.queries import projections as q

def added(tx, event):
    """``body = {"reward_id", "run_id", "score", "comment"?}``; the author is the event's actor."""
    b = event.body
    q.insert_reward(
        tx, (b["reward_id"], event.goal_id, b["run_id"], float(b["score"]), b.get("comment"), event.actor, event.at))
