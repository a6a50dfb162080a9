"""Evidence (append-only observations) and human_reward overlays."""

from __future__ import annotations

from loopx.model._value import Value, value


@value
class Evidence(Value):
    """An append-only observation bound to a run."""

    id: str
    goal_id: str
    run_id: str | None
    kind: str
    summary: str
    actor: str
    created_at: str
    data: dict | list | None = None
    file_path: str | None = None
    file_sha256: str | None = None


@value
class Reward(Value):
    """The ``human_reward`` overlay: a user's score in [-1, 1] on one run."""

    id: str
    goal_id: str
    run_id: str
    score: float
    author: str
    created_at: str
    comment: str | None = None
