"""Bounded state: per-goal caps on plugin state and on evidence payloads.

A goal's history may grow without end; what a write stores in one go, and what a capability
keeps in a goal's current state, may not:

* ``evidence_bytes`` - the payload of one evidence item (its summary and its ``data`` as JSON
  text), default 1 MiB (Issue-Fix keeps a test run's per-test cases in one item). Refused with
  ``evidence_too_large``. (The command line's ``--data`` is limited to 64 KiB before that.)
* ``goal_state_bytes`` - everything plugins keep in one goal's ``capability_state`` (keys and
  JSON values, all namespaces together), default 4 MiB. Refused with ``state_too_large``.

Both are checked when the event is emitted (``Writer.emit``'s guard, or right after a plugin's
own event kind applied its state, inside the same transaction), so a refused write leaves
nothing behind; replay never checks (history already written stays readable). Sizes count
characters of the stored text. A registry's caps are set by a user with ``loopx registry caps``
and kept in its ``meta`` table, not taken from the environment: an agent cannot raise them for
its own process.
"""

from __future__ import annotations

import json

from loopx.values.errors import LoopxError
from loopx.store.queries import caps as q

DEFAULTS = {"evidence_bytes": 1024 * 1024, "goal_state_bytes": 4 * 1024 * 1024}
BOUNDS = (1024, 1024 ** 3)  # a cap is at least 1 KiB and at most 1 GiB
_KEY = "cap."


def current(tx) -> dict:
    """The registry's caps: ``{"evidence_bytes", "goal_state_bytes"}`` (defaults where unset)."""
    out = dict(DEFAULTS)
    for r in q.meta_values(tx, tuple(_KEY + k for k in DEFAULTS)):
        out[r["key"][len(_KEY):]] = int(r["value"])
    return out


def _cap(tx, name: str) -> int:
    row = q.meta_value(tx, _KEY + name)
    return int(row["value"]) if row else DEFAULTS[name]


def check_evidence(tx, body: dict) -> None:
    """Refuse (``evidence_too_large``) an ``evidence.added`` body whose payload passes the cap."""
    size = len(body.get("summary") or "")
    if body.get("data") is not None:
        size += len(json.dumps(body["data"], sort_keys=True))
    if size <= BOUNDS[0]:  # below the smallest cap there can be: no need to read it
        return
    cap = _cap(tx, "evidence_bytes")
    if size > cap:
        raise LoopxError("evidence_too_large", f"evidence payload is {size:,} bytes; this registry's cap is {cap:,}"
                         " (record a file by path and sha256 instead, or raise it: loopx registry caps"
                         " --evidence-bytes N)")


def _stored(tx, goal_id: str, namespace: str | None = None, keys=()) -> int:
    # What the goal's state holds outside the keys about to be replaced.
    return q.state_bytes(tx, goal_id, namespace, keys)


def check_state_set(tx, goal_id: str, namespace: str, values: dict) -> None:
    """Refuse (``state_too_large``) setting ``values`` when the goal's plugin state would pass the cap."""
    adding = sum(len(k) + len(json.dumps(v, sort_keys=True)) for k, v in values.items())
    total = _stored(tx, goal_id, namespace, sorted(values)) + adding
    _refuse_over(tx, goal_id, total)


def check_state(tx, goal_id: str) -> None:
    """Refuse (``state_too_large``) when the goal's plugin state, as it stands now, passes the cap."""
    _refuse_over(tx, goal_id, _stored(tx, goal_id))


def _refuse_over(tx, goal_id: str, total: int) -> None:
    cap = _cap(tx, "goal_state_bytes")
    if total > cap:
        raise LoopxError("state_too_large", f"plugin state of goal {goal_id} would be {total:,} bytes; this registry's"
                         f" cap is {cap:,} per goal (raise it: loopx registry caps --goal-state-bytes N)")


def set_caps(reg, actor: str, values: dict) -> dict:
    """Set the registry's caps (user only); ``values``: ``evidence_bytes`` / ``goal_state_bytes``."""
    from loopx.values.validate import check_number

    if actor != "user":
        raise LoopxError("actor_forbidden", f"{actor} may not change the registry's caps: that is for user")
    given = {}
    for name, value in values.items():
        if value is None:
            continue
        if name not in DEFAULTS:
            raise LoopxError("invalid_argument", f"unknown cap {name!r} (one of {', '.join(DEFAULTS)})")
        given[name] = check_number(value, what="--" + name.replace("_", "-"), minimum=BOUNDS[0], maximum=BOUNDS[1],
                                   integer=True)

    def work(tx):
        for name, value in given.items():
            q.set_meta(tx, _KEY + name, str(value))
        return current(tx)

    if not given:
        with reg.read() as tx:
            return current(tx)
    return reg.store.write(work)
