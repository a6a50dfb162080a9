"""Repairs: what ``loopx self-repair fix`` does about each finding, recorded in the goal's ledger.

Goal repairs are events, written as ``capability:self_repair`` (ownership-checked by the core)
in one transaction per goal and step, with each finding re-detected inside that transaction so
a repair never acts on state another writer already changed:

* ``ledger_drift``, ``quota_drift``, ``revision_mismatch`` -> ``self_repair.repaired``
  ``state_rebuilt``: the goal's current state is rebuilt from its ledger (done first: the ledger
  is the truth, and a rebuild often clears other findings too);
* ``stale_lease`` -> ``lease_released``; ``missing_dependency`` -> ``dependency_dropped``;
  ``dangling_gate`` -> ``gate_widened`` (the gate then blocks the whole goal until a user decides
  it: a repair never removes human control); ``orphan_evidence`` -> ``evidence_unbound``;
* ``abandoned_run`` -> the core's own ``run.abandoned`` event, asked for through
  ``loopx.api.abandon_expired_run`` (the ledger records ``capability:self_repair`` as its actor).

A rebuild never removes human control and never hides loss: a gate, a claim, an approval or
evidence that exists in current state but not in the ledger is *kept* (the repair event carries
the rows, so a replay reproduces them) and the goal then waits for a person
(``ask_user``/``repair_needs_user``, cleared by ``loopx self-repair accept``); sequence numbers
found lost are recorded in the repair event (``lost``), which takes a new number after the last
one the goal ever recorded (the core's ``capability.loss_recorded``, through ``loopx.api.record_loss``). An event whose content no longer matches its hash is never copied
into state: that finding stays until a person restores a backup. A goal row deleted while its
ledger survives is rebuilt from the ledger. ``fix`` copies an SQLite registry to
``<file>.bak-<time>`` before it writes anything; ``--dry-run`` shows the plan and writes nothing.

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
#: This plugin's event kind (``events.py``); older ledgers hold it as ``capability.repaired``.
KIND = "self_repair.repaired"
REBUILD_CODES = ("ledger_drift", "quota_drift", "revision_mismatch")


def fix(url: str | None, *, goal_id: str | None = None, operation_id: str | None = None,
        dry_run: bool = False) -> dict:
    """Repair what the detectors find (one goal or all); returns ``{"ok", "repaired", "remaining"}``
    (and ``backup``: where the registry was copied first). ``dry_run``: ``{"plan", ...}``, no writes."""
    from loopx.api import Registry

    if dry_run:
        with Registry.open(url, readonly=True) as ro:
            report = detectors.check(ro, goal_id=goal_id)
        plan = [{**f, "would": f["repair"] or "nothing (needs a person or a backup)"} for f in report["findings"]]
        return {"ok": report["ok"], "dry_run": True, "plan": plan, "repaired": [], "remaining": report["findings"]}
    repaired: list[dict] = []
    # A read-only open does not migrate, so this is where an old schema is still visible.
    try:
        with Registry.open(url, readonly=True) as ro:
            behind = detectors.schema_behind(ro.store)
            needed = bool(behind) or not detectors.check(ro, goal_id=goal_id)["ok"]
    except LoopxError as err:
        if err.code != "registry_unavailable":
            raise
        behind, needed = [], True
    with Registry.open(url, create=False) as reg:
        backup = _backup(reg) if needed else None
        # opening for writing migrated the schema
        for f in behind:
            if not detectors.schema_behind(reg.store):
                repaired.append({**f.to_json(), "result": f"migrated to version {reg.store.schema_version()}"})
        repaired.extend(_fix_storage(reg))
        if goal_id is None:
            repaired.extend(_restore_goal_rows(reg))
        with reg.read() as tx:
            goals = detectors.goals_to_check(tx, goal_id)
        from loopx.api import progress

        # A bar on stderr when it is a terminal: a large registry takes a while.
        with progress(len(goals), "repairing goals") as bar:
            for goal in goals:
                repaired.extend(_fix_goal(reg, goal["id"], operation_id))
                bar.advance()
        remaining = detectors.check(reg, goal_id=goal_id)["findings"]
    out = {"ok": not remaining, "repaired": repaired, "remaining": remaining}
    if backup is not None:
        out["backup"] = backup
    return out


def _backup(reg) -> str | None:
    """Copy an SQLite registry next to itself before repairing (online backup: consistent).

    The name is reserved atomically (``O_EXCL``), so two repairs at once never pick the same
    one; on a full disk the half-written copy is removed and the repair stops with
    ``disk_full`` before anything is repaired.
    """
    import os
    import secrets
    import sqlite3

    from loopx.api import LoopxError, now

    path = getattr(reg.store, "path", None)
    if reg.store.dialect != "sqlite" or path is None or str(path) == ":memory:":
        return None  # PostgreSQL: back up with pg_dump or `loopx registry copy`
    stamp = now().replace(":", "").replace("-", "").split(".")[0]
    dest = None
    for n in range(1, 1000):
        candidate = path.with_name(f"{path.name}.bak-{stamp}" + (f"-{n}" if n > 1 else ""))
        try:
            os.close(os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            continue
        except OSError as exc:
            if _full(exc, path):
                raise _no_room(path, exc) from None
            raise LoopxError("registry_unavailable", f"cannot back up {path} before repairing: {exc}") from None
        dest = candidate
        break
    if dest is None:  # a thousand repairs in one second: give this one a random suffix
        dest = path.with_name(f"{path.name}.bak-{stamp}-{secrets.token_hex(4)}")
    try:
        src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            dst = sqlite3.connect(dest)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
    except (OSError, sqlite3.Error) as exc:
        for leftover in (dest, dest.with_name(dest.name + "-journal")):
            try:
                leftover.unlink()
            except OSError:
                pass
        raise _no_room(path, exc) if _full(exc, path) else LoopxError(
            "registry_unavailable", f"could not back up {path} before repairing ({exc}); nothing was repaired") \
            from None
    return str(dest)


def _full(exc, path) -> bool:
    import errno

    if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return True
    text = str(exc)
    return "disk is full" in text or "disk I/O error" in text


def _no_room(path, exc):
    from loopx.api import LoopxError

    return LoopxError("disk_full", f"no space left to back up {path} before repairing ({exc}); nothing was"
                      " repaired and no backup was left behind: free some space and run it again")


def _restore_goal_rows(reg) -> list[dict]:
    """Goals whose row was deleted while their ledger survives: rebuilt from the ledger."""
    from loopx.api import Writer, seal_goal

    with reg.read() as tx:
        found = detectors.missing_goal_rows(tx)
    out = []
    for f in found:
        def work(tx, f=f):
            if tx.one("SELECT id FROM goals WHERE id = ?", (f.goal_id,)) is not None:
                return []
            w = Writer(tx, ACTOR, None, None)
            w.goal_id, w._revision = f.goal_id, None
            done = _rebuild(w, [f])
            seal_goal(tx, f.goal_id)
            return done

        out.extend(reg.store.write(work))
    return out


def _kept(live: dict, replayed: dict) -> dict:
    """Rows of human control in ``live`` state that the ``replayed`` state would lose.

    A gate missing or decided differently, a todo claim missing or held by someone else, and
    evidence missing: each is kept as it stands in state, for a person to confirm.
    """
    def by_key(table, rows):
        return {detectors._keys(table, r): r for r in rows}

    kept: dict[str, list] = {}
    want = {t: by_key(t, replayed.get(t, [])) for t in ("gates", "todos", "evidence")}
    for r in live.get("gates", []):
        w = want["gates"].get(detectors._keys("gates", r))
        if w is None or any(r[c] != w[c] for c in ("status", "blocks", "decided_by", "decided_at")):
            kept.setdefault("gates", []).append(r)
    for r in live.get("todos", []):
        w = want["todos"].get(detectors._keys("todos", r))
        if r["claim_agent"] is not None and (w is None or any(r[c] != w[c] for c in (
                "claim_agent", "claim_run_id", "claim_expires_at", "epoch"))):
            kept.setdefault("todos", []).append(r)
    for r in live.get("evidence", []):
        if detectors._keys("evidence", r) not in want["evidence"]:
            kept.setdefault("evidence", []).append(r)
    return kept


def _rebuild(w, findings: list) -> list[dict]:
    """Rebuild ``w``'s goal from its ledger, keeping human control and recording loss."""
    from loopx.api import chain_acknowledged, chain_head, goal_events, goal_rows, verify_chain

    tx, goal_id = w.tx, w.goal_id
    if any(f.code == "event_tampered" for f in findings):
        return []  # never copy an edited event into state
    rows = tx.query("SELECT seq, kind, body, prev_hash, hash FROM events WHERE goal_id = ? ORDER BY seq", (goal_id,))
    replayed, _ = detectors.replay(goal_events(tx, goal_id))
    kept = _kept(goal_rows(tx, goal_id), replayed)
    sealed = chain_head(tx, goal_id)
    top = max(rows[-1]["seq"] if rows else 0, sealed["seq"] if sealed else 0)
    recorded, _ = chain_acknowledged(rows)
    seqs = {r["seq"] for r in rows}
    lost = [n for n in range(1, top + 1) if n not in seqs and n not in recorded]
    broken = sorted({p.seq for p in verify_chain(tx, goal_id) if p.code == "chain_broken" and p.seq})
    if lost or broken:
        from loopx.api import record_loss

        # First: the event right after a gap must be the one naming the lost numbers.
        record_loss(w, lost=lost, acknowledged=broken)
    body = {"namespace": NAME, "repair": "state_rebuilt", "finding": findings[0].code,
            "findings": sorted({f.code for f in findings}), "lost": lost}
    if kept:
        body["kept"] = kept
    w.rebuilt = True
    w.emit(KIND, body)
    result = "state_rebuilt"
    if kept:
        from loopx.api import put_state

        what = ", ".join(f"{len(v)} {k}" for k, v in sorted(kept.items()))
        message = (f"goal {goal_id}: the ledger lacked {what} that current state holds; the repair kept them."
                   f" A user checks them (`loopx gate list`, `loopx evidence list`) and runs"
                   f" `{accept_command(goal_id)}`")
        put_state(w, NAME, {"needs_user": {"at": w.at, "kept": {k: [detectors._keys(k, r) for r in v]
                                                                for k, v in kept.items()},
                                            "lost": lost, "message": message}})
        result = "state_rebuilt, kept for the user: " + what
    return [{**f.to_json(), "result": result, "seq": w.revision, "lost": lost} for f in findings]


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
        return (detectors.chain_findings(tx, goal) + detectors.ledger_gaps(tx, goal)
                + detectors.revision_mismatch(tx, goal) + detectors.ledger_drift(tx, goal, replayed)
                + detectors.quota_drift(tx, goal, replayed_usage))

    def rebuild(w):
        drift = drift_of(w.tx)  # again, inside the transaction: act only on what is still there
        if not drift:
            return []
        return _rebuild(w, drift)

    def escape(w):
        goal_row = w.tx.one("SELECT id, status, revision FROM goals WHERE id = ?", (goal_id,))
        found = detectors.unreadable_data(w.tx, goal_row)
        return _escape(w, found) if found else []

    with reg.read() as tx:
        unreadable = detectors.unreadable_data(tx, {"id": goal_id})
    if unreadable:
        out.extend(reg.mutate(ACTOR, escape, goal_id=goal_id, allow_closed=True,
                              operation_id=_op(operation_id, goal_id, "escape"),
                              request={"op": "self_repair.escape", "goal": goal_id}))

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
                w.emit(KIND, {"namespace": NAME, "repair": f.repair, "finding": f.code,
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


def _escape(w, found: list) -> list[dict]:
    """Rewrite event bodies holding NaN/Infinity or lone surrogates escaped, keep each original
    as evidence, re-chain, and rebuild the state from the readable ledger."""
    from loopx.api import escape_event_bodies, new_id

    originals = escape_event_bodies(w, [f.details["seq"] for f in found])
    evidence_id = new_id("evidence")
    w.rebuilt = True
    w.emit("evidence.added", {"evidence_id": evidence_id, "run_id": None, "kind": "repair.original_bytes",
                              "summary": f"the original text of {len(originals)} event(s) rewritten readable",
                              "data": {"events": originals}})
    w.emit(KIND, {"namespace": NAME, "repair": "data_escaped", "finding": "unreadable_data",
                                   "events": [o["seq"] for o in originals], "evidence_id": evidence_id})
    return [{**f.to_json(), "result": f"data_escaped (originals in evidence {evidence_id})", "seq": w.revision}
            for f in found]


def accept(reg, goal_id: str, *, operation_id: str | None = None) -> dict:
    """A user confirms what a repair kept (``self-repair accept``): the goal may run again."""
    from loopx.api import check_id, put_state

    check_id("goal", goal_id)

    def work(w):
        row = w.tx.one("SELECT value FROM capability_state WHERE goal_id = ? AND namespace = ? AND key = ?",
                       (goal_id, NAME, "needs_user"))
        if row is None:
            return {"goal_id": goal_id, "accepted": False, "message": "nothing waits for a user"}
        w.emit("capability.state_deleted", {"namespace": NAME, "keys": ["needs_user"]})
        put_state(w, NAME, {"last_accept": {"at": w.at, "by": "user"}})
        return {"goal_id": goal_id, "accepted": True}

    return reg.mutate(ACTOR, work, goal_id=goal_id, allow_closed=True, operation_id=operation_id,
                      request={"op": "self_repair.accept", "goal": goal_id})


def accept_command(goal_id: str) -> str:
    """The command a user runs to confirm what a repair kept."""
    import shlex

    return f"loopx self-repair accept --goal-id {shlex.quote(goal_id)}"


def fix_command(goal_id: str) -> str:
    """The complete command a repair contract tells the executor to run."""
    import shlex

    return f"loopx self-repair fix --goal-id {shlex.quote(goal_id)}"
