"""Damage detectors over the whole registry rather than one goal (:mod:`loopx.domain.damage`): its schema
version, the storage engine's integrity check, the history guard's triggers, and what the user's
anchor remembers that the registry no longer holds."""

from __future__ import annotations

from loopx.domain.damage_finding import Finding


def schema_behind(store) -> list[Finding]:
    """The registry's schema is older than this LoopX's (a store opened read-only is not migrated)."""
    from loopx.store.schema import CURRENT_VERSION as SCHEMA_VERSION

    version = store.schema_version()
    if version >= SCHEMA_VERSION:
        return []
    return [Finding("schema_behind", None, None,
                    f"the registry schema is version {version}; this LoopX uses {SCHEMA_VERSION}",
                    "migrated", details={"version": version, "current": SCHEMA_VERSION})]


def storage_integrity(store) -> list[Finding]:
    """What the storage engine's own integrity check reports (SQLite ``PRAGMA integrity_check``)."""
    from loopx.ledger.integrity import LOSS_KINDS

    problems = store.integrity_check(LOSS_KINDS)
    if not problems:
        return []
    return [Finding("storage_integrity", None, None,
                    f"the storage engine reports {len(problems)} problem(s): {problems[0]}",
                    "reindexed", details={"problems": problems[:20]})]


def registry_schema(reg) -> list[Finding]:
    """``schema_behind`` for the registry ``reg`` (:func:`schema_behind`); a registry opened
    read-only is not migrated, so this is where an old schema is still visible."""
    return schema_behind(reg.store)


def registry_storage(reg) -> list[Finding]:
    """``storage_integrity`` for the registry ``reg`` (:func:`storage_integrity`), and
    ``schema_altered`` when its triggers no longer match their keyed mark
    (:mod:`loopx.ledger.history_guard`); both are cured by ``reindexed`` (:func:`loopx.domain.repairs.reindex_storage`)."""
    return storage_integrity(reg.store) + schema_altered(reg)


def schema_altered(reg) -> list[Finding]:
    """``schema_altered``: the registry's trigger definitions fail their keyed mark."""
    from loopx.ledger import history_guard, keys
    from loopx.store import schema

    with reg.read() as tx:
        if getattr(tx, "schema_version", schema.CURRENT_VERSION) < schema.GUARD_VERSION:
            return []
        ring = keys.keyring(tx)
        if ring.state != "keyed":
            return []
        if not history_guard.altered_now(tx, ring):
            return []
    return [Finding("schema_altered", None, None, "the registry's triggers or event tables were changed outside"
                    " LoopX: an edit of a goal's history meanwhile could have gone uncounted", "reindexed")]


def anchor_findings(reg, goal_id: str | None = None) -> list[Finding]:
    """Goals and events this user committed that the registry no longer holds (an older copy
    replaced it): :func:`loopx.ledger.integrity.verify_anchor` (its own read transactions)."""
    from loopx.ledger.integrity import verify_anchor

    return [Finding(p.code, p.goal_id, p.goal_id if p.seq is None else f"{p.goal_id}#{p.seq}", p.message, None,
                    details={"seq": p.seq}) for p in verify_anchor(reg, goal_id)]
