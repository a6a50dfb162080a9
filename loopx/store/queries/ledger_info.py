"""What ``loopx registry info`` counts of a registry (:mod:`loopx.views.registry_info`). Cold."""

from __future__ import annotations


def goal_counts(tx) -> dict:
    """``{"n": goals, "c": closed goals}`` (None for none)."""
    return tx.one("SELECT count(*) AS n, sum(CASE WHEN status = 'closed' THEN 1 ELSE 0 END) AS c FROM goals")


def event_count(tx) -> int:
    """How many events the registry holds."""
    return int(tx.one("SELECT count(*) AS n FROM events")["n"] or 0)


def postgres_size(tx) -> int:
    """The bytes the tables of the registry's PostgreSQL schema take, indexes and TOAST included."""
    row = tx.one(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS s FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind = 'r'")
    return int(row["s"])
