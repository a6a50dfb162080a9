"""``loopx.api.evidence``: a goal's evidence, read and recorded."""

from __future__ import annotations

from loopx.domain.evidence import list_for, load_evidence as load, of_goal as list, record as add, record_in as add_in

__all__ = ["add", "add_in", "list", "list_for", "load"]
