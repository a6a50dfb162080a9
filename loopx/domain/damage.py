"""What is damaged: read-only detectors over a goal's ledger and current state (the repair API's
reading half; :mod:`loopx.domain.repairs` is the writing half). None of them writes.

A finding is *damage* (state that normal LoopX operation never produces: the current-state tables
disagree with the ledger, a reference points at nothing, the storage engine reports corruption)
or *housekeeping* (state the core already treats correctly but that the ledger has not caught up
with: a lease past its expiry, a run still marked open after its expiry). A repair capability
decides what blocks a goal's turns; the cheap detectors (:func:`cheap`: one or two indexed queries
each, no ledger replay) are the ones fit for a contract veto, which runs on every
``quota should-run``. The full check (:func:`check`) adds the hash chain, the ledger replay,
quota recomputation, gaps in the ledger, orphan evidence, the storage integrity check and the
schema version. Each finding names the repair (:data:`loopx.domain.repairs.KINDS`) that cures it, or
``None`` when only a person (or a backup) can.

Reached by plugins through ``loopx.api`` (``find_damage``, ``goal_damage``, ``cheap_damage``...).
"""

from __future__ import annotations

import json

# Finding and the registry-wide detectors are this module's public names too (loopx.api names them here).
from loopx.domain.damage_finding import DAMAGE as DAMAGE, HOUSEKEEPING as HOUSEKEEPING, Finding as Finding
from loopx.domain.damage_registry import (  # noqa: F401
    anchor_findings,
    registry_schema,
    registry_storage,
    schema_altered,
    schema_behind,
    storage_integrity,
)


# --- cheap detectors (the veto path) ---------------------------------------------------------


def revision_mismatch(tx, goal: dict) -> list[Finding]:
    """The goal's revision is not its ledger's last event: current state and ledger diverged."""
    from loopx.store.queries import damage as q

    row = q.last_event_seq(tx, goal["id"])
    last = row["last"] if row else None
    if last is None or last == goal["revision"]:
        return []
    return [Finding("revision_mismatch", goal["id"], goal["id"],
                    f"goal {goal['id']} is at revision {goal['revision']} but its ledger ends at event {last}",
                    "state_rebuilt", details={"revision": goal["revision"], "ledger": last})]


def missing_dependencies(tx, goal: dict) -> list[Finding]:
    """Todos that depend on todos the goal does not have (such a todo could never become ready).

    Read from the dependency edges the core keeps (``todo_deps``) in one anti-join, not by
    parsing every todo's list: this runs on every should-run.
    """
    from loopx.store.queries import damage as q

    rows = q.missing_dependency_edges(tx, goal["id"])
    if not rows:
        return []
    missing: dict[str, list[str]] = {}
    for r in rows:
        missing.setdefault(r["todo_id"], []).append(r["dep_id"])
    out = []
    for r in q.todos_depending(tx, goal["id"], missing):
        gone = [d for d in json.loads(r["depends_on"]) if d in missing[r["id"]]]  # in the todo's own order
        if gone:
            out.append(Finding("missing_dependency", goal["id"], r["id"],
                               f"todo {r['id']} depends on missing todo(s) {', '.join(gone)}",
                               "dependency_dropped", details={"missing": gone}))
    return out


def dangling_gates(tx, goal: dict) -> list[Finding]:
    """Pending gates on a todo the goal does not have (they would guard nothing, silently).

    A gate on ``action:NAME`` is not reported when the action was removed: it keeps guarding the
    name, so re-adding the action stays behind the gate, by design.
    """
    from loopx.store.queries import damage as q

    rows = q.pending_gates(tx, goal["id"])
    out = []
    for r in rows:
        kind, _, target = r["blocks"].partition(":")
        if kind != "todo":
            continue
        if not q.has_todo(tx, goal["id"], target):
            out.append(Finding("dangling_gate", goal["id"], r["id"],
                               f"pending gate {r['id']} blocks todo {target}, which does not exist",
                               "gate_widened", details={"blocks": r["blocks"]}))
    return out


