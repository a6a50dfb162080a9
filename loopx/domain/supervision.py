"""What ``loopx worker`` keeps in the registry: settings, heartbeats, goal leases, clock jumps.

None of this is a goal's state: it lives in tables outside the ledger (schema v5), written in
one transaction each, never by an executor.

* **Settings** (``loopx config set KEY VALUE``, user only): ``executor`` (the worker's default
  executor), ``executor.<goal id>`` (one goal's: an executor name, or ``none`` to keep the worker
  away from it), ``notify.command``, ``notify.webhook``, ``notify.min_interval_seconds``, and each
  step's limits ``limits.memory_mb``, ``limits.processes``, ``limits.cpu_seconds`` (loopx/sandbox/limits.py).
* **Heartbeats**: one row per worker (id, host, pid, started, last beat, the goals it is taking
  turns on now, stopped). A worker whose last beat is older than three beats and that did not
  say it stopped is shown as *died*.
* **Goal leases with fencing tokens**: a worker takes a goal only by winning its lease
  (:func:`acquire`), which raises the goal's token by one; it renews while its turn runs
  (:func:`renew`, which fails once another worker has taken the goal over). The turn's
  should-run checks the token in the transaction that opens the run (:func:`check_fence`), so a
  worker that was paused past its lease and woke up cannot open a second run of the goal: the
  newer token wins, on one machine or many sharing a PostgreSQL registry.
* **Clock jumps** the worker noticed (wall clock against monotonic clock).
"""

from __future__ import annotations

import json

from loopx.values import clock
from loopx.values.errors import LoopxError
from loopx.store.queries import supervision as q

SETTING_KEYS = ("executor", "notify.command", "notify.webhook", "notify.min_interval_seconds",
                "limits.memory_mb", "limits.processes", "limits.cpu_seconds")
#: ``world.grant`` (every goal) and ``world.grant.<goal id>``: paths (``:``-separated, absolute) a
#: step's world shows read-only beyond what it shows anyway: a directory, a file, a socket
#: (docs/security.md, "The world a step sees").
GRANT = "world.grant"
BEAT_SECONDS = 10.0
DIED_AFTER_BEATS = 3


# ------------------------------------------------------------------------------ settings


def check_key(key: str) -> str:
    """A setting's name: one of :data:`SETTING_KEYS`, or ``executor.<goal id>``."""
    if key in SETTING_KEYS:
        return key
    if key.startswith("executor.g-") and 3 < len(key) <= 100 and key[9:].replace("-", "").isalnum():
        return key
    if key == GRANT or (key.startswith(GRANT + ".g-") and len(key) <= 100 and key[12:].replace("-", "").isalnum()):
        return key
    raise LoopxError("invalid_argument", f"unknown setting {key[:60]!r} (known: {', '.join(SETTING_KEYS)},"
                                         " executor.<goal id>)")


def world_grants(values: dict, goal_id: str) -> list[str]:
    """The paths the user granted the steps of ``goal_id`` (:data:`GRANT`)."""
    found = f"{values.get(GRANT) or ''}:{values.get(f'{GRANT}.{goal_id}') or ''}".split(":")
    return [p for p in found if p.startswith("/")]


def settings(tx) -> dict[str, str]:
    """Every setting, ``{key: value}``."""
    return {r["key"]: r["value"] for r in q.all_settings(tx)}


def set_setting(reg, actor: str, key: str, value: str | None) -> dict:
    """Set (or with ``value=None`` remove) one setting; user only."""
    from loopx.ledger import log as ledger

    key = check_key(key)
    if ledger.role(actor) != ledger.USER:
        raise LoopxError("actor_forbidden", f"only a user may change settings; {actor} may not")
    if value is not None:
        if not isinstance(value, str) or len(value) > 4096 or any(ord(c) < 32 for c in value):
            raise LoopxError("invalid_argument", "a setting is one line of text, at most 4096 characters")
        if key.startswith(GRANT) and not all(p.startswith("/") for p in value.split(":")):
            raise LoopxError("invalid_argument", f"{key} is a list of absolute paths separated by ':'")
        if key == "notify.min_interval_seconds":
            try:
                float(value)
            except ValueError:
                raise LoopxError("invalid_argument", f"{key} is a number of seconds") from None
        if key == "notify.webhook" and not value.startswith(("http://", "https://")):
            raise LoopxError("invalid_argument", f"{key} is an http:// or https:// URL")
        if key.startswith("limits."):
            from loopx.sandbox import limits

            try:
                value = limits.check_setting(key, value)
            except ValueError as exc:
                raise LoopxError("invalid_argument", str(exc)) from None
    at = clock.now()

    def work(tx):
        q.put_setting(tx, key, value, at)
        return {"key": key, "value": value, "updated_at": at}

    return reg.store.write(work)


