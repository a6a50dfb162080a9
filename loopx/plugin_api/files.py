"""``loopx.api.files``: files a step names (opened beneath the step's roots, never through a link),
and the artifacts a human reviews."""

from __future__ import annotations

from loopx.ledger.artifacts import directory as artifact_dir, of_goal as artifacts, read_verified as read_artifact
from loopx.ledger.artifacts import save as save_artifact
from loopx.sandbox.safe_open import hash_file as hash, open_file as open, read_beneath, read_file as read, write_beneath
from loopx.sandbox.safe_open import write_file as write

__all__ = ["artifact_dir", "artifacts", "hash", "open", "read", "read_artifact", "read_beneath", "save_artifact",
           "write", "write_beneath"]
