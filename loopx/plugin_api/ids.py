"""``loopx.api.ids``: new ids, and the checks the CLI runs on ids, names and text."""

from __future__ import annotations

from loopx.values.validate import check_id as check, check_name, check_text, new_id as new

__all__ = ["check", "check_name", "check_text", "new"]