CHEAP = (revision_mismatch, missing_dependencies, dangling_gates)


def cheap(tx, goal_id: str) -> list[Finding]:
    """The cheap damage detectors (:data:`CHEAP`) for one goal: what a contract veto may run on
    every ``quota should-run`` (a few indexed queries; no ledger replay)."""
    # One statement asks whether any of them would find something (it runs before every turn);
    # only then do the detectors themselves run, to say what and where. In should-run's hook
    # phase the core already asked it, with the goal's row, in this same read transaction
    # (``loopx.views.contract.HookTx.known``): that answer is used, not asked again.
    known = getattr(tx, "known", None)
    goal = known(goal_id, "damage_probe") if known is not None else None
    if goal is None:
        from loopx.store.queries.damage import cheap_probe

        goal = cheap_probe(tx, goal_id)
    if goal is None:
        return []
    if (goal["last"] is None or goal["last"] == goal["revision"]) and not goal["deps_missing"] \
            and not goal["gates_dangling"]:
        return []
    out: list[Finding] = []
    for detect in CHEAP:
        out.extend(detect(tx, goal))
    return out


# Whether :func:`revision_mismatch`, :func:`missing_dependencies` or :func:`dangling_gates` would
# find anything is one probe (``loopx.store.queries.usage.PROBE_COLUMNS``): :func:`cheap`'s one
# statement, and should-run's read of the goal before its hooks (:func:`loopx.views.inputs.gather`),
# which hands the answer to the hooks' view.


# --- housekeeping ----------------------------------------------------------------------------


def stale_leases(tx, goal: dict, now: str) -> list[Finding]:
    """Open todos whose claim expired: the core already lets anyone claim them; fix clears the claim."""
    from loopx.store.queries import damage as q

    rows = q.expired_claims(tx, goal["id"], now)
    return [Finding("stale_lease", goal["id"], r["id"],
                    f"todo {r['id']} is still claimed by {r['claim_agent']}, whose lease expired at {r['claim_expires_at']}",
                    "lease_released", HOUSEKEEPING, {"agent": r["claim_agent"], "expired_at": r["claim_expires_at"]})
            for r in rows]


def abandoned_runs(tx, goal: dict, now: str) -> list[Finding]:
    """Runs still marked open after their expiry: the core counts them abandoned; fix records it."""
    from loopx.store.queries import damage as q

    rows = q.expired_open_runs(tx, goal["id"], now)
    return [Finding("abandoned_run", goal["id"], r["id"],
                    f"run {r['id']} of {r['agent']} is still open; it expired at {r['expires_at']}",
                    "run_abandoned", HOUSEKEEPING, {"agent": r["agent"], "expired_at": r["expires_at"]})
            for r in rows]


# --- the full check --------------------------------------------------------------------------


def orphan_evidence(tx, goal: dict) -> list[Finding]:
    """Evidence bound to a run the goal does not have."""
    from loopx.store.queries import damage as q

    rows = q.evidence_without_run(tx, goal["id"])
    return [Finding("orphan_evidence", goal["id"], r["id"],
                    f"evidence {r['id']} is bound to run {r['run_id']}, which this goal does not have",
                    "evidence_unbound", details={"run_id": r["run_id"]})
            for r in rows]


def ledger_gaps(tx, goal: dict) -> list[Finding]:
    """Event numbers missing from the goal's ledger: entries were lost, and cannot be recreated."""
    from loopx.store.queries import damage as q

    row = q.event_span(tx, goal["id"])
    if not row or not row["n"] or (row["n"] == row["last"] and row["first"] == 1):
        return []
    from loopx.ledger.integrity import acknowledged as chain_acknowledged
    from loopx.ledger.log import iter_rows as goal_event_rows

    # One pass over the ledger in pages (bounded memory): the gaps, and the few events that record loss.
    gaps, notes, expected = [], [], 1
    for r in goal_event_rows(tx, goal["id"], columns="seq, kind, body"):
        gaps.extend(range(expected, r["seq"]))
        expected = r["seq"] + 1
        if '"lost"' in r["body"] or '"acknowledged"' in r["body"]:  # what chain_acknowledged reads
            notes.append(r)
    recorded, _ = chain_acknowledged(notes)  # loss a repair already recorded stays in the ledger
    missing = [n for n in gaps if n not in recorded]
    if not missing:
        return []
    return [Finding("ledger_gap", goal["id"], goal["id"],
                    f"goal {goal['id']}'s ledger lost {len(missing)} event(s) ({', '.join(map(str, missing[:5]))}"
                    f"{'...' if len(missing) > 5 else ''}); fix records the loss and rebuilds without dropping a"
                    " gate, claim or evidence (restore a backup to get the events back)",
                    "state_rebuilt", details={"missing": missing[:100]})]


