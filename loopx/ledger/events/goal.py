"""Goal lifecycle events: created, paused, resumed, closed, criterion_met, capabilities_set; and
where the goal's project and workspace are (workspace_set, workspace_applied, workspace_discarded)."""

from __future__ import annotations

import json

from loopx.store.queries import projections as q

EMPTY_LIMITS = json.dumps({}, sort_keys=True)


def created(tx, event):
    b = event.body
    q.insert_goal(
        tx,
        (
            event.goal_id,
            event.id,
            b["title"],
            b.get("description", ""),
            json.dumps([{"text": t, "met": False} for t in b.get("criteria", [])]),
            json.dumps(b.get("limits", {}), sort_keys=True),
            EMPTY_LIMITS,
            1 if b.get("parallel_runs") else 0,
            event.seq,
            event.at,
            event.at,
            json.dumps(sorted(b.get("capabilities") or [])),
        ),
    )
    if b.get("project") or b.get("workspace_root"):
        _put_workspace(tx, event, {"project": b.get("project"), "root": b.get("workspace_root")})


_WORKSPACE = ("project", "root", "path", "branch", "base", "kind")


def _put_workspace(tx, event, fields: dict) -> None:
    """Insert or update the goal's ``goal_workspaces`` row (only ``fields`` change)."""
    row = q.goal_workspace_row(tx, event.goal_id)
    merged = {c: (row or {}).get(c) for c in _WORKSPACE}
    merged.update({k: v for k, v in fields.items() if k in _WORKSPACE})
    if row is not None:
        q.delete_goal_workspace(tx, event.goal_id)
    q.insert_goal_workspace(tx, event.goal_id, tuple(merged[c] for c in _WORKSPACE), event.at)


# The core writes it when a turn makes the goal's workspace (the user's `loopx turn` / worker acts):
# the project (taken from the turn's directory for a goal created before projects were recorded),
# and the workspace's path, branch and base commit.
def workspace_set(tx, event):
    """The goal's project or workspace changed; the body holds the fields that changed."""
    _put_workspace(tx, event, event.body)


def workspace_applied(tx, event):
    """A user applied the workspace's diff to the project (the body: its sha256 and files)."""
    _put_workspace(tx, event, {})


def workspace_discarded(tx, event):
    """A user discarded the workspace; the next turn makes a new one."""
    _put_workspace(tx, event, {"path": None, "branch": None, "base": None, "kind": None})


# The core writes it once, in schema v8's migration, for goals a capability already kept state for
# (loopx.domain.goals.adopt_capabilities); only a user changes the list after that.
def capabilities_set(tx, event):
    """The capabilities the goal uses changed; the body holds the whole list after it."""
    q.set_goal_capabilities(tx, event.goal_id, json.dumps(sorted(event.body["capabilities"])))


def _set_status(tx, event, status):
    q.set_goal_status(tx, event.goal_id, status, event.body.get("reason"))


def paused(tx, event):
    _set_status(tx, event, "paused")


def resumed(tx, event):
    _set_status(tx, event, "open")


def retried(tx, event):
    """A user lets agents try again after repeated failures; runs before it no longer count."""
    _set_status(tx, event, "open")


# A capability may close a goal whose work it finished (Issue-Fix after publishing a commit a
# user approved); the event's actor says it was the capability.
def closed(tx, event):
    _set_status(tx, event, "closed")


def criterion_met(tx, event):
    row = q.goal_criteria(tx, event.goal_id)
    criteria = json.loads(row["criteria"])
    criteria[event.body["index"]]["met"] = bool(event.body.get("met", True))
    q.set_goal_criteria(tx, event.goal_id, json.dumps(criteria))
