"""What ``loopx registry info`` reports: which registry is in use, why, and what it holds."""

from __future__ import annotations

import os

from loopx.values.errors import LoopxError

_SOURCES = {
    "flag": "the --registry flag",
    "env": "the LOOPX_REGISTRY environment variable",
    "default": "the default location (platformdirs user data directory)",
}


def describe(url: str | None, origin: str) -> dict:
    """The registry ``url`` (None: the default) as a JSON-able dict; opened read-only, never created."""
    from loopx.ledger.registry import Registry, display_url, resolve_url
    from loopx.store import schema

    resolved = resolve_url(url)
    postgres = resolved.split("://", 1)[0].lower().startswith("postgres")
    out = {
        "url": display_url(resolved),
        "source": origin,
        "source_text": _SOURCES[origin],
        "backend": "postgresql" if postgres else "sqlite",
        "exists": True,
        "schema_version": None,
        "schema_supported": schema.CURRENT_VERSION,
        "size_bytes": None,
        "goals": 0,
        "goals_closed": 0,
        "events": 0,
    }
    if not postgres:
        from loopx.store.sqlite import path_from_url

        path = path_from_url(resolved)
        out["path"] = str(path.resolve())
        if not path.exists():
            out["exists"] = False
            return out
        # The file and its write-ahead log: what the registry really takes on disk.
        out["size_bytes"] = sum(os.path.getsize(p) for p in (path, f"{path}-wal") if os.path.exists(p))
    try:
        reg = Registry.open(resolved, readonly=True)
    except LoopxError as err:
        if err.code == "registry_unavailable" and (not postgres or err.message.startswith("no LoopX registry")):
            out["exists"] = False
            return out
        raise
    with reg:
        out["schema_version"] = reg.store.schema_version()
        with reg.read() as tx:
            from loopx.ledger import keys
            from loopx.store.queries import ledger_info as queries

            row = queries.goal_counts(tx)
            out["goals"], out["goals_closed"] = int(row["n"] or 0), int(row["c"] or 0)
            out["events"] = queries.event_count(tx)

            ring = keys.keyring(tx)
            # keyed, legacy (not keyed yet: the first open for writing keys it) or missing
            out["registry_id"], out["integrity"] = ring.registry_id, ring.state
            out["key_path"] = str(keys.key_path(ring.registry_id)) if ring.registry_id else None
            if postgres:
                out["size_bytes"] = queries.postgres_size(tx)
    return out
