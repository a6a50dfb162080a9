"""``loopx.api.pages``: pages a capability serves, announced to the status page."""

from __future__ import annotations

from loopx.ledger.served_pages import announce, dashboard_stylesheet, registry_id, withdraw

__all__ = ["announce", "dashboard_stylesheet", "registry_id", "withdraw"]
