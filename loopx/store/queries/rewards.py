"""Rewards and the training records ``reward export`` joins them into (:mod:`loopx.domain.rewards`; the
feedback a contract carries is read with the goal's past, :mod:`.runs`)."""

from __future__ import annotations


def goal_rewards(tx, goal_id: str) -> list[dict]:
    """The goal's reward rows, oldest first."""
    return tx.query("SELECT * FROM rewards WHERE goal_id = ? ORDER BY created_at, id", (goal_id,))


def every_reward(tx) -> list[dict]:
    """Every reward row, oldest first."""
    return tx.query("SELECT * FROM rewards ORDER BY created_at, id")


def reward_row(tx, reward_id: str) -> dict | None:
    """The reward row ``reward_id``."""
    return tx.one("SELECT * FROM rewards WHERE id = ?", (reward_id,))


def run_goal(tx, run_id: str) -> dict | None:
    """The goal of run ``run_id`` (goal_id) as a row."""
    return tx.one("SELECT goal_id FROM runs WHERE id = ?", (run_id,))


def contract_row(tx, contract_id: str) -> dict | None:
    """The ``contracts`` row of ``contract_id``."""
    return tx.one("SELECT * FROM contracts WHERE id = ?", (contract_id,))


def evidence_count(tx, run_id: str) -> int:
    """How much evidence the run has."""
    return tx.one("SELECT COUNT(*) AS n FROM evidence WHERE run_id = ?", (run_id,))["n"]


def first_evidence(tx, run_id: str, limit: int) -> list[dict]:
    """The run's first ``limit`` evidence items (id, kind, summary, actor, created_at, file_sha256)."""
    return tx.query(
        "SELECT id, kind, summary, actor, created_at, file_sha256 FROM evidence WHERE run_id = ?"
        " ORDER BY created_at, id LIMIT ?",
        (run_id, limit),
    )
