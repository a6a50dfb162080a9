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

from loopx.values import clock

FORMATS = ("text", "json")


class WorkerLog:
    """Writes the worker's events to ``stream`` (default stderr) in ``fmt``; safe across threads."""

    def __init__(self, worker_id: str, fmt: str = "text", stream=None):
        from loopx.values.progress import activity_on

        self.worker_id, self.fmt = worker_id, fmt
        self.stream = stream
        self._lock = threading.Lock()
        #: On a terminal the turns' agent activity is logged too (``activity`` lines); never in a pipe.
        self.activity = activity_on(stream or sys.stderr)

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
    if any(c.__module__.startswith("psycopg") and c.__name__ in ("OperationalError", "InterfaceError")
           for c in type(exc).__mro__):
        # The connection was lost (server stopped, network down). Subclasses count: a server shut
        # down under an open transaction raises AdminShutdown (an OperationalError) on ROLLBACK.
        return "registry_unavailable"
    if isinstance(exc, OSError) and exc.errno in (28, 122, 27):  # ENOSPC, EDQUOT, EFBIG
        return "disk_full"
    return None


#: What a registry that cannot be reached says when waiting will not help: a wrong URL, password,
#: database or schema. A worker refuses to start on these (exit 2) instead of backing off.
_PERMANENT = ("authentication failed", "does not exist", "no LoopX registry", "bad PostgreSQL URL",
              "no storage backend", "search_path names no")


def waits_at_start(exc: BaseException) -> bool:
    """Whether a worker starting while opening its registry fails with ``exc`` should back off and
    try again (the database is down, the disk full) rather than refuse to start: a registry file
    that does not exist, or a URL, password or database that is wrong, is refused at once."""
    code = passing_fault(exc)
    if code not in ("registry_unavailable", "disk_full"):
        return False
    return not any(part in str(exc) for part in _PERMANENT)


class Faults:
    """Registry faults in a row, for the worker: each one logged (a ``fault`` line) and waited out,
    the wait doubling from ``first`` up to ``cap`` seconds; :meth:`cleared` logs ``fault_cleared``.

    ``record(state)`` is told the fault as it stands (``None`` once it cleared): the worker keeps it
    where ``loopx status`` finds it without the registry (:func:`write_fault`). :attr:`last` is the
    latest fault that cleared (its code, from when to when, attempts), for the heartbeat."""

    def __init__(self, log, first: float = 0.5, cap: float = 30.0, record=None):
        self.log, self.first, self.cap, self.record = log, first, cap, record or (lambda state: None)
        self.count, self.since = 0, 0.0
        self.state: dict | None = None
        self.last: dict | None = None

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
        message = str(exc).strip()[:300]
        self.log("fault", what="registry", error=code, message=message, attempt=self.count, retry_in=delay)
        now = clock.now()
        self.state = {"code": code, "message": message, "since": (self.state or {}).get("since") or now,
                      "attempts": self.count, "last_at": now, "retry_in": delay}
        self.record(self.state)
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
        state = self.state or {}
        self.last = {"code": state.get("code"), "since": state.get("since"), "until": clock.now(),
                     "attempts": self.count, "message": state.get("message")}
        self.count, self.since, self.state = 0, 0.0, None
        self.record(None)
        return True


# ------------------------------------------------------------------ faults, where status finds them
#
# A worker backing off cannot write the registry (that is the fault), so the fault it waits out is
# kept in a small file of its own on this host - in the runtime directory (a tmpfs, writable when
# the registry's disk is full) - and read by `loopx status` / `worker list` beside its heartbeat.


def fault_dir() -> str:
    """``$XDG_RUNTIME_DIR/loopx/workers`` when there is one, else ``workers`` in LoopX's state directory."""
    import os

    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        return os.path.join(runtime, "loopx", "workers")
    from loopx.values.userdirs import state_dir

    return os.path.join(state_dir(), "workers")


def write_fault(worker_id: str, state: dict | None) -> None:
    """Keep (or, ``None``, remove) the fault worker ``worker_id`` is backing off from. Best effort:
    a fault file that cannot be written only means status does not show it."""
    import os

    path = os.path.join(fault_dir(), f"{worker_id}.json")
    try:
        if state is None:
            os.unlink(path)
            return
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({**state, "pid": os.getpid()}))
        os.replace(tmp, path)
    except OSError:
        pass


def backing_off(url: str) -> list[dict]:
    """The live workers of this host backing off from the registry ``url`` now (their fault files),
    for a ``loopx status`` that cannot reach that registry either."""
    import os

    found = []
    try:
        names = sorted(os.listdir(fault_dir()))
    except OSError:
        return []
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(fault_dir(), name)) as f:
                state = json.loads(f.read(64 * 1024))
        except (OSError, ValueError):
            continue
        if isinstance(state, dict) and state.get("registry") == shown_url(url) and isinstance(state.get("pid"), int) \
                and read_fault(str(state.get("worker") or ""), state["pid"]) is not None:
            found.append(state)
    return found


def read_fault(worker_id: str, pid: int) -> dict | None:
    """The fault a worker of this host (``pid``, alive) is backing off from now, or None."""
    import os

    if not worker_id.replace("-", "").isalnum():
        return None
    try:
        with open(os.path.join(fault_dir(), f"{worker_id}.json")) as f:
            state = json.loads(f.read(64 * 1024))
        if not isinstance(state, dict) or state.get("pid") != pid:
            return None
        os.kill(pid, 0)
    except ProcessLookupError:  # it died backing off: no fault of a live worker
        return None
    except (OSError, ValueError):
        return None
    return state
