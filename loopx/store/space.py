"""Telling "the disk is full" apart from other storage failures, so it gets its own code.

A write that cannot complete for lack of space is refused with ``disk_full`` (one line, exit
2): the transaction is rolled back, so the registry is as it was. SQLite says SQLITE_FULL when
``write()`` fails with ENOSPC, but a full disk also surfaces as a generic I/O error (the WAL's
shared-memory file cannot grow, or a file-size limit, ``RLIMIT_FSIZE``, makes ``write()`` fail
with EFBIG); for those the free space beside the file and the process's file-size limit decide.
"""

from __future__ import annotations

import errno
import os

#: errno values that mean: no room to write.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_SQLITE_FULL, _SQLITE_IOERR = 13, 10
_MARGIN = 256 * 1024  # less free than this beside the registry: a failed write was for lack of space


def short_of_space(path) -> bool:
    """Whether the file system holding ``path`` (a file or directory) has almost no room left,
    or a file there has reached this process's file-size limit (``RLIMIT_FSIZE``)."""
    from pathlib import Path

    p = Path(path)
    folder = p if p.is_dir() else p.parent
    try:
        st = os.statvfs(folder)
        if st.f_bavail * st.f_frsize < _MARGIN:
            return True
    except (OSError, AttributeError):
        pass
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return False
    if limit == resource.RLIM_INFINITY:
        return False
    names = [p] if not p.is_dir() else list(p.iterdir())
    names += [p.with_name(p.name + s) for s in ("-wal", "-shm", "-journal")] if not p.is_dir() else []
    for name in names:
        try:
            if name.stat().st_size + 64 * 1024 > limit:
                return True
        except OSError:
            continue
    return False


def sqlite_out_of_space(exc, path) -> bool:
    """Whether SQLite error ``exc`` on the registry at ``path`` means the disk is full."""
    code = getattr(exc, "sqlite_errorcode", None)
    text = str(exc)
    if (code is not None and code & 0xFF == _SQLITE_FULL) or "database or disk is full" in text:
        return True
    io_error = (code is not None and code & 0xFF == _SQLITE_IOERR) or "disk I/O error" in text
    return io_error and short_of_space(path)


def disk_full(where, detail: str = "") -> "LoopxError":  # noqa: F821 (imported lazily)
    """The ``disk_full`` refusal for a write at ``where``."""
    from loopx.values.errors import LoopxError

    extra = f" ({detail})" if detail else ""
    return LoopxError("disk_full", f"no space left to write {where}{extra}: nothing was written; "
                      "free some space (or raise the file-size limit) and run the command again")
