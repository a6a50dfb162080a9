"""Repairs: the writing half of the repair API (:mod:`loopx.domain.damage` is the reading half).

A repair capability (one that declares ``repairs=`` in its :class:`~loopx.seam.capabilities.Capability`)
changes a goal's current state only through these functions, inside ``reg.mutate(ACTOR, ...)``
where ``ACTOR`` is ``capability:NAME``: each records an event in the goal's ledger, in the
mutation's one transaction, and the event's guard checks that the acting capability owns the
event's namespace and declared the repair. No repair removes human control or hides loss.

The vocabulary (:data:`loopx.ledger.events.repair.KINDS`): ``state_rebuilt`` (current state rebuilt from the ledger, keeping
a gate, claim or evidence the ledger lacks, :func:`rebuild`), ``data_escaped`` (event bodies older
versions stored with NaN/Infinity or lone surrogates rewritten escaped, :func:`escape`),
``lease_released``, ``dependency_dropped``, ``gate_widened``, ``evidence_unbound`` (:func:`apply`).
A capability records them as its own event kind (``NAME.repaired``), registered through
``loopx_register_event_kinds`` with :func:`loopx.ledger.events.repair.apply_event` and :func:`guard_event`, so that its
events replay like every other. It proposes a repair for a finding with :func:`propose`.
"""

from __future__ import annotations

import json

import attrs

from loopx.values.errors import LoopxError
from loopx.ledger.events.repair import KINDS, REBUILDS


@attrs.frozen
class Repair:
    """One proposed repair of one goal (:func:`propose`): ``kind`` (:data:`KINDS` or
    ``run_abandoned``), the ``finding`` code it cures, its ``subject`` (a todo, gate, evidence or
    run id) and ``body``, the fields its event records."""

    kind: str
    goal_id: str
    finding: str
    subject: str | None = None
    body: dict = attrs.field(factory=dict)

    def to_json(self) -> dict:
        """JSON-ready repair."""
        return attrs.asdict(self)


def guard_event(writer, body) -> None:
    """The ``guard`` of a capability's repair event kind (run on every write, never on replay):
    refuse (``ownership_violation``) unless the acting capability owns the body's ``namespace``
    and declared the repair; (``invalid_argument``) a repair that is not one of :data:`KINDS`;
    and (``repair_not_needed``) a one-row repair of damage the goal does not have, so a repair
    capability can never release a live lease or widen a gate whose todo exists."""
    from loopx.seam.capabilities import check_owner

    cap = check_owner(writer.actor, body.get("namespace"))
    if body.get("repair") not in KINDS:
        raise LoopxError("invalid_argument", f"unknown repair {body.get('repair')!r}; known: {', '.join(sorted(KINDS))}")
    if body["repair"] not in cap.repairs:
        raise LoopxError("ownership_violation", f"capability {cap.name!r} did not declare the repair {body['repair']!r}",
                         capability=cap.name, repair=body["repair"])
    _check_needed(writer, body)


#: For each one-row repair: the detector that must still see the damage, and the body's subject.
_NEEDED = {
    "lease_released": ("stale_leases", "todo_id"),
    "dependency_dropped": ("missing_dependencies", "todo_id"),
    "gate_widened": ("dangling_gates", "gate_id"),
    "evidence_unbound": ("orphan_evidence", "evidence_id"),
}


def _check_needed(writer, body) -> None:
    from loopx.domain import damage

    found = _NEEDED.get(body["repair"])
    if found is None:
        return  # a rebuild replays the ledger: harmless on a healthy goal
    detector, field = found
    goal = {"id": writer.goal_id}
    detect = getattr(damage, detector)
    findings = detect(writer.tx, goal, writer.at) if detector == "stale_leases" else detect(writer.tx, goal)
    subject = body.get(field)
    match = [f for f in findings if f.subject == subject]
    if body["repair"] == "dependency_dropped" and match:
        missing = body.get("missing")
        if not isinstance(missing, list) or not set(missing) <= set(match[0].details["missing"]):
            match = []
    if not match:
        raise LoopxError("repair_not_needed", f"goal {writer.goal_id} shows no damage on {subject!r} that"
                         f" {body['repair']} repairs ({detector.replace('_', ' ')}): nothing was recorded")


# --- proposing and applying ---------------------------------------------------------------------

