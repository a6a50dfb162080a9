"""Telling a human: one notification per change of a goal's "needs you" state.

``loopx worker`` calls :func:`check_goals` for the goals whose ledger moved, and for every open
goal and :func:`check_workers` at every heartbeat (a cadence passing changes a goal's need
without any event). A goal's state is :func:`loopx.views.needs_you.needs`; a
notification goes out when that state *changes* to one that needs a person (its ``id`` is a
digest of goal, reason and commands), never twice for one state, and a goal that stops needing
anyone is recorded as ``cleared`` so that the same need coming back is news again. At most one
per goal per ``notify.min_interval_seconds`` (default 60): a change inside that interval waits
(the worker looks again at its next beat) and only the latest state is sent.

Where it goes (``loopx config set ...``, user-owned settings in the registry):

* ``notify.command`` - a shell command line, run with the notification as JSON on stdin
  (30 s at most); its exit status is recorded.
* ``notify.webhook`` - an ``http(s)://`` URL that gets the JSON ``POST``\\ ed, with
  ``X-LoopX-Signature: sha256=<HMAC-SHA256 of the body>`` keyed by the secret in
  :func:`secret_path` (made on first use, readable only by the user); a 2xx answer delivers it.
* every plugin's ``loopx_notify`` hook.

Each delivery is a row of ``notifications`` (goal, reason, channel, status, attempts, detail),
shown by ``loopx notify list``. A command or webhook that fails is never dropped: its row stays
``pending`` and a later check (the worker's every beat, or ``loopx notify check``) tries again once
its back-off (:data:`RETRY_BACKOFF`, on :mod:`loopx.values.clock`) has passed, until it is ``delivered``
or the need clears or changes (then ``failed``: nobody needs telling any more).
"""

from __future__ import annotations

import json

from loopx.values import clock
from loopx.store.queries import notify as q

SCHEMA = "loopx.notification/1"
DEFAULT_MIN_INTERVAL = 60.0
#: Seconds before the next try of a failed delivery, by the number of tries so far (then the last, forever).
RETRY_BACKOFF = (30.0, 60.0, 120.0, 300.0, 600.0, 900.0)
COMMAND_TIMEOUT = 30.0
WEBHOOK_TIMEOUT = 10.0

_waiting: set[str] = set()  # goals whose change came inside their interval (looked at again later)


def secret_path():
    """The webhook signing key's file: ``<user config dir>/loopx/notify.key`` (platformdirs)."""
    from pathlib import Path

    from loopx.values import userdirs

    return Path(userdirs.config_dir()) / "notify.key"


