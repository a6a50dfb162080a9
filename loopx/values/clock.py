"""Time, in one format everywhere: ISO 8601 UTC with microseconds and a ``Z``.

The format is fixed-width, so timestamps compare correctly as strings, in Python and in SQL.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

_FMT = "%Y-%m-%dT%H:%M:%S.%fZ"


def _text(stamp: datetime) -> str:
    """``stamp`` (UTC) in :data:`_FMT`: ``isoformat`` prints the same digits in half the time of
    ``strftime`` (a write stamps every event and lease)."""
    return stamp.isoformat(timespec="microseconds")[:26] + "Z"

#: Tests move the wall clock of real LoopX processes with this: the path of a file holding an
#: offset in seconds (the file is read at every call; a missing or empty file is 0). Durations
#: never use the wall clock (``time.monotonic``), so only what is dated moves.
#:
#: Only the environment a process *starts* with counts: the path is read once, when this module
#: is imported, so nothing a process does to its own environment later (the broker swapping in a
#: served command's identity) moves its clock. An agent never holds it: every ``LOOPX_*``
#: variable is removed from a step's environment (:meth:`loopx.turn.confine.Step.env`), the broker
#: takes no environment from a request, and a command it serves runs on the broker's own clock
#: (docs/security.md).
OFFSET_ENV = "LOOPX_CLOCK_OFFSET_FILE"
_OFFSET_FILE = os.environ.get(OFFSET_ENV) or None
_offset_in_process = [0.0]


def set_offset(seconds: float) -> None:
    """Move this process's wall clock by ``seconds`` (tests: a scripted clock jump, no sleeping)."""
    _offset_in_process[0] = float(seconds)


def offset_file() -> str | None:
    """The offset file this process was started with (see :data:`OFFSET_ENV`), or ``None``."""
    return _OFFSET_FILE


def _offset() -> float:
    extra = _offset_in_process[0]
    if not _OFFSET_FILE:
        return extra
    try:
        with open(_OFFSET_FILE) as f:
            return extra + float(f.read().strip() or 0)
    except (OSError, ValueError):
        return extra


def now() -> str:
    """The current time as a LoopX timestamp."""
    offset = _offset()
    stamp = datetime.now(timezone.utc)
    if offset:
        stamp = stamp + timedelta(seconds=offset)
    return _text(stamp)


def epoch(stamp: str | None = None) -> float:
    """Seconds since 1970 of ``stamp`` (default: :func:`now`)."""
    return parse(stamp or now()).timestamp()


def parse(stamp: str) -> datetime:
    """A LoopX timestamp back to an aware datetime.

    ``fromisoformat`` (3.11 reads the ``Z``) rather than ``strptime``, which imports
    ``_strptime``, ``locale`` and ``calendar``: milliseconds on a path that runs every turn.
    """
    return datetime.fromisoformat(stamp)


def add_seconds(stamp: str, seconds: float) -> str:
    """``stamp`` moved by ``seconds`` (may be negative)."""
    return _text(parse(stamp) + timedelta(seconds=seconds))


def seconds_between(start: str, end: str) -> float:
    """``end - start`` in seconds."""
    return (parse(end) - parse(start)).total_seconds()