_BODIES = {
    "lease_released": lambda f: {"todo_id": f.subject, "agent": f.details["agent"],
                                 "expired_at": f.details["expired_at"]},
    "dependency_dropped": lambda f: {"todo_id": f.subject, "missing": f.details["missing"]},
    "gate_widened": lambda f: {"gate_id": f.subject, "blocks_was": f.details["blocks"], "blocks": "all"},
    "evidence_unbound": lambda f: {"evidence_id": f.subject, "run_id_was": f.details["run_id"]},
    "run_abandoned": lambda f: {"run_id": f.subject},
}


def propose(finding) -> Repair | None:
    """The repair of one :class:`loopx.domain.damage.Finding` of a goal, or ``None`` when only a person
    (or a backup) can cure it. Rebuilds (``state_rebuilt``, ``data_escaped``) carry no body:
    :func:`rebuild` and :func:`escape` work it out inside their transaction."""
    if finding.goal_id is None or finding.repair is None or finding.repair not in (*KINDS, "run_abandoned"):
        return None
    body = _BODIES[finding.repair](finding) if finding.repair in _BODIES else {}
    return Repair(finding.repair, finding.goal_id, finding.code, finding.subject, body)


def _namespace(kind: str) -> str:
    return kind.split(".", 1)[0]


def apply(w, repair: Repair, *, kind: str) -> int:
    """Record ``repair`` on the writer's goal as an event of the capability's repair ``kind`` (or,
    for ``run_abandoned``, the core's own ``run.abandoned``); returns the event's number.

    Inside ``reg.mutate("capability:NAME", ...)``: the guard checks the capability. A rebuild goes
    through :func:`rebuild` or :func:`escape` instead (``invalid_argument`` here).
    """
    if repair.goal_id != w.goal_id:
        raise LoopxError("invalid_argument", f"the repair is for goal {repair.goal_id}, the mutation for {w.goal_id}")
    if repair.kind == "run_abandoned":
        abandon_expired_run(w, repair.subject)
    elif repair.kind in REBUILDS or repair.kind not in KINDS:
        raise LoopxError("invalid_argument", f"repair {repair.kind!r} is not applied one by one"
                         f" ({'use rebuild or escape' if repair.kind in REBUILDS else 'unknown'})")
    else:
        w.emit(kind, {"namespace": _namespace(kind), "repair": repair.kind, "finding": repair.finding, **repair.body})
    return w.revision


def abandon_expired_run(w, run_id: str) -> None:
    """Ask the core to mark an open run past its expiry abandoned (what should-run would do).

    A core transition a capability may ask for: the ledger records the capability
    (``capability:NAME``) as the actor, and the core refuses unless the run is open and expired.
    """
    w.emit("run.abandoned", {"run_id": run_id, "by": w.actor})


def record_loss(w, *, lost=(), acknowledged=()) -> None:
    """Record on the writer's goal the event numbers a repair found lost, and the chain breaks it
    acknowledged (``capability.loss_recorded``; only a capability that declared repairs).

    Emit it first in the repair's mutation: a gap in the ledger is recorded loss, not fresh damage,
    when the event right after it names the lost numbers. The core's hash-chain check reads it
    whether or not the capability that wrote it is still installed.
    """
    w.emit("capability.loss_recorded", {"lost": sorted(set(lost)), "acknowledged": sorted(set(acknowledged))})


def _declared(w) -> None:
    from loopx.seam.capabilities import capability_of, load

    name = capability_of(w.actor)
    cap = load().get(name) if name else None
    if cap is None or not cap.repairs:
        raise LoopxError("ownership_violation", f"{w.actor} declared no repairs, so it may not rewrite the ledger")


def escape_event_bodies(w, seqs) -> list[dict]:
    """Make the stored bodies of the writer's goal's events ``seqs`` interoperable JSON again
    (NaN/Infinity, lone surrogates older versions let in) and re-chain the goal from the first;
    returns ``[{"seq", "original_body"}]``. The one sanctioned rewrite of the ledger: only a
    capability that declared repairs (:func:`escape` uses it and keeps the originals as evidence).
    """
    from loopx.ledger import integrity
    from loopx.values import jsonsafe
    from loopx.store.queries import repair as queries

    _declared(w)
    originals = []
    for seq in sorted(set(seqs)):
        row = queries.event_body(w.tx, w.goal_id, seq)
        if row is None:
            continue
        fixed = json.dumps(jsonsafe.escaped(json.loads(row["body"])), sort_keys=True, separators=(",", ":"))
        queries.set_event_body(w.tx, row["id"], fixed)
        originals.append({"seq": seq, "original_body": row["body"]})
    if originals:
        integrity.rechain(w.tx, w.goal_id, originals[0]["seq"])
    return originals


