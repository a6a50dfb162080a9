"""What ``loopx self-repair fix`` does about each finding, through LoopX's repair API only (one
``loopx.api.RepairSession``, :func:`detectors.session`).

Goal repairs are events, written as ``capability:self_repair`` (the core checks ownership and
the declared repairs) in one transaction per goal and step, each finding detected again inside
that transaction so a repair never acts on state another writer already changed:

* unreadable event bodies -> ``data_escaped`` (``RepairSession.escape``);
* ``ledger_drift``, ``quota_drift``, ``revision_mismatch``, chain findings, ledger gaps ->
  ``state_rebuilt`` (``RepairSession.rebuild``: the ledger is the truth, and a rebuild often
  clears other findings too). What it kept (a gate, claim, approval or evidence the ledger
  lacked) makes the goal wait for a person: ``needs_user`` in this capability's state, answered
  ``ask_user``/``repair_needs_user`` by the veto until ``loopx self-repair accept``;
* everything else with a repair (``RepairSession.propose``, ``apply``):
  ``lease_released``, ``dependency_dropped``, ``gate_widened`` (the gate then blocks the whole
  goal until a user decides it), ``evidence_unbound``, and ``run_abandoned`` (the core's own
  ``run.abandoned``).

A goal row deleted while its ledger survives is rebuilt from the ledger
(``RepairSession.restore_goal_rows``). ``fix`` copies an SQLite registry to ``<file>.bak-<time>``
(``RepairSession.backup``) before it writes anything; ``--dry-run`` shows the plan and
writes nothing. Registry repairs have no goal ledger to go into and are reported in the result
only: a schema behind is migrated by opening the registry for writing; a storage integrity
failure is answered with ``REINDEX``; anything else stays in ``remaining`` (restore a backup).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopx.api import LoopxError

from loopx_self_repair import detectors

if TYPE_CHECKING:
    from loopx.api import Registry, Writer

NAME = detectors.NAMESPACE


def fix(url: str | None, *, goal_id: str | None = None, operation_id: str | None = None,
        dry_run: bool = False) -> dict[str, Any]:
    """Repair what the detectors find (one goal or all); returns ``{"ok", "repaired", "remaining"}``
    (and ``backup``: where the registry was copied first). ``dry_run``: ``{"plan", ...}``, no writes."""
    from loopx.api import Registry, cli

    repair = detectors.session()

    if dry_run:
        with Registry.open(url, readonly=True) as ro:
            report = detectors.check(ro, goal_id=goal_id)
        plan = [{**f, "would": f["repair"] or "nothing (needs a person or a backup)"} for f in report["findings"]]
        return {"ok": report["ok"], "dry_run": True, "plan": plan, "repaired": [], "remaining": report["findings"]}
    repaired: list[dict[str, Any]] = []
    # A read-only open does not migrate, so this is where an old schema is still visible.
    try:
        with Registry.open(url, readonly=True) as ro:
            behind = repair.schema(ro)
            needed = bool(behind) or not detectors.check(ro, goal_id=goal_id)["ok"]
    except LoopxError as err:
        if err.code != "registry_unavailable":
            raise
        behind, needed = [], True
    with Registry.open(url, create=False) as reg:
        backup = repair.backup(reg) if needed else None
        # opening for writing migrated the schema
        for f in behind:
            if not repair.schema(reg):
                repaired.append({**f.to_json(), "result": f"migrated to version {f.details['current']}"})
        repaired.extend(_fix_storage(reg))
        if goal_id is None:
            repaired.extend(_restore_goal_rows(reg))
        with reg.read() as tx:
            goals = repair.goal_ids(tx, goal_id)
        # A bar on stderr when it is a terminal: a large registry takes a while.
        with cli.progress(len(goals), "repairing goals") as bar:
            for gid in goals:
                repaired.extend(_fix_goal(reg, gid, operation_id))
                bar.advance()
        remaining = detectors.check(reg, goal_id=goal_id)["findings"]
    out = {"ok": not remaining, "repaired": repaired, "remaining": remaining}
    if backup is not None:
        out["backup"] = backup
    return out


def _fix_storage(reg: Registry) -> list[dict[str, Any]]:
    repair = detectors.session()
    found = repair.storage(reg)
    if not found:
        return []
    repair.reindex(reg)
    if repair.storage(reg):
        return []  # still broken: it stays in "remaining"
    return [{**found[0].to_json(), "result": "reindexed"}]


def _restore_goal_rows(reg: Registry) -> list[dict[str, Any]]:
    """Goals whose row was deleted while their ledger survives: rebuilt from the ledger."""
    found = detectors.session().restore_goal_rows(reg, after=_after_restore)
    return [row for rows in found for row in rows]


def _after_restore(w: Writer, done: dict[str, Any]) -> list[dict[str, Any]]:
    assert w.goal_id is not None  # each writer is opened on the goal it restores
    return _rebuilt(done, w.goal_id, w)


def _rebuilt(done: dict[str, Any], goal_id: str, w: Writer | None = None) -> list[dict[str, Any]]:
    """The result rows of one rebuild; with the writer ``w``, a rebuild that kept rows makes the
    goal wait for a person (``needs_user``, in the same transaction)."""
    kept, lost = done["kept"], done["lost"]
    result = "state_rebuilt"
    if kept:
        what = ", ".join(f"{len(v)} {k}" for k, v in sorted(kept.items()))
        result = "state_rebuilt, kept for the user: " + what
        if w is not None:
            from loopx.api import state

            message = (f"goal {goal_id}: the ledger lacked {what} that current state holds; the repair kept them."
                       f" A user checks them (`loopx gate list`, `loopx evidence list`) and runs"
                       f" `{accept_command(goal_id)}`")
            state.put(w, NAME, {"needs_user": {"at": w.at, "kept": done["kept_keys"], "lost": lost,
                                               "message": message}})
    return [{**f.to_json(), "result": result, "seq": done["seq"], "lost": lost} for f in done["findings"]]


def _op(operation_id: str | None, goal_id: str, step: str) -> str | None:
    return None if operation_id is None else f"{operation_id}/{goal_id}/{step}"


def _fix_goal(reg: Registry, goal_id: str, operation_id: str | None) -> list[dict[str, Any]]:
    from loopx.api import state

    session = detectors.session()
    out: list[dict[str, Any]] = []

    def escape(w: Writer) -> list[dict[str, Any]]:
        done = session.escape(w)  # detected again inside the transaction
        if done is None:
            return []
        return [{**f.to_json(), "result": f"data_escaped (originals in evidence {done['evidence_id']})",
                 "seq": done["seq"]} for f in done["findings"]]

    def rebuild(w: Writer) -> list[dict[str, Any]]:
        done = session.rebuild(w)  # drift detected again inside the transaction
        return [] if done is None else _rebuilt(done, goal_id, w)

    with reg.read() as tx:
        unreadable = bool(session.unreadable(tx, goal_id))
    if unreadable:
        out.extend(reg.mutate(session.actor, escape, goal_id=goal_id, allow_closed=True,
                              operation_id=_op(operation_id, goal_id, "escape"),
                              request={"op": "self_repair.escape", "goal": goal_id}))

    # The replay runs outside the write lock first, so a healthy goal never holds up other writers;
    # with an operation id the mutation always runs, so that a retry returns the first result.
    with reg.read() as tx:
        needed = bool(session.drift(tx, goal_id))
    if needed or operation_id is not None:
        out.extend(reg.mutate(session.actor, rebuild, goal_id=goal_id, allow_closed=True,
                              operation_id=_op(operation_id, goal_id, "rebuild"),
                              request={"op": "self_repair.rebuild", "goal": goal_id}))

    def repair_rest(w: Writer) -> list[dict[str, Any]]:
        done = []
        for f in session.goal(w.tx, goal_id, now=w.at, full=False):
            repair = session.propose(f)
            if repair is None or repair.kind in ("state_rebuilt", "data_escaped"):
                continue
            seq = session.apply(w, repair)
            done.append({**f.to_json(), "result": repair.kind, "seq": seq})
        if done:
            state.put(w, NAME, {"last_fix": {"at": w.at, "repaired": [d["code"] for d in done]}})
        return done

    out.extend(reg.mutate(session.actor, repair_rest, goal_id=goal_id, allow_closed=True,
                          operation_id=_op(operation_id, goal_id, "repair"),
                          request={"op": "self_repair.repair", "goal": goal_id}))
    return out


def accept(reg: Registry, goal_id: str, *, operation_id: str | None = None) -> dict[str, Any]:
    """A user confirms what a repair kept (``self-repair accept``): the goal may run again."""
    from loopx.api import ids, state

    ids.check("goal", goal_id)

    def work(w: Writer) -> dict[str, Any]:
        if "needs_user" not in state.get(w.tx, goal_id, NAME):
            return {"goal_id": goal_id, "accepted": False, "message": "nothing waits for a user"}
        state.drop(w, NAME, ["needs_user"])
        state.put(w, NAME, {"last_accept": {"at": w.at, "by": "user"}})
        return {"goal_id": goal_id, "accepted": True}

    result: dict[str, Any] = reg.mutate(detectors.session().actor, work, goal_id=goal_id, allow_closed=True,
                                        operation_id=operation_id, request={"op": "self_repair.accept", "goal": goal_id})
    return result


def accept_command(goal_id: str) -> str:
    """The command a user runs to confirm what a repair kept."""
    import shlex

    return f"loopx self-repair accept --goal-id {shlex.quote(goal_id)}"


def fix_command(goal_id: str) -> str:
    """The complete command a repair contract tells the executor to run."""
    import shlex

    return f"loopx self-repair fix --goal-id {shlex.quote(goal_id)}"