def snapshot(tx, goal_id: str) -> dict[str, list[dict]]:
    """Every current-state row of one goal, per table (:data:`loopx.store.schema.GOAL_TABLES`),
    comparable across backends."""
    from loopx.ledger import log as ledger

    return ledger.normalise(ledger.snapshot(tx, goal_id))


def replay(goal_events) -> tuple[dict, object]:
    """``(snapshot, usage)`` that replaying ``goal_events`` into an empty scratch registry produces.

    The snapshot compares equal to :func:`snapshot` of a healthy goal; ``usage`` is its
    :class:`~loopx.model.QuotaUsage` (``None`` for no events).
    """
    from loopx.ledger import log as ledger
    from loopx.domain import usage

    found = ledger.replay(goal_events, lambda tx, goal_id: (ledger.snapshot(tx, goal_id),
                                                            usage.usage(tx, goal_id)))
    if found is None:
        return {}, None
    snap, used = found
    return ledger.normalise(snap), used


def row_key(table: str, row: dict) -> str:
    """The key of a current-state ``row`` of ``table`` as one string (``"id"`` or ``"a/b"``)."""
    from loopx.store.schema import GOAL_TABLES

    return "/".join(str(row.get(k)) for k in GOAL_TABLES[table])


def ledger_drift(tx, goal: dict, replayed: dict) -> list[Finding]:
    """Current-state rows that differ from what replaying the goal's ledger produces."""
    live = snapshot(tx, goal["id"])
    want = replayed
    differing = {}
    for table in live:
        have_rows = {row_key(table, r): r for r in live[table]}
        want_rows = {row_key(table, r): r for r in want.get(table, [])}
        extra = sorted(set(have_rows) - set(want_rows))
        gone = sorted(set(want_rows) - set(have_rows))
        changed = sorted(k for k in set(have_rows) & set(want_rows) if have_rows[k] != want_rows[k])
        if extra or gone or changed:
            differing[table] = {"extra": extra[:5], "missing": gone[:5], "changed": changed[:5]}
    if not differing:
        return []
    parts = []
    for table, d in differing.items():
        bits = [f"{len(v)}{'+' if len(v) == 5 else ''} {k}" for k, v in d.items() if v]
        parts.append(f"{table} ({', '.join(bits)})")
    return [Finding("ledger_drift", goal["id"], goal["id"],
                    f"goal {goal['id']}'s current state differs from its ledger replayed: {'; '.join(parts)}",
                    "state_rebuilt", details={"tables": differing})]


def quota_drift(tx, goal: dict, replayed_usage) -> list[Finding]:
    """The quota usage contracts are computed from disagrees with the usage the ledger implies."""
    from loopx.model import to_json
    from loopx.domain.usage import usage as goal_usage

    if replayed_usage is None:
        return []
    have, want = to_json(goal_usage(tx, goal["id"])), to_json(replayed_usage)
    if have == want:
        return []
    diff = {k: {"state": have[k], "ledger": want[k]} for k in have if have[k] != want[k]}
    text = ", ".join(f"{k} {v['state']} (ledger says {v['ledger']})" for k, v in diff.items())
    return [Finding("quota_drift", goal["id"], goal["id"], f"goal {goal['id']}'s quota usage disagrees with its ledger: {text}",
                    "state_rebuilt", details=diff)]


