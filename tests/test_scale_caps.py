"""Bounded state (issue 25): per-goal caps on evidence payloads and on plugin state, set by a
user in the registry, refused with a stable code before anything is written."""

from __future__ import annotations

import json

import pytest

from loopx import api, hookimpl
from loopx.seam import capabilities
from loopx.ledger import caps
from loopx.values.errors import LoopxError
from loopx.ledger.registry import Registry
from tests.factories import make_goal


def _rows(reg, g) -> tuple:
    with reg.read() as tx:
        return (tx.one("SELECT revision FROM goals WHERE id = ?", (g,))["revision"],
                tx.one("SELECT COUNT(*) AS n FROM events WHERE goal_id = ?", (g,))["n"],
                tx.one("SELECT COUNT(*) AS n FROM capability_state WHERE goal_id = ?", (g,))["n"],
                tx.one("SELECT COUNT(*) AS n FROM evidence WHERE goal_id = ?", (g,))["n"])


def test_evidence_past_the_cap_is_refused_and_writes_nothing(loopx):
    g = make_goal(loopx, title="observed")["goal"]
    payload = json.dumps({"blob": "x" * 20_000})
    assert loopx("evidence", "add", "--goal-id", g, "--kind", "note", "--summary", "s", "--data", payload).code == 0
    assert loopx("registry", "caps", "--evidence-bytes", "16384", "--json").json["evidence_bytes"] == 16_384
    r = loopx("evidence", "add", "--goal-id", g, "--kind", "note", "--summary", "s", "--data", payload, "--json")
    assert r.code == 2 and r.json["error"]["code"] == "evidence_too_large", r
    assert len(loopx("evidence", "list", "--goal-id", g, "--json").json) == 1
    # A user may raise it again; then the same payload is stored.
    assert loopx("registry", "caps", "--evidence-bytes", "32768").code == 0
    assert loopx("evidence", "add", "--goal-id", g, "--kind", "note", "--summary", "s", "--data", payload).code == 0
    assert len(loopx("evidence", "list", "--goal-id", g, "--json").json) == 2


def test_an_agent_cannot_change_the_caps(loopx_proc):
    r = loopx_proc("registry", "caps", "--evidence-bytes", "999999999", "--json", env={"LOOPX_ACTOR": "executor"})
    assert r.code == 2 and r.json["error"]["code"] == "actor_forbidden"
    assert loopx_proc("registry", "caps", "--json").json == caps.DEFAULTS


class Notes:
    """A plugin declaring a capability that owns the ``notes`` namespace."""

    @hookimpl
    def loopx_register_capabilities(self, register):
        register(capabilities.Capability(name="notes", version="1.0", summary="Keeps notes.", owns=["notes"]))


def test_plugin_state_past_the_goal_cap_is_refused_and_writes_nothing(reg, loopx_plugin):
    loopx_plugin(Notes())
    g = make_goal(reg, title="stateful")["goal"]
    caps.set_caps(reg, "user", {"goal_state_bytes": 10_000})
    capabilities.set_state(reg, "notes", g, {"a": "x" * 4000})
    capabilities.set_state(reg, "notes", g, {"b": "x" * 4000})
    capabilities.set_state(reg, "notes", g, {"a": "y" * 5000})  # replacing a key counts its new value only
    before = _rows(reg, g)
    with pytest.raises(LoopxError) as err:
        capabilities.set_state(reg, "notes", g, {"c": "x" * 2000})
    assert err.value.code == "state_too_large"
    assert _rows(reg, g) == before
    capabilities.delete_state(reg, "notes", g, ["b"])
    capabilities.set_state(reg, "notes", g, {"c": "x" * 2000})
    with pytest.raises(LoopxError) as err:
        caps.set_caps(reg, "executor", {"goal_state_bytes": 10**8})
    assert err.value.code == "actor_forbidden"


def test_evidence_a_plugin_writes_is_held_to_the_same_cap(reg):
    g = make_goal(reg, title="observed")["goal"]
    before = _rows(reg, g)
    with pytest.raises(LoopxError) as err:
        reg.mutate("user", lambda w: api.evidence.add_in(w, kind="note", summary="s",
                                                             data={"b": "x" * (1024 * 1024)}), goal_id=g)
    assert err.value.code == "evidence_too_large"
    assert _rows(reg, g) == before
