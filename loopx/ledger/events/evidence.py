"""Evidence events: append-only observations, bound to a run when there is one."""

from __future__ import annotations

from loopx.values import jsonsafe
from loopx.store.queries import projections as q


def check_bounded(writer, body):
    from loopx.ledger import caps

    caps.check_evidence(writer.tx, body)  # evidence_too_large, before the event is written


def added(tx, event):
    """``body = {"evidence_id", "run_id", "kind", "summary", "data"?, "file_path"?, "file_sha256"?}``."""
    b = event.body
    data = b.get("data")
    q.insert_evidence(
        tx,
        (b["evidence_id"], event.goal_id, b.get("run_id"), b["kind"], b["summary"], event.actor, event.at,
         None if data is None else jsonsafe.plain_sorted(data), b.get("file_path"), b.get("file_sha256")),
    )