def executor_for(values: dict, goal_id: str, default: str) -> str | None:
    """The executor the worker uses for ``goal_id`` (``None``: the goal is left alone)."""
    name = values.get(f"executor.{goal_id}") or values.get("executor") or default
    return None if name == "none" else name


# ------------------------------------------------------------------------------ heartbeats


def beat(reg, worker_id: str, *, host: str, pid: int, started_at: str, goals: list[str], info: dict | None = None,
         stopped: bool = False) -> dict | None:
    """Record that worker ``worker_id`` is alive now (or, ``stopped``, that it stopped cleanly).

    Returns the stop request a user left for it (:func:`request_stop`), or None: a worker reads
    it at every heartbeat, wherever it runs."""
    at = clock.now()

    def work(tx):
        text = json.dumps(sorted(goals))
        extra = dict(info or {})
        row = q.worker_info(tx, worker_id)
        if row is None:
            q.add_worker(tx, worker_id, host, pid, started_at, at, text, at if stopped else None,
                         json.dumps(extra, sort_keys=True))
            return None
        asked = json.loads(row["info"] or "{}").get("stop_requested")
        if asked:  # the worker's own info never drops a user's request
            extra["stop_requested"] = asked
        q.worker_beat(tx, worker_id, at, text, at if stopped else None, json.dumps(extra, sort_keys=True))
        return asked

    return reg.store.write(work)


def stop_requested(tx, worker_id: str) -> dict | None:
    """The stop request a user left for ``worker_id`` (:func:`request_stop`), or None."""
    row = q.worker_info(tx, worker_id)
    return json.loads(row["info"] or "{}").get("stop_requested") if row else None


def request_stop(reg, worker_id: str, *, by: str) -> dict:
    """Ask worker ``worker_id`` to stop: it reads the request at its next heartbeat (or at once, when it
    sees the registry change) and stops as on SIGTERM, exiting 0. One transaction; the request is kept
    in the worker's row (``info.stop_requested``: when, by whom)."""
    if by != "user":  # an agent must not stop the worker that runs it (the broker refuses it first)
        raise LoopxError("actor_forbidden", f"only a user may stop a worker; {by} may not")
    asked = {"at": clock.now(), "by": by}

    def work(tx):
        row = q.worker_stop_state(tx, worker_id)
        if row is None:
            raise LoopxError("worker_not_found", f"no worker {worker_id!r} (see `loopx worker list`)")
        info = json.loads(row["info"] or "{}")
        info.setdefault("stop_requested", asked)
        q.set_worker_info(tx, worker_id, json.dumps(info, sort_keys=True))
        return info["stop_requested"]

    return reg.store.write(work)