def escape(w, *, kind: str) -> dict | None:
    """``data_escaped``: find (again, inside the transaction) the writer's goal's events holding
    NaN/Infinity or lone surrogates, rewrite them escaped, keep each original as evidence
    (``repair.original_bytes``), re-chain and rebuild the state. ``None`` when there were none;
    else ``{"findings", "evidence_id", "seq"}``."""
    from loopx.domain import damage
    from loopx.values.validate import new_id

    found = damage.unreadable_data(w.tx, {"id": w.goal_id})
    if not found:
        return None
    originals = escape_event_bodies(w, [f.details["seq"] for f in found])
    evidence_id = new_id("evidence")
    w.rebuilt = True
    w.emit("evidence.added", {"evidence_id": evidence_id, "run_id": None, "kind": "repair.original_bytes",
                              "summary": f"the original text of {len(originals)} event(s) rewritten readable",
                              "data": {"events": originals}})
    w.emit(kind, {"namespace": _namespace(kind), "repair": "data_escaped", "finding": "unreadable_data",
                  "events": [o["seq"] for o in originals], "evidence_id": evidence_id})
    return {"findings": found, "evidence_id": evidence_id, "seq": w.revision}


# --- rebuilding a goal from its ledger ------------------------------------------------------------

#: The findings a rebuild cures (the goal's state disagrees with its ledger, or its chain).
DRIFT = ("ledger_drift", "quota_drift", "revision_mismatch")


def drift(tx, goal_id: str) -> list:
    """The findings that call for a rebuild of ``goal_id``: its hash chain, gaps in its ledger,
    and state that disagrees with the ledger replayed (:mod:`loopx.domain.damage`; replays the ledger)."""
    from loopx.domain import damage
    from loopx.ledger import log as ledger
    from loopx.store.queries import repair as queries

    goal = queries.goal_revision(tx, goal_id)
    replayed, replayed_usage = damage.replay(ledger.iter_events(tx, goal_id))
    return (damage.chain_findings(tx, goal) + damage.ledger_gaps(tx, goal) + damage.revision_mismatch(tx, goal)
            + damage.ledger_drift(tx, goal, replayed) + damage.quota_drift(tx, goal, replayed_usage))


def _kept(live: dict, replayed: dict) -> dict:
    """Rows of human control in ``live`` state that the ``replayed`` state would lose: a gate
    missing or decided differently, a todo claim missing or held by someone else, and evidence
    missing. Each is kept as it stands in state, for a person to confirm."""
    from loopx.domain.damage import row_key

    def by_key(table, rows):
        return {row_key(table, r): r for r in rows}

    kept: dict[str, list] = {}
    want = {t: by_key(t, replayed.get(t, [])) for t in ("gates", "todos", "evidence")}
    for r in live.get("gates", []):
        w = want["gates"].get(row_key("gates", r))
        if w is None or any(r[c] != w[c] for c in ("status", "blocks", "decided_by", "decided_at")):
            kept.setdefault("gates", []).append(r)
    for r in live.get("todos", []):
        w = want["todos"].get(row_key("todos", r))
        if r["claim_agent"] is not None and (w is None or any(r[c] != w[c] for c in (
                "claim_agent", "claim_run_id", "claim_expires_at", "epoch"))):
            kept.setdefault("todos", []).append(r)
    for r in live.get("evidence", []):
        if row_key("evidence", r) not in want["evidence"]:
            kept.setdefault("evidence", []).append(r)
    return kept


