"""Run events, written only by the core: should-run opens a run (and files its contract),
renews the contract of an open run whose inputs changed, ``run finish`` closes it, and an open
run found past its expiry is marked abandoned."""

from __future__ import annotations

from loopx.ledger import usage_counts
from loopx.ledger.events.body_text import member_text
from loopx.ledger.events.roles import CORE
from loopx.store.queries import projections as q


def _file_contract(tx, event, run_id):
    doc = event.body["contract"]
    q.insert_contract(
        tx,
        (doc["contract_id"], event.goal_id, run_id, doc["fingerprint"], doc["issued_at"], doc["expires_at"],
         member_text(event, "contract")),
    )


def opened(tx, event):
    """``body = {"run_id", "agent", "expires_at", "contract": {...}}``; charges one turn (the run row)."""
    b = event.body
    doc = b["contract"]
    q.insert_open_run(
        tx, (b["run_id"], event.goal_id, b["agent"], doc["contract_id"], doc["fingerprint"], event.at, b["expires_at"]))
    _file_contract(tx, event, b["run_id"])
    usage_counts.opened(tx, event.goal_id, event.at)


def renewed(tx, event):
    """``body = {"run_id", "contract": {...}}``: a fresh contract for an open run (no new turn)."""
    doc = event.body["contract"]
    q.renew_run(tx, event.body["run_id"], doc["contract_id"], doc["fingerprint"], doc["expires_at"])
    _file_contract(tx, event, event.body["run_id"])


def finished(tx, event):
    """``body = {"run_id", "outcome", "tokens", "cost", "handoff"}``; the run ends at the event's time."""
    b = event.body
    before = _charged(tx, b["run_id"])
    q.finish_run(tx, b["run_id"], event.at, b["outcome"], b.get("tokens", 0), b.get("cost", 0.0), b.get("handoff"))
    _recharge(tx, event.goal_id, before, finished_at=event.at, tokens=b.get("tokens", 0), cost=b.get("cost", 0.0))


def check_only_expired(writer, body):
    # A capability may ask for this core transition (self-repair records runs the core already
    # treats as abandoned), never use it to end a live run.
    if writer.actor == CORE:
        return
    from loopx.values.errors import LoopxError

    row = q.run_status(writer.tx, body.get("run_id"), writer.goal_id)
    if row is None:
        raise LoopxError("run_not_found", f"goal {writer.goal_id} has no run {body.get('run_id')}")
    if row["status"] != "open" or row["expires_at"] > writer.at:
        raise LoopxError("actor_forbidden", f"{writer.actor} may abandon only an open run past its expiry; "
                         f"run {body['run_id']} is {row['status']} until {row['expires_at']}")


def abandoned(tx, event):
    """``body = {"run_id"}``: an open run past its expiry; its wall time is charged up to the expiry.

    Written by the core (should-run) or, through ``loopx.api.RepairSession.abandon_expired_run``, by a
    capability, which the ledger then names as the actor. With ``"reason": "owner_gone"`` (the
    process that owned the run died before its lease ran out, :mod:`loopx.domain.claims`) the run is
    closed at the event's time, not charged its whole lease."""
    before = _charged(tx, event.body["run_id"])
    if event.body.get("reason"):
        q.abandon_run_now(tx, event.body["run_id"], event.at)
        if before is not None:
            _recharge(tx, event.goal_id, before, finished_at=min(before["expires_at"], event.at))
        return
    q.abandon_run_at_expiry(tx, event.body["run_id"])
    if before is not None:
        _recharge(tx, event.goal_id, before, finished_at=before["expires_at"])


def _charged(tx, run_id):
    return q.run_charges(tx, run_id)


def _recharge(tx, _goal_id, before, **changed):
    # The usage counters move by what the run's change did to its charges (loopx.ledger.usage_counts).
    if before is None:
        return  # no such run: the UPDATE changed nothing
    usage_counts.charge(tx, before["goal_id"], before, {**before, **changed})
