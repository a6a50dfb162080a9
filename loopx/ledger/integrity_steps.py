"""The schema steps of tamper evidence (:data:`loopx.store.schema.MIGRATIONS` runs them by name):
chains and digests written for the events and goals that existed before each step, sealed
trusted only where what was recorded still matched.
"""

from __future__ import annotations

from loopx.ledger.integrity import head, keyring, seal
from loopx.ledger.integrity_hash import GENESIS, STATE_TABLES, row_hash, state_digest
from loopx.store.queries import integrity_steps as queries
from loopx.store.queries.ledger import ledger_goals


#: The tables a digest covered before schema v5 added the usage counters and the ready index.
LEGACY_TABLES = tuple(t for t in STATE_TABLES if t not in ("goal_usage", "todo_ready"))


def reseal_intact(tx) -> int:
    """Schema v5's step: seal every goal again now that the digest covers the new tables - but
    only a goal whose recorded digest still matches its rows (over the tables it covered then).

    A goal altered outside the ledger before the migration is sealed untrusted, so the damage
    stays visible (``repair``) instead of being vouched for by the migration; a goal with no
    recorded digest yet (its chain was computed by this same migration) is trusted as it stands,
    which is all an older registry offers. Returns the number of goals sealed.
    """
    ring = keyring(tx)
    goals = [r["goal_id"] for r in ledger_goals(tx)]
    for goal_id in goals:
        recorded = head(tx, goal_id)
        intact = recorded is None or recorded["state_digest"] in (
            state_digest(tx, goal_id, recorded["seq"], recorded["head_hash"], ring, tables=tables)
            for tables in (LEGACY_TABLES, STATE_TABLES))
        seal(tx, goal_id, trusted=intact, legacy=True)  # a step before v9: no state_macs yet
    return len(goals)


def add_goal_capabilities(tx) -> int:
    """Schema v8's step: add ``goals.capabilities`` (the capabilities a goal uses, ``'[]'`` for
    the goals that exist) and seal every goal again, since the digest covers the new column -
    trusted only when its recorded digest matched its rows just before the column was added
    (the same rule as :func:`reseal_intact`). Run again on a store that has the column (a
    migration re-run from an older version), it only reseals. Returns the number of goals sealed."""
    ring = keyring(tx)
    goals = [r["goal_id"] for r in ledger_goals(tx)]
    intact = {}
    for goal_id in goals:
        recorded = head(tx, goal_id)
        intact[goal_id] = recorded is None or recorded["state_digest"] == state_digest(
            tx, goal_id, recorded["seq"], recorded["head_hash"], ring)
    from loopx.store.dialect import of as dialect_of

    if "capabilities" not in dialect_of(tx).columns(tx, "goals"):
        queries.add_goal_capabilities_column(tx)
    for goal_id in goals:
        seal(tx, goal_id, trusted=intact[goal_id], legacy=True)  # state_macs comes at v9
    return len(goals)


def mac_all(tx) -> int:
    """Schema v9's step: give every goal its per-row MACs (:mod:`loopx.ledger.state_macs`) - but only a
    goal whose recorded digest still matches its rows; one altered before the migration is sealed
    untrusted, so the damage stays visible. A registry whose key is not here keeps its digests
    (checked whole) until its owner writes to it. Returns the number of goals sealed."""
    ring = keyring(tx)
    if ring.state != "keyed":
        return 0
    goals = [r["goal_id"] for r in ledger_goals(tx)]
    for goal_id in goals:
        recorded = head(tx, goal_id)
        intact = recorded is None or recorded["state_digest"] == state_digest(
            tx, goal_id, recorded["seq"], recorded["head_hash"], ring)
        seal(tx, goal_id, trusted=intact, whole=True)
    queries.forget_all_dirty(tx)
    return len(goals)


def backfill_chains(tx) -> int:
    """:func:`backfill` without sealing (a schema step before the last state table exists)."""
    return backfill(tx, sealing=False)


def backfill(tx, *, sealing: bool = True) -> int:
    """Compute chains for events that have none and seal every goal (the schema migration).

    Trusts the ledger as it stands at migration time: that is all an older registry offers.
    Returns the number of goals sealed.
    """
    ring = keyring(tx)
    goals = [r["goal_id"] for r in ledger_goals(tx)]
    for goal_id in goals:
        prev = GENESIS
        for row in queries.chain_rows(tx, goal_id):
            if row["hash"] is None:
                row["prev_hash"] = prev
                digest = row_hash(row, ring)
                queries.set_chain(tx, prev, digest, row["id"])
                prev = digest
            else:
                prev = row["hash"]
        if sealing:
            seal(tx, goal_id)
    return len(goals)