def secret() -> bytes:
    """The webhook signing key, made (32 random bytes, hex, mode 0600) on first use."""
    import os
    import secrets as rnd

    path = secret_path()
    try:
        return path.read_text().strip().encode()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = rnd.token_hex(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key.encode()


def sign(body: bytes, key: bytes | None = None) -> str:
    """``sha256=<hex>``: the HMAC-SHA256 of ``body`` (what a receiver recomputes to trust it)."""
    import hashlib
    import hmac

    return "sha256=" + hmac.new(key or secret(), body, hashlib.sha256).hexdigest()


def _key(goal_id: str, needs: dict) -> str:
    import hashlib

    blob = json.dumps([goal_id, needs["reason"], needs["commands"]], sort_keys=True).encode()
    return "n-" + hashlib.sha256(blob).hexdigest()[:16]


def _last(tx, goal_id: str) -> dict | None:
    return q.last_notification(tx, goal_id)


def _record(reg, goal_id: str, reason: str, key: str, channel: str, status: str, attempts: int, detail,
            at: str | None = None) -> None:
    at = at or clock.now()
    if channel in ("command", "webhook") and key.startswith("n-"):  # a goal's need: tried until it clears
        status, detail = _status(status, attempts, detail, at)

    def work(tx):
        q.record_delivery(tx, goal_id, reason, key, at, channel, status, attempts,
                          json.dumps(detail, sort_keys=True)[:4000])

    reg.store.write(work)


def _status(status: str, attempts: int, detail: dict, at: str) -> tuple[str, dict]:
    """A failed command or webhook stays ``pending``, with the time of its next try."""
    if status != "failed":
        return status, detail
    wait = RETRY_BACKOFF[min(attempts, len(RETRY_BACKOFF)) - 1]
    return "pending", {**detail, "next_attempt_at": clock.add_seconds(at, wait)}


def _pending(tx, goal_id: str) -> list[dict]:
    return q.pending_deliveries(tx, goal_id)


def _retry(reg, row: dict, payload: dict, values: dict) -> str:
    """Try a pending delivery again on its channel; the row records the outcome (one row per delivery)."""
    payload = {**payload, "at": row["at"]}  # the same notification, byte for byte (its signature too)
    body = json.dumps(payload, sort_keys=True).encode()
    target = values.get(f"notify.{row['channel']}")
    if target:
        status, _, detail = (_run_command if row["channel"] == "command" else _post)(target, body)
    else:  # the channel was unset since: nothing left to try it on
        status, detail = "failed", {"error": f"notify.{row['channel']} is no longer set"}
    attempts = int(row["attempts"]) + 1
    old = json.loads(row["detail"] or "{}")
    detail = {**detail, "errors": (old.get("errors") or [])[-8:] + detail.get("errors", [])}
    at = clock.now()
    if target:
        status, detail = _status(status, attempts, detail, at)
    reg.store.write(lambda tx: q.delivery_tried(
        tx, row["id"], status, attempts, json.dumps({**detail, "last_attempt_at": at}, sort_keys=True)[:4000]))
    return status


def _give_up(reg, rows: list[tuple[dict, str]]) -> None:
    """Pending deliveries of a need that cleared or changed: nobody needs telling about it any more."""
    def work(tx):
        for row, why in rows:
            detail = {**json.loads(row["detail"] or "{}"), "gave_up": why}
            detail.pop("next_attempt_at", None)
            q.delivery_given_up(tx, row["id"], json.dumps(detail, sort_keys=True)[:4000])

    if rows:
        reg.store.write(work)


def open_goal_ids(reg) -> list[str]:
    """The ids of every open goal: what ``loopx notify check`` looks at when no goal is named."""
    with reg.read() as tx:
        return q.open_goal_ids(tx)


def check_goals(reg, goal_ids) -> list[dict]:
    """Notify for each of ``goal_ids`` (and goals held back earlier) whose need changed. Returns what was sent."""
    from loopx.views.needs_you import needs
    from loopx.ledger.registry import display_url
    from loopx.domain.supervision import settings

    wanted = sorted(set(goal_ids) | _waiting)
    if not wanted:
        return []
    now = clock.now()
    sent = []
    with reg.read() as tx:
        values = settings(tx)
        interval = float(values.get("notify.min_interval_seconds") or DEFAULT_MIN_INTERVAL)
        todo, retries, give_up = [], [], []
        for goal_id in wanted:
            _waiting.discard(goal_id)
            goal = q.goal_title(tx, goal_id)
            if goal is None:
                continue
            found = needs(tx, goal_id, now)
            last = _last(tx, goal_id)
            key = _key(goal_id, found) if found is not None else None
            pending = _pending(tx, goal_id)
            give_up += [(r, "the need cleared" if key is None else "the need changed")
                        for r in pending if r["dedupe_key"] != key]
            if found is None:
                if last is not None and last["status"] != "cleared":
                    todo.append((goal_id, None, None))
                continue
            payload = {
                "schema": SCHEMA, "id": key, "goal_id": goal_id, "title": goal["title"],
                "decision": found["decision"], "reason": found["reason"], "message": found["message"],
                "commands": found["commands"], "command": (found["commands"] or [None])[0], "at": now,
                "registry": display_url(reg.store.url)}
            if last is not None and last["dedupe_key"] == key:
                # already told - unless a channel failed: try it again once its back-off has passed
                retries += [(r, payload) for r in pending if r["dedupe_key"] == key
                            and json.loads(r["detail"] or "{}").get("next_attempt_at", "") <= now]
                continue
            if last is not None and last["status"] != "cleared" and 0 <= clock.seconds_between(last["at"], now) < interval:
                _waiting.add(goal_id)  # rate limit: look again later, send the state of then
                continue
            todo.append((goal_id, found, payload))
    _give_up(reg, give_up)
    for row, payload in retries:
        if _retry(reg, row, payload, values) == "delivered":
            sent.append(payload)
    for goal_id, found, payload in todo:
        if found is None:
            _record(reg, goal_id, "cleared", "", "none", "cleared", 0, {})
            continue
        deliver(reg, payload, values)
        sent.append(payload)
    return sent


def check_workers(reg) -> list[dict]:
    """Notify once for each worker that died (stopped beating without saying it stopped)."""
    from loopx.ledger.registry import display_url
    from loopx.domain.supervision import workers

    now = clock.now()
    out = []
    with reg.read() as tx:
        from loopx.domain.supervision import settings

        values = settings(tx)
        dead = [w for w in workers(tx, now) if w["state"] == "died"]
        fresh = []
        for w in dead:
            key = f"worker:{w['id']}:died"
            if not q.was_notified(tx, key):
                fresh.append((w, key))
    for w, key in fresh:
        payload = {"schema": SCHEMA, "id": key, "goal_id": (w["goals"] or ["-"])[0], "title": "",
                   "decision": "ask_user", "reason": "worker_died",
                   "message": f"worker {w['id']} (pid {w['pid']} on {w['host']}) stopped beating at "
                              f"{w['last_beat_at']} while taking turns on {', '.join(w['goals']) or 'no goal'}",
                   "commands": ["systemctl --user restart loopx-worker", "loopx status"],
                   "command": "systemctl --user restart loopx-worker", "at": now,
                   "registry": display_url(reg.store.url), "goals": w["goals"]}
        deliver(reg, payload, values, key=key)
        out.append(payload)
    return out


def deliver(reg, payload: dict, values: dict, *, key: str | None = None) -> dict:
    """Send ``payload`` through every configured channel and the plugins' hooks; record each delivery."""
    from loopx.seam import plugins

    key = key or payload["id"]
    goal_id, reason = payload["goal_id"], payload["reason"]
    body = json.dumps(payload, sort_keys=True).encode()
    results = {}
    command = values.get("notify.command")
    if command:
        status, attempts, detail = _run_command(command, body)
        _record(reg, goal_id, reason, key, "command", status, attempts, detail, payload.get("at"))
        results["command"] = status
    url = values.get("notify.webhook")
    if url:
        status, attempts, detail = _post(url, body)
        _record(reg, goal_id, reason, key, "webhook", status, attempts, detail, payload.get("at"))
        results["webhook"] = status
    hooks = plugins.hooks()
    if hooks.implemented(hooks.notify):
        for plugin, answer in hooks.notify(dict(payload), timeout=COMMAND_TIMEOUT):
            status = "delivered" if answer is True else "answered"
            _record(reg, goal_id, reason, key, f"hook:{plugin}"[:100], status, 1, {"answer": repr(answer)[:200]})
            results[f"hook:{plugin}"] = status
    if not results:
        _record(reg, goal_id, reason, key, "none", "not_configured", 0, {})
    return results


def _run_command(command: str, body: bytes) -> tuple[str, int, dict]:
    import subprocess

    try:
        from loopx.sandbox import selfrun

        # In LoopX's own directory, never the worker's (the agents' workdir): a relative command
        # there would be whatever an agent left under that name.
        p = subprocess.run(["/bin/sh", "-c", command], input=body, capture_output=True, timeout=COMMAND_TIMEOUT,
                           start_new_session=True, cwd=selfrun.CWD)
    except subprocess.TimeoutExpired:
        return "failed", 1, {"error": f"timed out after {COMMAND_TIMEOUT:g}s"}
    except OSError as exc:
        return "failed", 1, {"error": str(exc)}
    detail = {"exit_code": p.returncode, "output": (p.stdout + p.stderr).decode(errors="replace")[-500:]}
    return ("delivered" if p.returncode == 0 else "failed"), 1, detail


def _post(url: str, body: bytes) -> tuple[str, int, dict]:
    """One signed ``POST`` (no waiting here: a failure is tried again by a later check, see :data:`RETRY_BACKOFF`)."""
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json", "User-Agent": "loopx-notify/1", "X-LoopX-Signature": sign(body)}
    try:
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=WEBHOOK_TIMEOUT) as resp:
            if 200 <= resp.status < 300:
                return "delivered", 1, {"http_status": resp.status}
            error = f"HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        error = f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        error = str(getattr(exc, "reason", exc))[:200]
    return "failed", 1, {"errors": [error]}


def list_recent(reg, *, limit: int = 50) -> list[dict]:
    """The latest deliveries, newest first."""
    with reg.read() as tx:
        rows = q.recent_deliveries(tx, limit)
    return [{"goal_id": r["goal_id"], "reason": r["reason"], "id": r["dedupe_key"], "at": r["at"],
             "channel": r["channel"], "status": r["status"], "attempts": int(r["attempts"]),
             "detail": json.loads(r["detail"] or "{}")} for r in rows]