def workers(tx, now: str | None = None, *, limit: int = 20) -> list[dict]:
    """The workers seen lately, newest beat first, each with ``state``: running, stopped or died;
    ``fault``: the registry fault a running worker of this host is backing off from now (``code``,
    ``since``, ``attempts``, ``retry_in``, ``message``), else None; ``last_fault``: the latest one it
    recovered from (``code``, ``since``, ``until``, ``attempts``)."""
    now = now or clock.now()
    try:
        rows = q.recent_workers(tx, limit)
    except Exception:  # a registry older than schema v5 opened read-only: no workers table yet
        return []
    import socket

    from loopx.values.worker_log import read_fault

    host = socket.gethostname()
    out = []
    for r in rows:
        info = json.loads(r.get("info") or "{}")
        beat_every = float(info.get("beat_seconds") or BEAT_SECONDS)
        # A worker of this host backing off from a fault cannot beat (it cannot write the
        # registry): its fault file says so, and that it is alive.
        fault = read_fault(r["id"], int(r["pid"])) if not r["stopped_at"] and r["host"] == host else None
        if r["stopped_at"]:
            state = "stopped"
        elif fault is None and clock.seconds_between(r["beat_at"], now) > DIED_AFTER_BEATS * beat_every:
            state = "died"
        else:
            state = "running"
        out.append({"id": r["id"], "host": r["host"], "pid": int(r["pid"]), "started_at": r["started_at"],
                    "last_beat_at": r["beat_at"], "goals": json.loads(r["goals"]), "state": state,
                    "stopped_at": r["stopped_at"], "concurrency": info.get("concurrency"),
                    "clock_jumps": info.get("clock_jumps", 0), "retry_seconds": info.get("retry_seconds"),
                    "turns": info.get("turns") or [], "stop_requested": info.get("stop_requested"),
                    "fault": fault, "last_fault": info.get("last_fault")})
    return out


# ------------------------------------------------------------------------------ leases


def acquire(reg, goal_id: str, worker_id: str, lease_seconds: float) -> int | None:
    """Take ``goal_id``'s lease for ``worker_id`` when it is free (or already ours): its new fencing
    token, or ``None`` when another worker holds it. One transaction; the token only grows."""
    now = clock.now()
    until = clock.add_seconds(now, lease_seconds)

    def work(tx):
        row = q.held_lease(tx, goal_id)
        if row["worker_id"] != worker_id and row["expires_at"] > now and _owner_alive(tx, row["worker_id"]):
            return None
        token = int(row["token"]) + 1
        q.take_lease(tx, goal_id, worker_id, token, until)
        return token

    return reg.store.write(work)


