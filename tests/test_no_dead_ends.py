"""No dead ends: a rejected gate can be decided again (`gate reopen`, user only, recorded), and a
goal stuck on a failing step says which step failed and why, and offers `retry`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import loopx_env

PY = sys.executable


def cli(url, cwd, *args, actor=None):
    extra = {"LOOPX_ACTOR": actor} if actor else {}
    p = subprocess.run([PY, "-m", "loopx", "--format", "json", *map(str, args)], env=loopx_env(url, **extra),
                       cwd=cwd, capture_output=True, text=True, timeout=120)
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else None)


@pytest.mark.slow
def test_a_rejected_gate_is_reopened_by_a_user_only_and_decided_again(sqlite_url, tmp_path):
    url = sqlite_url
    work = tmp_path / "work"
    work.mkdir()
    _, g = cli(url, work, "project-prompt", "create", "--title", "Ship")
    gid = g["id"]
    cli(url, work, "todo", "add", gid, "--text", "ship it")
    _, gate = cli(url, work, "gate", "add", gid, "--title", "Ship?", "--scope", "production")
    assert cli(url, work, "gate", "reject", gid, "--gate-id", gate["id"], "--comment", "not yet")[0] == 0

    # The way on is offered first, not only `close`.
    _, c = cli(url, work, "quota", "should-run", gid, "--dry-run")
    assert c["reasons"] == ["gate_rejected"]
    actions = c["interaction_contract"]["user_channel"]["next_user_actions"]
    assert actions[0] == f"loopx gate reopen --goal-id {gid} --gate-id {gate['id']}"
    code, err = cli(url, work, "gate", "approve", gid, "--gate-id", gate["id"])
    assert code == 2 and err["error"]["code"] == "gate_decided" and "loopx gate reopen" in err["error"]["message"]

    # An agent may not reopen it: the CLI as executor, and a confined step through the broker.
    code, err = cli(url, work, "gate", "reopen", gid, "--gate-id", gate["id"], actor="executor")
    assert code == 2 and err["error"]["code"] == "actor_forbidden"
    assert cli(url, work, "gate", "list", gid)[1][0]["status"] == "rejected"

    # The user reopens it: pending again, recorded in the ledger; then decides again.
    code, reopened = cli(url, work, "gate", "reopen", gid, "--gate-id", gate["id"], "--comment", "review done")
    assert code == 0 and reopened["status"] == "pending" and reopened["decided_by"] is None
    code, again = cli(url, work, "gate", "reopen", gid, "--gate-id", gate["id"])
    assert code == 2 and again["error"]["code"] == "gate_pending"
    _, hist = cli(url, work, "history", gid)
    kinds = [e["kind"] for e in (hist["events"] if isinstance(hist, dict) else hist)]
    assert kinds.count("gate.rejected") == 1 and kinds.count("gate.reopened") == 1
    _, c = cli(url, work, "quota", "should-run", gid, "--dry-run")
    assert c["reasons"] == ["gate_pending"]
    assert cli(url, work, "gate", "approve", gid, "--gate-id", gate["id"])[0] == 0
    _, c = cli(url, work, "quota", "should-run", gid, "--dry-run")
    assert c["decision"] == "run"


@pytest.mark.slow
def test_a_confined_step_that_tries_gate_reopen_is_refused_and_fails_its_turn(sqlite_url, tmp_path):
    url = sqlite_url
    work = tmp_path / "work"
    work.mkdir()
    _, g = cli(url, work, "project-prompt", "create", "--title", "Sneaky")
    gid = g["id"]
    cli(url, work, "action", "add", gid, "--name", "publish", "--", "true")
    _, gate = cli(url, work, "gate", "add", gid, "--title", "Publish?", "--blocks", "action:publish")
    cli(url, work, "gate", "reject", gid, "--gate-id", gate["id"])
    cli(url, work, "action", "add", gid, "--name", "sneak", "--", "sh", "-c",
        f"loopx gate reopen --goal-id {gid} --gate-id {gate['id']}; true")
    cli(url, work, "todo", "add", gid, "--text", "do it")
    env = loopx_env(url, PATH=f"{Path(PY).parent}:/usr/bin:/bin")
    p = subprocess.run([PY, "-m", "loopx", "--format", "json", "turn", gid, "--executor", "shell"], env=env, cwd=work,
                       capture_output=True, text=True, timeout=180)
    t = json.loads(p.stdout)
    assert (t["outcome"], t.get("reason")) == ("failed", "refused_command"), t
    assert "gate reopen" in t["handoff"]
    assert cli(url, work, "gate", "list", gid)[1][0]["status"] == "rejected"


@pytest.mark.slow
def test_repeated_failure_says_which_step_failed_and_why_and_offers_retry(sqlite_url, tmp_path):
    url = sqlite_url
    work = tmp_path / "work"
    work.mkdir()
    _, g = cli(url, work, "project-prompt", "create", "--title", "Flaky")
    gid = g["id"]
    cli(url, work, "action", "add", gid, "--name", "test", "--", "sh", "-c", "echo 'db is down' >&2; exit 3")
    cli(url, work, "todo", "add", gid, "--text", "test it")
    cli(url, work, "quota", "set", gid, "--stuck-after", "2")
    for _ in range(2):
        cli(url, work, "turn", gid, "--executor", "shell")
    _, view = cli(url, work, "status", "--goal-id", gid)
    needs = view["needs_you"]
    assert needs["reason"] == "repeated_failure"
    assert "step action:test failed" in needs["message"] and "db is down" in needs["message"], needs
    assert f"loopx project-prompt retry --goal-id {gid}" in needs["commands"]
    assert cli(url, work, "project-prompt", "retry", gid)[0] == 0
    _, c = cli(url, work, "quota", "should-run", gid, "--dry-run")
    assert c["decision"] == "run"
