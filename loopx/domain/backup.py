"""A backup of an SQLite registry file, taken before a repair writes anything.

The repair API offers it (``RepairSession.backup`` in ``loopx.api``) so that a repair capability never opens
the registry file itself.
"""

from __future__ import annotations

from loopx.values.errors import LoopxError


def backup(reg) -> str | None:
    """Copy an SQLite registry next to itself, as ``FILE.bak-TIME``, before a repair writes
    (online backup: consistent); returns its path, or ``None`` for PostgreSQL or a memory registry
    (back those up with ``pg_dump`` or ``loopx registry copy``).

    The name is reserved atomically (``O_EXCL``), so two repairs at once never pick the same
    one; the copy is written beside it under a hidden name and renamed over it once whole, so a
    repair killed part way leaves that name empty, never a half copy; on a full disk the half-written copy is removed and the repair stops with
    ``disk_full`` before anything is repaired.
    """
    import fcntl
    import os
    import secrets
    import sqlite3

    from loopx.values.clock import now

    path = reg.store.path
    if path is None or str(path) == ":memory:":
        return None  # PostgreSQL: back up with pg_dump or `loopx registry copy`
    _sweep(path)
    stamp = now().replace(":", "").replace("-", "").split(".")[0]
    dest = None
    for n in range(1, 1000):
        candidate = path.with_name(f"{path.name}.bak-{stamp}" + (f"-{n}" if n > 1 else ""))
        try:
            os.close(os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            continue
        except OSError as exc:
            if _full(exc, path):
                raise _no_room(path, exc) from None
            raise LoopxError("registry_unavailable", f"cannot back up {path} before repairing: {exc}") from None
        dest = candidate
        break
    if dest is None:  # a thousand repairs in one second: give this one a random suffix
        dest = path.with_name(f"{path.name}.bak-{stamp}-{secrets.token_hex(4)}")
    # Written under a hidden name and renamed over the reserved one once whole: a repair killed
    # part way leaves its reserved name empty, never a half copy (with a hot journal) under it.
    part = dest.with_name(f".{dest.name}.part")
    try:
        # Made here, as the reserved name was: owner-only like the registry, and never a link
        # someone left at that name (a leftover of a killed fix given this name is replaced).
        part.unlink(missing_ok=True)
        held = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(held, fcntl.LOCK_EX)  # while this fix lives: a later one sweeps only a dead one's
            src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                dst = sqlite3.connect(part)
                try:
                    src.backup(dst)
                finally:
                    dst.close()
            finally:
                src.close()
            os.replace(part, dest)
        finally:
            os.close(held)
    except (OSError, sqlite3.Error) as exc:
        for leftover in (dest, part, part.with_name(part.name + "-journal")):
            try:
                leftover.unlink()
            except OSError:
                pass
        raise _no_room(path, exc) if _full(exc, path) else LoopxError(
            "registry_unavailable", f"could not back up {path} before repairing ({exc}); nothing was repaired") \
            from None
    return str(dest)


#: A hidden copy no fix has held for this long, whose lock is free, was left by a killed fix.
STALE_SECONDS = 60.0


def _sweep(path) -> None:
    """Remove what a fix killed while backing up left beside ``path``: its hidden
    ``.FILE.bak-TIME.part`` (as large as the registry), that copy's journal, and the empty name it
    had reserved. A copy being written is never touched: its fix holds a lock on it (``flock``);
    a moment-old one, whose fix may not have taken the lock yet, is left for a later fix."""
    import fcntl
    import glob
    import os
    import time
    from pathlib import Path

    folder, name = os.path.split(str(path))
    for part in glob.glob(os.path.join(glob.escape(folder), "." + glob.escape(name) + ".bak-*.part")):
        try:
            fd = os.open(part, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if time.time() - os.fstat(fd).st_mtime < STALE_SECONDS:
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # OSError: a live fix is writing it
            reserved = Path(folder, os.path.basename(part)[1:-len(".part")])
            for leftover in (part, part + "-journal"):
                Path(leftover).unlink(missing_ok=True)
            if reserved.is_file() and not reserved.is_symlink() and reserved.stat().st_size == 0:
                reserved.unlink(missing_ok=True)
        except OSError:
            continue
        finally:
            os.close(fd)


def _full(exc, path) -> bool:
    import errno

    if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return True
    text = str(exc)
    return "disk is full" in text or "disk I/O error" in text


def _no_room(path, exc):
    return LoopxError("disk_full", f"no space left to back up {path} before repairing ({exc}); nothing was"
                      " repaired and no backup was left behind: free some space and run it again")
