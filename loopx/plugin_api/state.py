"""``loopx.api.state``: acting as a capability, and the state a capability keeps on a goal."""

from __future__ import annotations

from loopx.seam.capabilities import acting, delete_state as delete, drop_state as drop, get as capability
from loopx.seam.capabilities import get_state as get, put_state as put, set_state as set
from loopx.ledger.events.capability import set_rows as apply_rows

__all__ = ["acting", "apply_rows", "capability", "delete", "drop", "get", "put", "set"]
