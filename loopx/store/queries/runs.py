"""Runs, their contracts and the evidence the core wrote under them: what ``quota should-run``
reads to decide a turn (:mod:`loopx.domain.runs`, :mod:`loopx.domain.claims`, :mod:`loopx.views.contract`, the step
results :mod:`loopx.values.steps` judges), and what ``run finish`` / ``run show`` read.

Kept in one module because should-run loads it on every turn (docs/performance.md: each module
on that path costs start-up time).
"""

from __future__ import annotations

# --- runs -----------------------------------------------------------------------------------------


def run_row(tx, run_id: str) -> dict | None:
    """The ``runs`` row of ``run_id``."""
    return tx.one("SELECT * FROM runs WHERE id = ?", (run_id,))


def latest_handoff_row(tx, goal_id: str) -> dict | None:
    """The goal's latest finished run that left a hand-off note (id, handoff, finished_at)."""
    return tx.one(
        "SELECT id, handoff, finished_at FROM runs WHERE goal_id = ? AND status = 'finished'"
        " AND handoff IS NOT NULL ORDER BY finished_at DESC, id DESC LIMIT 1",
        (goal_id,),
    )


def recent_history(tx, goal_id: str, runs: int, rewards: int) -> list[dict]:
    """One statement for the goal's past: its newest ``runs`` closed runs (part ``run``), its latest
    hand-off note (part ``handoff``) and its latest ``rewards`` rewards (part ``reward``)."""
    return tx.query(
        "SELECT 'run' AS part, id, outcome, contract_id, opened_at AS at, NULL AS note,"
        " CAST(NULL AS REAL) AS score, NULL AS rid"
        " FROM (SELECT id, outcome, contract_id, opened_at FROM runs WHERE goal_id = ? AND status <> 'open'"
        " ORDER BY opened_at DESC, id DESC LIMIT ?) a"
        " UNION ALL SELECT 'handoff', id, NULL, NULL, finished_at, handoff, CAST(NULL AS REAL), NULL"
        " FROM (SELECT id, handoff, finished_at FROM runs WHERE goal_id = ? AND status = 'finished'"
        " AND handoff IS NOT NULL ORDER BY finished_at DESC, id DESC LIMIT 1) b"
        " UNION ALL SELECT 'reward', run_id, NULL, NULL, created_at, comment, score, id"
        " FROM (SELECT id, run_id, score, comment, created_at FROM rewards WHERE goal_id = ?"
        " ORDER BY created_at DESC, id DESC LIMIT ?) c",
        (goal_id, runs, goal_id, goal_id, rewards))


def live_runs(tx, goal_id: str, now: str) -> list[dict]:
    """The goal's runs open and unexpired at ``now``, oldest first."""
    return tx.query(
        "SELECT * FROM runs WHERE goal_id = ? AND status = 'open' AND expires_at > ? ORDER BY COALESCE(opened_at, ''), id",
        (goal_id, now),
    )


def expired_open_runs(tx, goal_id: str, now: str) -> list[dict]:
    """The goal's runs still marked open whose expiry has passed at ``now``, oldest first."""
    return tx.query(
        "SELECT * FROM runs WHERE goal_id = ? AND status = 'open' AND expires_at <= ? ORDER BY COALESCE(opened_at, ''), id",
        (goal_id, now),
    )


def goal_runs(tx, goal_id: str, limit: int) -> list[dict]:
    """The goal's newest ``limit`` runs, newest first."""
    return tx.query("SELECT * FROM runs WHERE goal_id = ? ORDER BY opened_at DESC, id DESC LIMIT ?",
                    (goal_id, limit))


def revision_and_open_runs(tx, goal_id: str) -> list[dict]:
    """One statement: the goal's revision (``goal_revision``) with each of its open runs' rows,
    oldest first (none: one row of NULLs; no goal: no row)."""
    return tx.query("SELECT g.revision AS goal_revision, r.* FROM goals g LEFT JOIN runs r"
                    " ON r.goal_id = g.id AND r.status = 'open' WHERE g.id = ?"
                    " ORDER BY COALESCE(r.opened_at, ''), r.id",
                    (goal_id,))