def chain_findings(tx, goal: dict) -> list[Finding]:
    """The goal's hash chain and state digest (:func:`loopx.ledger.integrity.verify_chain`)."""
    from loopx.ledger.integrity import verify_chain

    out = []
    for p in verify_chain(tx, goal["id"]):
        # An edited event cannot be undone from the ledger (its original is gone): never rebuild
        # from it; a person restores a backup or decides.
        # Nor can a rebuild bring back what an older copy of the registry lacks, or verify
        # anything without the key: a person restores the newest copy, or accepts it.
        repair = None if p.code in ("event_tampered", "registry_rolled_back", "integrity_key_missing") else "state_rebuilt"
        out.append(Finding(p.code, goal["id"], goal["id"] if p.seq is None else f"{goal['id']}#{p.seq}",
                           p.message, repair, details={"seq": p.seq}))
    return out


def unreadable_data(tx, goal: dict) -> list[Finding]:
    """Events whose bodies hold values older versions let in: NaN/Infinity, lone surrogates."""
    from loopx.values.jsonsafe import problem as json_problem

    out = []
    from loopx.ledger.log import iter_rows as goal_event_rows

    for row in goal_event_rows(tx, goal["id"], columns="seq, kind, body"):  # in pages: bounded memory
        text = row["body"]
        # Stored bodies are ASCII JSON: only these spellings can carry such values.
        if "\\ud" not in text.lower() and "Infinity" not in text and "NaN" not in text:
            continue
        try:
            found = json_problem(json.loads(text))
        except ValueError:
            found = "is not JSON"
        if found:
            out.append(Finding("unreadable_data", goal["id"], f"{goal['id']}#{row['seq']}",
                               f"event {row['seq']} ({row['kind']}) of goal {goal['id']} {found}",
                               "data_escaped", details={"seq": row["seq"]}))
    return out


def unreadable(tx, goal_id: str) -> list[Finding]:
    """``unreadable_data`` for one goal (:func:`unreadable_data`): one pass over its ledger, no replay."""
    return unreadable_data(tx, {"id": goal_id})


def missing_goal_rows(tx) -> list[Finding]:
    """Goals whose row is gone while their ledger survives (todos, runs, evidence orphaned)."""
    from loopx.store.queries import damage as q

    rows = q.goals_without_row(tx)
    return [Finding("goal_row_missing", r["goal_id"], r["goal_id"],
                    f"goal {r['goal_id']} has a ledger but no goal row: its todos, runs and evidence are orphaned",
                    "state_rebuilt") for r in rows]


#: Every detector code, with what it means (for ``check`` output and the docs).
CODES = {
    "revision_mismatch": "the goal's revision is not its ledger's last event",
    "missing_dependency": "a todo depends on a todo that does not exist",
    "dangling_gate": "a pending gate blocks a todo that does not exist",
    "stale_lease": "a todo is still claimed after its lease expired",
    "abandoned_run": "a run is still open after its expiry",
    "orphan_evidence": "evidence is bound to a run that does not exist",
    "ledger_drift": "current state differs from the ledger replayed",
    "ledger_gap": "events are missing from the goal's ledger (fix records the loss; a backup brings them back)",
    "quota_drift": "quota usage disagrees with the ledger",
    "storage_integrity": "the storage engine reports corruption",
    "schema_behind": "the registry schema is older than this LoopX",
    "unreadable_data": "an event holds NaN/Infinity or a lone surrogate (older versions let them in)",
    "goal_row_missing": "a goal's row is gone while its ledger survives",
    # and the hash chain's own (loopx.ledger.integrity.CODES): head_mismatch, event_tampered,
    # chain_broken, state_digest_mismatch, goal_unsealed
    "head_mismatch": "the newest events are not the ones the goal's chain head names (events lost or inserted)",
    "event_tampered": "an event's stored content does not match its hash (the event was edited)",
    "chain_broken": "an event does not link to the hash of the event before it",
    "state_digest_mismatch": "the goal's current-state rows differ from the digest written with its last change",
    "goal_unsealed": "the goal has no recorded chain head",
    "history_changed": "stored events were edited or deleted outside LoopX (the count its keyed seal binds moved)",
    "schema_altered": "the registry's triggers or event tables were changed outside LoopX (their keyed mark fails)",
    "registry_rolled_back": "the registry is older than what this user last committed to it (an older copy)",
    "integrity_key_missing": "the registry's integrity key is not on this machine: nothing can be verified",
}