def _owner_alive(tx, worker_id: str) -> bool:
    """Whether the worker holding a lease may still be running: not if it stopped cleanly, nor if it
    ran on this host and its process is gone (that pid reused by another process, or the machine
    rebooted, counts as gone: its heartbeat's ``owner``) - so a lease stamped by a wrong clock (a
    year ahead) never outlives its owner. An owner on another host is trusted until its lease expires."""
    import os
    import socket

    row = q.worker_owner(tx, worker_id)
    if row is None:
        return True
    if row["stopped_at"]:
        return False
    owner = json.loads(row["info"] or "{}").get("owner")
    if isinstance(owner, dict) and owner.get("pid"):
        # Its process by host, boot and start time: a pid that a later process reused, or a
        # reboot since, does not keep a dead worker's lease alive.
        from loopx.domain.claims import gone

        return not gone(owner)
    if row["host"] != socket.gethostname():
        return True
    try:
        os.kill(int(row["pid"]), 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def renew(reg, leases: dict[str, int], worker_id: str, lease_seconds: float) -> list[str]:
    """Extend the leases ``{goal id: token}`` this worker holds; returns the goals it lost."""
    if not leases:
        return []
    until = clock.add_seconds(clock.now(), lease_seconds)

    def work(tx):
        lost = []
        for goal_id, token in leases.items():
            row = q.lease_token(tx, goal_id)
            if row is None or row["worker_id"] != worker_id or int(row["token"]) != token:
                lost.append(goal_id)
            else:
                q.extend_lease(tx, goal_id, until)
        return lost

    return reg.store.write(work)


def release(reg, goal_id: str, worker_id: str, token: int) -> None:
    """Give a lease back (it expires now; the row, and so the token, stays)."""
    def work(tx):
        q.end_lease(tx, goal_id, worker_id, token, clock.add_seconds(clock.now(), -0.001))

    reg.store.write(work)


def check_fence(tx, goal_id: str, owner: dict | None, now: str) -> None:
    """Inside should-run's transaction: refuse (``lease_lost``) a worker's turn whose lease token is not current."""
    if not owner or owner.get("lease_token") is None:
        return
    row = q.lease(tx, goal_id)
    if row is None or row["worker_id"] != owner.get("worker") or int(row["token"]) != int(owner["lease_token"]) \
            or row["expires_at"] <= now:
        raise LoopxError("lease_lost", f"worker {owner.get('worker')} no longer holds goal {goal_id}'s lease"
                                       f" (token {owner.get('lease_token')}): another worker took it over")


# ------------------------------------------------------------------------------ clock jumps


def record_jump(reg, worker_id: str, jump_seconds: float, detail: dict) -> None:
    """Record a wall-clock jump a worker noticed."""
    at = clock.now()

    def work(tx):
        q.add_clock_jump(tx, worker_id, at, float(jump_seconds), json.dumps(detail, sort_keys=True))

    reg.store.write(work)


def clock_jumps(tx, *, limit: int = 10) -> list[dict]:
    """The latest clock jumps workers noticed, newest first."""
    try:
        rows = q.recent_clock_jumps(tx, limit)
    except Exception:
        return []
    return [{"worker": r["worker_id"], "seen_at": r["seen_at"], "jump_seconds": round(float(r["jump_seconds"]), 3),
             **json.loads(r["detail"])} for r in rows]


# ------------------------------------------------------------------------------ what is due


def candidates(tx, now: str, goal_ids: list[str] | None = None) -> list[dict]:
    """Open goals with what the worker's schedule needs: ``{"id", "revision", "cadence", "last_opened",
    "attention", "failed_streak", "last_failed_at"}``; ``last_opened`` is the latest run opened at a
    believable time (not after ``now``); the failures in a row (:func:`failed_streak`) are read
    only for goals whose newest finished run failed.

    One query over the open goals (or over ``goal_ids``): the worker calls it at start and then
    only for goals whose ledger moved.
    """
    out = []
    chunks = [None] if goal_ids is None else [goal_ids[i:i + 500] for i in range(0, len(goal_ids), 500)]
    for chunk in chunks:
        if chunk is not None and not chunk:
            continue
        for r in q.open_goals_due(tx, now, chunk):
            limits = json.loads(r["limits"] or "{}")
            streak, last = failed_streak(tx, r["id"]) if "run_failed" in (r["attention"] or "") else (0, None)
            out.append({"id": r["id"], "revision": int(r["revision"]), "cadence": limits.get("cadence_seconds"),
                        "last_opened": r["last_opened"], "attention": r["attention"] or "",
                        "failed_streak": streak, "last_failed_at": last})
    return out


#: The longest a worker waits before trying a failing goal again.
RETRY_CAP_SECONDS = 3600.0
_STREAK_READ = 13  # 2**12 retry intervals are past the cap for any retry interval of a second or more


def failed_streak(tx, goal_id: str) -> tuple[int, str | None]:
    """``(failed turns in a row, when the newest of them finished)`` for ``goal_id``: its newest
    finished runs that failed, up to the first that did not (runs opened before a user's
    ``project-prompt retry`` do not count). ``(0, None)`` when its newest finished run did not fail."""
    retried = q.last_retried_at(tx, goal_id)
    since = (retried or {}).get("at") or ""
    n, last = 0, None
    for r in q.newest_finished_runs(tx, goal_id, _STREAK_READ):
        if r["outcome"] != "failed" or (since and r["opened_at"] <= since):
            break
        n += 1
        last = last or r["finished_at"]
    return n, last


def retry_at(streak: int, last_finished: str | None, retry_seconds: float) -> str | None:
    """When a worker tries a goal again after ``streak`` failed turns in a row, the newest finished
    at ``last_finished``: ``retry_seconds`` after it, doubling with each failure, at most
    :data:`RETRY_CAP_SECONDS`. ``None`` when nothing failed."""
    if not streak or last_finished is None:
        return None
    return clock.add_seconds(last_finished, min(RETRY_CAP_SECONDS, float(retry_seconds) * 2 ** min(streak - 1, 30)))


def changed_goals(tx, after_event: int) -> tuple[list[str], int]:
    """The goals with events after ledger row ``after_event``, and the newest row id."""
    top = q.newest_event_row(tx)
    if top <= after_event:
        return [], after_event
    return q.goals_changed_between(tx, after_event, top), int(top)