def closed_runs(tx, goal_id: str, n: int) -> list[dict]:
    """The goal's newest ``n`` closed runs (id, outcome, contract_id, opened_at), newest first."""
    return tx.query("SELECT id, outcome, contract_id, opened_at FROM runs WHERE goal_id = ? AND status <> 'open'"
                    " ORDER BY opened_at DESC, id DESC LIMIT ?", (goal_id, n))


def last_opened_believably(tx, goal_id: str, now: str, exclude: str) -> str | None:
    """When the goal's latest run other than ``exclude`` opened, among those opened by ``now``."""
    return tx.one("SELECT MAX(opened_at) AS at FROM runs WHERE goal_id = ? AND opened_at <= ? AND id <> ?",
                  (goal_id, now, exclude))["at"]


def latest_retry(tx, goal_id: str) -> dict | None:
    """The time of the goal's latest ``goal.retried`` event (row ``at``, NULL if none)."""
    return tx.one("SELECT MAX(at) AS at FROM events WHERE goal_id = ? AND kind = 'goal.retried'", (goal_id,))


def todos_claimed_by_run(tx, run_id: str) -> list[dict]:
    """The ids of the open todos claimed under ``run_id``, by id."""
    return tx.query("SELECT id FROM todos WHERE claim_run_id = ? AND status = 'open' ORDER BY id", (run_id,))


def limit_settings(tx) -> list[dict]:
    """The ``limits.*`` settings (key, value)."""
    return tx.query("SELECT key, value FROM settings WHERE key LIKE 'limits.%'")


def latest_rewards(tx, goal_id: str, limit: int) -> list[dict]:
    """The goal's latest ``limit`` rewards (run_id, score, comment, created_at), newest first."""
    return tx.query(
        "SELECT run_id, score, comment, created_at FROM rewards WHERE goal_id = ?"
        " ORDER BY created_at DESC, id DESC LIMIT ?",
        (goal_id, limit),
    )


# --- contracts and the evidence the core wrote under a run -----------------------------------------


def contract_document(tx, contract_id: str) -> dict | None:
    """The contract's ``document`` (JSON text) as a row."""
    return tx.one("SELECT document FROM contracts WHERE id = ?", (contract_id,))


def run_evidence_summaries(tx, run_id: str) -> list[dict]:
    """The run's evidence (id, kind, summary, actor, created_at), oldest first."""
    return tx.query("SELECT id, kind, summary, actor, created_at FROM evidence WHERE run_id = ?"
                    " ORDER BY created_at, id", (run_id,))


def step_evidence(tx, run_id: str) -> list[dict]:
    """The core's step results of the run (``command`` and ``step_unknown`` evidence: id, data), oldest first."""
    return tx.query("SELECT id, data FROM evidence WHERE run_id = ? AND kind IN ('command', 'step_unknown')"
                    " AND actor = 'core' ORDER BY created_at, id", (run_id,))


def refused_evidence(tx, run_id: str) -> list[dict]:
    """What the broker refused during the run (the core's ``refused`` evidence: data), oldest first."""
    return tx.query("SELECT data FROM evidence WHERE run_id = ? AND kind = 'refused' AND actor = 'core'"
                    " ORDER BY created_at, id", (run_id,))


def core_evidence_of_kind(tx, run_id: str, kind: str) -> list[dict]:
    """The data of the core's evidence of ``kind`` under the run, oldest first."""
    return tx.query("SELECT data FROM evidence WHERE run_id = ? AND kind = ? AND actor = 'core' ORDER BY created_at, id",
                    (run_id, kind))


def first_core_evidence(tx, run_id: str, kind: str) -> dict | None:
    """The data of one piece of the core's evidence of ``kind`` under the run."""
    return tx.one("SELECT data FROM evidence WHERE run_id = ? AND kind = ? AND actor = 'core' LIMIT 1",
                  (run_id, kind))


def step_outcomes(tx, run_id: str, unknown: str) -> list[dict]:
    """The data of the core's ``command`` and ``unknown``-kind evidence under the run."""
    return tx.query("SELECT data FROM evidence WHERE run_id = ? AND kind IN ('command', ?) AND actor = 'core'",
                    (run_id, unknown))


def command_evidence(tx, run_id: str) -> list[dict]:
    """The data of the core's ``command`` evidence under the run."""
    return tx.query("SELECT data FROM evidence WHERE run_id = ? AND kind = 'command' AND actor = 'core'",
                    (run_id,))
