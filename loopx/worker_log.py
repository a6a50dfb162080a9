"""The worker's log: one line per thing that happened, to stderr, flushed at once.

``journalctl -f`` (or a terminal) shows what a running ``loopx worker`` does as it does it: a
turn starting and ending, a lease taken, refused or lost, a notification sent, a fault. Each
line is one event with a fixed set of fields (docs/worker.md lists them):

* ``text`` (the default): ``2026-12-03T09:10:00Z turn_end goal=g-1 run=r-2 outcome=ok ...``,
  for people;
* ``json``: JSON Lines, one object per line with ``at``, ``event``, ``worker`` and the event's
  fields, for ``jq`` and log collectors.

A line that cannot be written (stderr closed) is dropped: logging never stops the worker.
"""

from __future__ import annotations

import json
import sys
import threading

from loopx import clock

FORMATS = ("text", "json")


class WorkerLog:
    """Writes the worker's events to ``stream`` (default stderr) in ``fmt``; safe across threads."""

    def __init__(self, worker_id: str, fmt: str = "text", stream=None):
        self.worker_id, self.fmt = worker_id, fmt
        self.stream = stream
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields) -> None:
        """Write one line for ``event`` with ``fields`` (None values are left out of the text)."""
        record = {"at": clock.now(), "event": event, "worker": self.worker_id, **fields}
        if self.fmt == "json":
            line = json.dumps(record, sort_keys=False, default=str)
        else:
            parts = [record["at"], event]
            for key, value in fields.items():
                if value is None:
                    continue
                if isinstance(value, float):
                    value = f"{value:.3f}".rstrip("0").rstrip(".") if value else "0"
                elif isinstance(value, (list, dict)):
                    value = json.dumps(value, default=str)
                text = str(value)
                parts.append(f"{key}={json.dumps(text) if (' ' in text or not text) else text}")
            line = " ".join(parts)
        stream = self.stream or sys.stderr
        with self._lock:
            try:
                stream.write(line + "\n")
                stream.flush()
            except (OSError, ValueError):  # stderr gone: the worker goes on without its log
                pass


def turn_end(log, goal_id: str, executor: str, out: dict, run: dict | None, seconds: float, exit_code,
             output: str) -> None:
    """Log a turn's end from its answer ``out`` (``loopx turn``'s JSON) and its run's row (tokens,
    cost); a turn that gave no answer is a fault too, with the last line it printed."""
    fields = {"goal": goal_id, "run": out.get("run_id"), "executor": executor, "decision": out.get("decision"),
              "outcome": out.get("outcome"), "duration_seconds": round(seconds, 3),
              "tokens": int(run["tokens"]) if run else 0, "cost": float(run["cost"]) if run else 0.0,
              "exit_code": exit_code}
    if not out:
        fields["output"] = output.strip()[-300:]
    log("turn_end", **fields)
    if not out:
        log("fault", what="turn", goal=goal_id, exit_code=exit_code,
            message=(output.strip().splitlines() or ["no output"])[-1][:300])


def shown_url(url: str) -> str:
    """A registry URL fit for a log line: a password in a PostgreSQL URL is left out."""
    import re

    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


#: Registry errors a worker waits out (backs off, logs a ``fault`` line, carries on): the disk
#: is full, the database cannot be reached, the registry file is briefly missing or unreadable.
PASSING_CODES = frozenset({"disk_full", "registry_unavailable", "registry_not_found", "registry_readonly"})


def passing_fault(exc: BaseException) -> str | None:
    """The fault's code if ``exc`` is one the worker outlives (see :data:`PASSING_CODES`), else None."""
    import sqlite3

    code = getattr(exc, "code", None)
    if isinstance(code, str):
        return code if code in PASSING_CODES else None
    if isinstance(exc, sqlite3.OperationalError):
        return "registry_unavailable"
    if type(exc).__module__.startswith("psycopg") and type(exc).__name__ in ("OperationalError", "InterfaceError"):
        return "registry_unavailable"  # the connection was lost (server stopped, network down)
    if isinstance(exc, OSError) and exc.errno in (28, 122, 27):  # ENOSPC, EDQUOT, EFBIG
        return "disk_full"
    return None


class Faults:
    """Registry faults in a row, for the worker: each one logged (a ``fault`` line) and waited out,
    the wait doubling from ``first`` up to ``cap`` seconds; :meth:`cleared` logs ``fault_cleared``."""

    def __init__(self, log, first: float = 0.5, cap: float = 30.0):
        self.log, self.first, self.cap = log, first, cap
        self.count, self.since = 0, 0.0

    def wait(self, exc: BaseException, stopping, wake) -> None:
        """Log ``exc`` and wait before the next try (``wake``, an Event, is polled; the wait ends early
        once ``stopping()``); an error that is not a passing fault is raised again."""
        import time

        code = passing_fault(exc)
        if code is None:
            raise exc
        self.count += 1
        self.since = self.since or time.monotonic()
        delay = min(self.cap, self.first * 2 ** min(self.count - 1, 16))
        self.log("fault", what="registry", error=code, message=str(exc)[:300], attempt=self.count, retry_in=delay)
        end = time.monotonic() + delay
        while not stopping() and time.monotonic() < end:
            wake.wait(min(0.5, max(0.0, end - time.monotonic())))
            wake.clear()  # a turn's end is seen by the next pass anyway

    def cleared(self) -> bool:
        """After a pass that went through: whether it ended a run of faults (then logged)."""
        import time

        if not self.count:
            return False
        self.log("fault_cleared", what="registry", faults=self.count, seconds=round(time.monotonic() - self.since, 3))
        self.count, self.since = 0, 0.0
        return True
