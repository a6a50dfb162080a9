"""Giving a registry its integrity key, changing it, and accepting a rollback.

* :func:`key_registry` is the schema migration that keys a registry made before keys existed
  (and every new one): it gives the registry an id, makes its key (:mod:`loopx.ledger.keys`), checks
  each goal's chain the old, unkeyed way, then re-chains and re-seals everything with the key.
  A goal whose unkeyed chain already failed is sealed ``untrusted``: the damage stays visible
  (``state_digest_mismatch``) instead of being blessed by the key. What it did is recorded in
  ``meta.integrity_keyed``.
* :func:`rekey` (``loopx registry rekey``) replaces the key: after a key was exposed, or with
  ``adopt`` when it is lost (trusting the registry as it stands).
* :func:`reanchor` (``loopx registry reanchor``) accepts the registry as it stands as the newest
  (after restoring an older backup on purpose).
"""

from __future__ import annotations

import json

from loopx.ledger import anchor, integrity, keys
from loopx.values.errors import LoopxError
from loopx.store.queries import keys as queries
from loopx.store.queries.integrity import newest_event_id
from loopx.store.queries.ledger import set_meta


def _goals(tx) -> list[str]:
    return [r["goal_id"] for r in queries.goals_by_id(tx)]


def _damaged(tx, goals: list[str]) -> list[str]:
    """Goals whose chain, head or digest fails now (a rollback alone is not damage to the chain)."""
    return [g for g in goals if any(p.code != "registry_rolled_back" for p in integrity.verify_chain(tx, g))]


def _rechain_all(tx, ring, goals: list[str], damaged: list[str], *, legacy: bool = False) -> None:
    keys.set_keyring(tx, ring)
    for goal_id in goals:
        integrity.rechain(tx, goal_id, 1)
        # Every row MACed afresh with the new key (``legacy``: the keying schema step, before the
        # per-row MACs exist, writes the whole-state digest; the next step converts it).
        integrity.seal(tx, goal_id, trusted=goal_id not in damaged, whole=True, legacy=legacy)


def key_registry(tx) -> int:
    """The migration step: give the registry an id and a key, and key every chain (see the
    module docstring). Returns the number of goals keyed; a registry already keyed is left alone."""
    from loopx.values import clock

    if keys.stored_id(tx) is not None:
        return 0
    import uuid

    keys.set_keyring(tx, keys.Keyring(None, None))
    goals = _goals(tx)
    was = keys.remembered(tx)
    if was is not None and goals:
        # This user keyed a registry right here: one without an id now had it removed, or is an
        # older, unkeyed copy. Keying it afresh would vouch for whatever it holds.
        raise LoopxError("integrity_mismatch", keys.Keyring(was, None, stripped=True).stripped_message())
    damaged = _damaged(tx, goals)
    rid = uuid.uuid4().hex
    queries.add_meta(tx, keys.META_ID, rid)
    # An in-memory registry (a replay's scratch one) has a key only as long as it lives.
    in_memory = keys.location(tx).endswith(":memory:")
    _rechain_all(tx, keys.Keyring(rid, keys.create(rid, persist=not in_memory)), goals, damaged, legacy=True)
    keys.remember(tx, rid)
    queries.add_meta(tx, keys.META_KEYED, json.dumps(
        {"at": clock.now(), "goals": len(goals), "already_damaged": damaged[:100],
         "already_damaged_count": len(damaged)}))
    return len(goals)


def _heads(tx) -> tuple[list[dict], int]:
    rows = queries.recorded_heads(tx)
    top = newest_event_id(tx)
    return rows, int(top)


def _user_only(actor: str, verb: str) -> None:
    if actor != "user":
        raise LoopxError("actor_forbidden", f"{actor} may not {verb}: that is for user")


def rekey(reg, actor: str, *, adopt: bool = False) -> dict:
    """Give the registry a new key: every chain and digest is recomputed with it and the anchor
    reset to the registry as it stands. Refused (``integrity_mismatch``) while a goal fails its
    check with the current key, and (``integrity_key_missing``) without the current key, unless
    ``adopt``: then the registry is trusted as it stands."""
    _user_only(actor, "rekey the registry")
    from loopx.values import clock

    staged: dict = {}

    def work(tx):
        ring = keys.keyring(tx)
        if ring.registry_id is None:
            raise LoopxError("registry_unavailable", "the registry has no id yet: open it for writing once")
        goals = _goals(tx)
        if ring.state == "missing" and not adopt:
            raise LoopxError("integrity_key_missing", ring.missing_message())
        if ring.state == "stripped":
            if not adopt:
                raise LoopxError("integrity_mismatch", ring.stripped_message())
            queries.add_meta(tx, keys.META_ID, ring.registry_id)
        damaged = [] if adopt else _damaged(tx, goals)
        if damaged:
            raise LoopxError("integrity_mismatch", f"{len(damaged)} goal(s) fail their integrity check (first:"
                             f" {damaged[0]}): repair them first (`loopx quota should-run` names the repair command"
                             " an installed repair capability offers), or --adopt to trust them as they stand")
        new = keys.stage(ring.registry_id)
        staged.update(new)
        _rechain_all(tx, keys.Keyring(ring.registry_id, new["key"]), goals, [])
        from loopx.ledger import history_guard

        history_guard.mark(tx)  # the trigger definitions, MACed with the new key
        keys.remember(tx, ring.registry_id)
        set_meta(tx, "integrity_rekeyed", json.dumps({"at": clock.now(), "adopted": adopt, "goals": len(goals)}))
        return ring.registry_id, len(goals), _heads(tx)

    try:
        rid, n, (heads, top) = reg.store.write(work)
    except BaseException:
        keys.discard(staged)
        raise
    keys.promote(rid, staged)
    anchor.reset(rid, heads, top)
    return {"registry_id": rid, "goals": n, "adopted": adopt, "key": str(keys.key_path(rid))}


def anchor_as_it_stands(reg) -> dict:
    """Reset the rollback anchor to the registry's current heads (no actor check: callers decide)."""
    with reg.read() as tx:
        ring = keys.keyring(tx)
        if ring.state == "missing":
            raise LoopxError("integrity_key_missing", ring.missing_message())
        if ring.state != "keyed":
            raise LoopxError("registry_unavailable", "the registry is not keyed yet: open it for writing once")
        heads, top = _heads(tx)
    anchor.reset(ring.registry_id, heads, top)
    return {"registry_id": ring.registry_id, "goals": len(heads), "generation": top}


def reanchor(reg, actor: str) -> dict:
    """Record the registry as it stands as the newest this user committed (accepting that it was
    replaced by an older copy, e.g. a backup restored on purpose)."""
    _user_only(actor, "reanchor the registry")
    return anchor_as_it_stands(reg)