def goal_findings(tx, goal: dict, now: str, *, full: bool = True) -> list[Finding]:
    """Every finding for one goal row (``full=False``: without the chain walk and the ledger replay)."""
    from loopx.ledger.log import iter_events as goal_event_stream

    out = []
    for detect in CHEAP:
        out.extend(detect(tx, goal))
    if goal["status"] != "closed":
        out.extend(stale_leases(tx, goal, now))
        out.extend(abandoned_runs(tx, goal, now))
    out.extend(orphan_evidence(tx, goal))
    if full:
        out.extend(chain_findings(tx, goal))
        out.extend(unreadable_data(tx, goal))
        out.extend(ledger_gaps(tx, goal))
        replayed, replayed_usage = replay(goal_event_stream(tx, goal["id"]))  # replayed as it is read
        out.extend(ledger_drift(tx, goal, replayed))
        out.extend(quota_drift(tx, goal, replayed_usage))
    return out


def goals_to_check(tx, goal_id: str | None) -> list[dict]:
    """The goal rows to look at: one (``goal_not_found`` if absent) or all, oldest first."""
    from loopx.values.errors import LoopxError
    from loopx.store.queries import damage as q
    from loopx.values.validate import check_id

    if goal_id is not None:
        row = q.goal_to_check(tx, check_id("goal", goal_id))
        if row is None:
            raise LoopxError("goal_not_found", f"no goal {goal_id}")
        return [row]
    return q.goals_to_check(tx)


def goal_ids(tx, goal_id: str | None = None) -> list[str]:
    """The goals to look at: ``[goal_id]`` (``goal_not_found`` if absent) or every goal, oldest first."""
    return [r["id"] for r in goals_to_check(tx, goal_id)]


def goal(tx, goal_id: str, *, now: str | None = None, full: bool = True) -> list[Finding]:
    """Every finding for one goal (``goal_not_found`` if absent); ``full=False`` leaves out the
    chain walk and the ledger replay (what a repair re-detects inside its transaction)."""
    from loopx.values.clock import now as clock_now

    return goal_findings(tx, goals_to_check(tx, goal_id)[0], now or clock_now(), full=full)


def check(reg, *, goal_id: str | None = None, now: str | None = None, also=None, codes=()) -> dict:
    """Run every detector (on one goal or all) and return ``{"ok", "findings", "checked"}``.

    ``also(tx, goal_id)`` adds a capability's own findings per goal (``codes``: their codes, for
    ``checked.detectors``). When the schema is behind, only that is reported: the other detectors
    read tables as this LoopX lays them out, and would report noise until the registry is migrated.
    """
    from loopx.values.clock import now as clock_now

    now = now or clock_now()
    findings = schema_behind(reg.store)
    goals: list[dict] = []
    if not findings:
        findings.extend(storage_integrity(reg.store))
        with reg.read() as tx:
            goals = goals_to_check(tx, goal_id)
            from loopx.values.progress import progress

            if goal_id is None:
                findings.extend(missing_goal_rows(tx))
            # A bar on stderr when it is a terminal (never in a contract veto: that calls cheap).
            with progress(len(goals), "checking goals") as bar:
                for goal in goals:
                    findings.extend(goal_findings(tx, goal, now))
                    if also is not None:
                        findings.extend(also(tx, goal["id"]))
                    bar.advance()
        findings.extend(anchor_findings(reg, goal_id))
    elif goal_id is not None:
        with reg.read() as tx:
            goals = goals_to_check(tx, goal_id)
    return {
        "ok": not findings,
        "findings": [f.to_json() for f in findings],
        "checked": {"goals": len(goals), "at": now, "detectors": sorted({*CODES, *codes})},
    }
