"""Repairs: what ``loopx self-repair fix`` does about each finding, recorded in the goal's ledger.

Goal repairs are events, written as ``capability:self_repair`` (ownership-checked by the core)
in one transaction per goal and step, with each finding re-detected inside that transaction so
a repair never acts on state another writer already changed:

* ``ledger_drift``, ``quota_drift``, ``revision_mismatch`` -> ``capability.repaired``
  ``state_rebuilt``: the goal's current state is rebuilt from its ledger (done first: the ledger
  is the truth, and a rebuild often clears other findings too);
* ``stale_lease`` -> ``lease_released``; ``missing_dependency`` -> ``dependency_dropped``;
  ``dangling_gate`` -> ``gate_widened`` (the gate then blocks the whole goal until a user decides
  it: a repair never removes human control); ``orphan_evidence`` -> ``evidence_unbound``;
* ``abandoned_run`` -> the core's own ``run.abandoned`` event, asked for through
  ``loopx.api.abandon_expired_run`` (the ledger records ``capability:self_repair`` as its actor).

Registry repairs have no goal ledger to go into and are reported in the result only: a schema
behind is migrated by opening the registry for writing; a storage integrity failure is answered
with ``REINDEX``, which cures index corruption; anything else is left in ``remaining`` (restore a
backup).
"""

from __future__ import annotations

from loopx.api import LoopxError

from loopx_self_repair import detectors

NAME = "self_repair"
ACTOR = f"capability:{NAME}"
REBUILD_CODES = ("ledger_drift", "quota_drift", "revision_mismatch")


def fix(url: str | None, *, goal_id: str | None = None, operation_id: str | None = None) -> dict:
    """Repair what the detectors find (one goal or all); returns ``{"ok", "repaired", "remaining"}``."""
    from loopx.api import Registry

    repaired: list[dict] = []
    # A read-only open does not migrate, so this is where an old schema is still visible.
    try:
        with Registry.open(url, readonly=True) as ro:
            behind = detectors.schema_behind(ro.store)
    except LoopxError as err:
        if err.code != "registry_unavailable":
            raise
        behind = []
    with Registry.open(url) as reg:  # opening for writing migrates the schema
        for f in behind:
            if not detectors.schema_behind(reg.store):
                repaired.append({**f.to_json(), "result": f"migrated to version {reg.store.schema_version()}"})
        repaired.extend(_fix_storage(reg))
        with reg.read() as tx:
            goals = detectors.goals_to_check(tx, goal_id)
        for goal in goals:
            repaired.extend(_fix_goal(reg, goal["id"], operation_id))
        remaining = detectors.check(reg, goal_id=goal_id)["findings"]
    return {"ok": not remaining, "repaired": repaired, "remaining": remaining}


def _fix_storage(reg) -> list[dict]:
    found = detectors.storage_integrity(reg.store)
    if not found:
        return []

    from loopx.api import reindex_storage

    reindex_storage(reg)
    if detectors.storage_integrity(reg.store):
        return []  # still broken: it stays in "remaining"
    return [{**found[0].to_json(), "result": "reindexed"}]


def _op(operation_id: str | None, goal_id: str, step: str) -> str | None:
    return None if operation_id is None else f"{operation_id}/{goal_id}/{step}"


def _fix_goal(reg, goal_id: str, operation_id: str | None) -> list[dict]:
    from loopx.api import abandon_expired_run, goal_events, put_state

    out: list[dict] = []

    def drift_of(tx):
        goal = tx.one("SELECT id, status, revision FROM goals WHERE id = ?", (goal_id,))
        replayed, replayed_usage = detectors.replay(goal_events(tx, goal_id))
        return (detectors.revision_mismatch(tx, goal) + detectors.ledger_drift(tx, goal, replayed)
                + detectors.quota_drift(tx, goal, replayed_usage))

    def rebuild(w):
        drift = drift_of(w.tx)  # again, inside the transaction: act only on what is still there
        if not drift:
            return []
        w.emit("capability.repaired", {"namespace": NAME, "repair": "state_rebuilt", "finding": drift[0].code,
                                       "findings": sorted({f.code for f in drift})})
        return [{**f.to_json(), "result": "state_rebuilt", "seq": w.revision} for f in drift]

    # The replay runs outside the write lock first, so a healthy goal never holds up other writers;
    # with an operation id the mutation always runs, so that a retry returns the first result.
    with reg.read() as tx:
        needed = bool(drift_of(tx))
    if needed or operation_id is not None:
        out.extend(reg.mutate(ACTOR, rebuild, goal_id=goal_id, allow_closed=True,
                              operation_id=_op(operation_id, goal_id, "rebuild"),
                              request={"op": "self_repair.rebuild", "goal": goal_id}))

    def repair_rest(w):
        goal_row = w.tx.one("SELECT id, status, revision FROM goals WHERE id = ?", (goal_id,))
        findings = detectors.goal_findings(w.tx, goal_row, w.at, full=False)
        done = []
        for f in findings:
            if f.repair == "run_abandoned":
                abandon_expired_run(w, f.subject)
            elif f.repair in REPAIR_BODIES:
                w.emit("capability.repaired", {"namespace": NAME, "repair": f.repair, "finding": f.code,
                                               **REPAIR_BODIES[f.repair](f)})
            else:
                continue
            done.append({**f.to_json(), "result": f.repair, "seq": w.revision})
        if done:
            put_state(w, NAME, {"last_fix": {"at": w.at, "repaired": [d["code"] for d in done]}})
        return done

    out.extend(reg.mutate(ACTOR, repair_rest, goal_id=goal_id, allow_closed=True,
                          operation_id=_op(operation_id, goal_id, "repair"),
                          request={"op": "self_repair.repair", "goal": goal_id}))
    return out


REPAIR_BODIES = {
    "lease_released": lambda f: {"todo_id": f.subject, "agent": f.details["agent"],
                                 "expired_at": f.details["expired_at"]},
    "dependency_dropped": lambda f: {"todo_id": f.subject, "missing": f.details["missing"]},
    "gate_widened": lambda f: {"gate_id": f.subject, "blocks_was": f.details["blocks"], "blocks": "all"},
    "evidence_unbound": lambda f: {"evidence_id": f.subject, "run_id_was": f.details["run_id"]},
}


def fix_command(goal_id: str) -> str:
    """The complete command a repair contract tells the executor to run."""
    import shlex

    return f"loopx self-repair fix --goal-id {shlex.quote(goal_id)}"
