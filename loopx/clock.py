"""Time, in one format everywhere: ISO 8601 UTC with microseconds and a ``Z``.

The format is fixed-width, so timestamps compare correctly as strings, in Python and in SQL.
"""

from __future__ import annotations

try:
    # The C implementation directly: ``import datetime`` first executes the whole pure-Python
    # module (~1.6 ms) only to replace it with these, on a path that runs before every turn.
    from _datetime import datetime, timedelta, timezone
except ImportError:  # pragma: no cover - Pythons without the C accelerator
    from datetime import datetime, timedelta, timezone

_FMT = "%Y-%m-%dT%H:%M:%S.%fZ"


def now() -> str:
    """The current time as a LoopX timestamp."""
    return datetime.now(timezone.utc).strftime(_FMT)


def parse(stamp: str) -> datetime:
    """A LoopX timestamp back to an aware datetime.

    ``fromisoformat`` (3.11 reads the ``Z``) rather than ``strptime``, which imports
    ``_strptime``, ``locale`` and ``calendar``: milliseconds on a path that runs every turn.
    """
    return datetime.fromisoformat(stamp)


def add_seconds(stamp: str, seconds: float) -> str:
    """``stamp`` moved by ``seconds`` (may be negative)."""
    return (parse(stamp) + timedelta(seconds=seconds)).strftime(_FMT)


def seconds_between(start: str, end: str) -> float:
    """``end - start`` in seconds."""
    return (parse(end) - parse(start)).total_seconds()