def rebuild(w, *, kind: str, findings=None) -> dict | None:
    """``state_rebuilt``: rebuild the writer's goal from its ledger, keeping human control and
    recording loss. ``findings`` default to :func:`drift`, detected again inside the transaction
    (act only on what is still there); ``None`` when there is nothing to rebuild, or when an event
    was edited (its original is gone: never copied into state; a person restores a backup).

    Returns ``{"findings", "kept": {table: [row]}, "kept_keys": {table: [key]}, "lost": [seq],
    "seq"}``; a capability that kept rows makes the goal wait for a person (its own state).
    """
    from loopx.domain import damage
    from loopx.ledger import integrity, log as ledger
    from loopx.store.queries import repair as queries

    tx, goal_id = w.tx, w.goal_id
    findings = drift(tx, goal_id) if findings is None else findings
    if not findings or any(f.code == "event_tampered" for f in findings):
        return None
    rows = queries.event_kinds(tx, goal_id)
    replayed, _ = damage.replay(ledger.iter_events(tx, goal_id))
    kept = _kept(ledger.snapshot(tx, goal_id), replayed)
    sealed = integrity.head(tx, goal_id)
    top = max(rows[-1]["seq"] if rows else 0, sealed["seq"] if sealed else 0)
    recorded, _ = integrity.acknowledged(rows)
    seqs = {r["seq"] for r in rows}
    lost = [n for n in range(1, top + 1) if n not in seqs and n not in recorded]
    broken = sorted({p.seq for p in integrity.verify_chain(tx, goal_id) if p.code == "chain_broken" and p.seq})
    if lost or broken:
        # First: the event right after a gap must be the one naming the lost numbers.
        record_loss(w, lost=lost, acknowledged=broken)
    body = {"namespace": _namespace(kind), "repair": "state_rebuilt", "finding": findings[0].code,
            "findings": sorted({f.code for f in findings}), "lost": lost}
    if kept:
        body["kept"] = kept
    w.rebuilt = True
    w.emit(kind, body)
    return {"findings": findings, "kept": kept, "lost": lost, "seq": w.revision,
            "kept_keys": {t: [damage.row_key(t, r) for r in v] for t, v in kept.items()}}


def restore_goal_rows(reg, actor: str, *, kind: str, after=None) -> list:
    """Goals whose row was deleted while their ledger survives (``goal_row_missing``): each
    rebuilt from its ledger (:func:`rebuild`, one transaction per goal, as ``actor``) and sealed.
    ``after(w, rebuilt)`` runs in that transaction (e.g. to record what the rebuild kept) and its
    result is collected; by default the :func:`rebuild` result itself."""
    from loopx.domain import damage
    from loopx.ledger import integrity
    from loopx.ledger.registry import Writer
    from loopx.store.queries import repair as queries

    with reg.read() as tx:
        found = damage.missing_goal_rows(tx)
    out = []
    for f in found:
        def work(tx, f=f):
            if queries.goal_exists(tx, f.goal_id):
                return None
            # No goal row to lock or check a revision against: the writer starts at the ledger.
            w = Writer(tx, actor, None, None)
            w.goal_id, w._revision = f.goal_id, None
            done = rebuild(w, kind=kind, findings=[f])
            if done is not None and after is not None:
                done = after(w, done)
            integrity.seal(tx, f.goal_id)
            return done

        done = reg.store.write(work)
        if done is not None:
            out.append(done)
    return out


# --- registry-wide repairs (no goal ledger to go into) ----------------------------------------------


def reindex_storage(reg) -> None:
    """Rebuild every index of the registry's tables (cures index corruption), and put LoopX's
    triggers back as its schema defines them (cures ``schema_altered``,
    :func:`loopx.ledger.history_guard.restore`): then every goal's whole chain is checked, and a goal that
    fails it is sealed untrusted, so what was edited while the triggers were away stays visible to
    the next should-run."""
    from loopx.ledger import history_guard, integrity, keys
    from loopx.store import schema
    from loopx.store.dialect import of as dialect_of
    from loopx.store.queries.ledger import ledger_goals

    def reindex(tx):
        dialect_of(tx).reindex(tx, ("events", "operations", *schema.GOAL_TABLES))
        if keys.keyring(tx).state != "keyed":
            return
        if not history_guard.altered_now(tx, keys.keyring(tx)):
            return
        history_guard.restore(tx)
        for r in ledger_goals(tx):
            if any(p.code != "registry_rolled_back" for p in integrity.verify_chain(tx, r["goal_id"])):
                integrity.seal(tx, r["goal_id"], trusted=False)

    reg.store.write(reindex)


# --- the advice in a contract ----------------------------------------------------------------------


def advice(goal_id: str) -> list[list[str]]:
    """The commands (argv lists) the installed repair capabilities offer for ``goal_id``: each
    capability's ``repair_argv`` with ``{goal_id}`` filled in, by capability name. Empty when none
    is installed: a contract then says ``repair`` and names no command."""
    from loopx.seam import capabilities

    try:
        caps = capabilities.load()
    except LoopxError:
        return []  # a broken declaration must not hide the repair decision itself
    return [[a.replace("{goal_id}", goal_id) for a in cap.repair_argv] for cap in caps.values() if cap.repair_argv]
