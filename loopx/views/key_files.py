"""``loopx registry keys``: the integrity keys in the user's key directory, which registry each
belongs to, and the orphans a user may prune.

A key is ``<registry id>.key`` beside its rollback anchor (``<id>.anchor*``); a ``*.location``
record says where a registry of that id was last written (:func:`loopx.ledger.keys.remember_location`).
A key belongs to a registry when a location names its id and the registry found there still
carries that id. It is an **orphan** when no location names it, or every location naming it is
an SQLite file that is gone or now holds another registry. A PostgreSQL location is not
connected to here: its key is never called an orphan.

A registry file moved since it was last written is seen as gone: write to it once (or run
``loopx --registry NEW registry keys``, which records the registry in force) before pruning.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from loopx.ledger import keys
from loopx.values.errors import LoopxError
from loopx.store.queries.keys import file_meta_value

_ANCHOR_SUFFIXES = (".anchor", ".anchor-wal", ".anchor-shm", ".anchor-lock")


def _locations(d: Path) -> dict[str, list[tuple[Path, str]]]:
    """registry id -> [(location file, location)] from the ``*.location`` records."""
    out: dict[str, list[tuple[Path, str]]] = {}
    for f in d.glob("*.location"):
        try:
            rid, loc = (f.read_text().split("\n") + ["", ""])[:2]
        except OSError:
            continue
        if rid.strip():
            out.setdefault(rid.strip(), []).append((f, loc.strip()))
    return out


def sqlite_id(path: str) -> str | None:
    """The registry id an SQLite file holds (read-only; nothing created), or None."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            row = file_meta_value(conn, keys.META_ID)
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def _where(rid: str, loc: str) -> str:
    """``present`` (the registry there holds this id), ``gone`` (no file, or another registry
    there now) or ``unchecked`` (PostgreSQL: not connected to)."""
    if not loc.startswith("sqlite:"):
        return "unchecked"
    path = loc[len("sqlite:"):]
    if not os.path.exists(path):
        return "gone"
    return "present" if sqlite_id(path) == rid else "gone"


def _in_force(url: str | None) -> tuple[str | None, str | None]:
    """(id, location) of the registry this command would open, recorded as its location; or Nones."""
    from loopx.ledger.registry import resolve_url

    target = resolve_url(url)
    if "://" in target and not target.lower().startswith("sqlite"):
        return None, None  # PostgreSQL: listed by its location record only
    from loopx.store.sqlite import path_from_url

    path = str(path_from_url(target))
    if path == ":memory:" or not os.path.exists(path):
        return None, None
    rid = sqlite_id(path)
    if rid is None:
        return None, None
    loc = keys.sqlite_location(path)
    if keys.load(rid) is not None:
        keys.remember_location(loc, rid, once=True)  # the registry it opened: a move is seen here
    return rid, loc


def inventory(url: str | None = None) -> dict:
    """Every key in the key directory with the registries it belongs to, and which are orphans."""
    d = keys.key_dir()
    in_force_id, _ = _in_force(url)
    found = []
    by_id = _locations(d) if d.is_dir() else {}
    for key in sorted(d.glob("*.key")) if d.is_dir() else []:
        rid = key.name[: -len(".key")]
        places = [{"location": loc, "state": _where(rid, loc)} for _f, loc in by_id.get(rid, [])]
        mode = stat.S_IMODE(key.stat().st_mode)
        orphan = rid != in_force_id and all(p["state"] == "gone" for p in places)
        found.append({"registry_id": rid, "path": str(key), "mode": f"{mode:04o}", "registries": places,
                      "in_force": rid == in_force_id, "orphan": orphan})
    return {"key_dir": str(d), "keys": found, "orphans": sum(k["orphan"] for k in found)}


def prune(actor: str, url: str | None = None) -> dict:
    """Remove the orphan keys (with their anchors and stale location records); the user only."""
    if actor != "user":
        raise LoopxError("actor_forbidden", "only the user prunes integrity keys (not from inside a step)")
    listed = inventory(url)
    d = Path(listed["key_dir"])
    by_id = _locations(d) if d.is_dir() else {}
    removed = []
    for k in listed["keys"]:
        if not k["orphan"]:
            continue
        rid = k["registry_id"]
        files = [Path(k["path"]), *(d / f"{rid}{s}" for s in _ANCHOR_SUFFIXES), *(f for f, _ in by_id.get(rid, []))]
        for f in files:
            try:
                f.unlink()
            except FileNotFoundError:
                pass
        removed.append(rid)
    return {**inventory(url), "pruned": removed}
