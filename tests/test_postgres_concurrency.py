"""Real processes against a real PostgreSQL server: what agents on many machines do at once.

Every process here is a separate ``python`` with its own connection, as an agent on another
machine would be. They start their work together (a barrier file), so the database, not luck,
decides the outcome. Skipped without ``LOOPX_TEST_POSTGRES_URL``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests import backends
from tests.conftest import ROOT, loopx_env

pytestmark = pytest.mark.postgres

# Imports everything first, says "ready", waits for the barrier, then runs the CLI in-process.
CLI_AT_BARRIER = textwrap.dedent("""
    import os, sys
    from loopx.testing import wait_until
    from loopx.cli import cli
    barrier = sys.argv[1]
    print("ready", flush=True)
    wait_until(lambda: os.path.exists(barrier), "the barrier", interval=0.005)
    cli.main(args=sys.argv[2:], prog_name="loopx")
""")

FIRST_OPEN_AND_CREATE = textwrap.dedent("""
    import os, sys
    from loopx.testing import wait_until
    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry
    url, tag, count, barrier = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    print("ready", flush=True)
    wait_until(lambda: os.path.exists(barrier), "the barrier", interval=0.005)
    reg = Registry.open(url)
    for i in range(count):
        project_prompt.create(reg, "user", title=f"{tag}-{i}")
    print("ok", flush=True)
""")

HOLD_OPEN_TRANSACTION = textwrap.dedent("""
    import signal, sys
    from loopx.ledger.registry import Registry
    reg = Registry.open(sys.argv[1])
    def work(w):
        w.emit("goal.criterion_met", {"index": 0})
        w.emit("goal.paused", {"reason": "half-way"})
        print("inside", flush=True)
        signal.pause()  # holds the transaction open until the test kills this process
    reg.mutate("user", work, goal_id=sys.argv[2])
""")


@pytest.fixture
def registry_url(tmp_path):
    """PostgreSQL only in this module (overrides the both-backends fixture of conftest)."""
    url = backends.fresh_registry("postgres", tmp_path)
    yield url
    backends.drop_registry("postgres", url)


@pytest.fixture
def pg_url(registry_url):
    return registry_url


def _together(tmp_path, url, argvs, script=CLI_AT_BARRIER, extra_env=None):
    """Start one process per argv, release them at once, return [(code, out, err)]."""
    barrier = tmp_path / f"go-{time.monotonic_ns()}"
    env = loopx_env(url, **(extra_env or {}))
    procs = [
        subprocess.Popen([sys.executable, "-c", script, *argv(barrier)], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for argv in argvs
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    barrier.write_text("go")
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        out.append((p.returncode, stdout, stderr))
    return out


def _state_is_the_replayed_ledger(reg, goal_id):
    from loopx.ledger import log as ledger

    with reg.read() as tx:
        events = ledger.events(tx, goal_id)
        state = ledger.snapshot(tx, goal_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert ledger.normalise(ledger.replayed_snapshot(events)) == ledger.normalise(state)
    return events


def test_eight_processes_open_a_new_registry_and_create_goals_at_once(tmp_path, pg_url):
    from loopx.ledger.registry import Registry

    results = _together(tmp_path, pg_url, [
        (lambda b, k=k: [pg_url, f"p{k}", "25", str(b)]) for k in range(8)
    ], script=FIRST_OPEN_AND_CREATE)
    for code, out, err in results:
        assert code == 0 and out.strip().endswith("ok"), err
    with Registry.open(pg_url) as reg:
        with reg.read() as tx:
            titles = [r["title"] for r in tx.query("SELECT title FROM goals")]
            assert tx.one("SELECT count(*) AS n FROM events")["n"] == 200
        assert reg.store.integrity_check() == []
    assert sorted(titles) == sorted(f"p{k}-{i}" for k in range(8) for i in range(25))


def test_eight_processes_claiming_one_todo_leave_exactly_one_holder(tmp_path, pg_url, loopx):
    goal = loopx("project_prompt", "create", "--title", "race", "--json").json
    todo = loopx("todo", "add", "--goal-id", goal["id"], "--text", "only one may do this", "--json").json
    results = _together(tmp_path, pg_url, [
        (lambda b, k=k: [str(b), "todo", "claim", "--goal-id", goal["id"], "--todo-id", todo["id"],
                         "--agent", f"agent-{k}", "--json"])
        for k in range(8)
    ])
    winners = [json.loads(out) for code, out, _ in results if code == 0]
    losers = [json.loads(out) for code, out, _ in results if code != 0]
    assert len(winners) == 1, results
    assert len(losers) == 7 and {e["error"]["code"] for e in losers} == {"todo_claimed"}, losers
    holder = winners[0]["claim"]["agent"]
    shown = loopx("todo", "list", "--goal-id", goal["id"], "--json").json
    assert [t["claim"]["agent"] for t in shown] == [holder]
    from loopx.ledger.registry import Registry

    with Registry.open(pg_url) as reg:
        events = _state_is_the_replayed_ledger(reg, goal["id"])
    assert [e.body["agent"] for e in events if e.kind == "todo.claimed"] == [holder]


CLAIM_EACH = textwrap.dedent("""
    import json, os, sys
    from loopx.testing import wait_until
    from loopx.domain import todos
    from loopx.values.errors import LoopxError
    from loopx.ledger.registry import Registry
    url, goal_id, agent, barrier, *todo_ids = sys.argv[1:]
    reg = Registry.open(url)
    print("ready", flush=True)
    wait_until(lambda: os.path.exists(barrier), "the barrier", interval=0.005)
    won = []
    for todo_id in todo_ids:
        try:
            todos.claim(reg, "user", goal_id=goal_id, todo_id=todo_id, agent=agent)
            won.append(todo_id)
        except LoopxError as err:
            assert err.code == "todo_claimed", err.code
    print(json.dumps(won), flush=True)
""")


def test_eight_processes_racing_for_twelve_todos_get_one_holder_each(tmp_path, pg_url, loopx):
    goal = loopx("project_prompt", "create", "--title", "many races", "--json").json
    todo_ids = [loopx("todo", "add", "--goal-id", goal["id"], "--text", f"t{i}", "--json").json["id"]
                for i in range(12)]
    results = _together(tmp_path, pg_url, [
        (lambda b, k=k: [pg_url, goal["id"], f"agent-{k}", str(b), *todo_ids]) for k in range(8)
    ], script=CLAIM_EACH)
    assert all(code == 0 for code, _, _ in results), results
    won = {f"agent-{k}": json.loads(out.splitlines()[-1]) for k, (_, out, _) in enumerate(results)}
    claimed = sorted(t for ids in won.values() for t in ids)
    assert claimed == sorted(todo_ids)  # every todo won exactly once
    holders = {t["id"]: t["claim"]["agent"] for t in loopx("todo", "list", "--goal-id", goal["id"], "--json").json}
    assert holders == {t: agent for agent, ids in won.items() for t in ids}
    from loopx.ledger.registry import Registry

    with Registry.open(pg_url) as reg:
        events = _state_is_the_replayed_ledger(reg, goal["id"])
    assert sum(1 for e in events if e.kind == "todo.claimed") == 12


def test_eight_processes_retrying_one_operation_id_create_one_goal(tmp_path, pg_url, loopx):
    results = _together(tmp_path, pg_url, [
        (lambda b: [str(b), "project_prompt", "create", "--title", "once", "--operation-id", "op-42", "--json"])
        for _ in range(8)
    ])
    assert all(code == 0 for code, _, _ in results), results
    outputs = {out for _, out, _ in results}
    assert len(outputs) == 1  # every retry got the first result, byte for byte
    goals = loopx("project_prompt", "list", "--json").json
    assert [g["id"] for g in goals] == [json.loads(outputs.pop())["id"]]
    from loopx.ledger.registry import Registry

    with Registry.open(pg_url) as reg, reg.read() as tx:
        assert tx.one("SELECT count(*) AS n FROM operations")["n"] == 1
        assert tx.one("SELECT count(*) AS n FROM events")["n"] == 1


def test_eight_processes_writing_one_goal_lose_nothing(tmp_path, pg_url, loopx):
    goal = loopx("project_prompt", "create", "--title", "busy", "--json").json
    script = textwrap.dedent("""
        import os, sys
        from loopx.testing import wait_until
        from loopx.domain import todos
        from loopx.ledger.registry import Registry
        url, goal_id, tag, barrier = sys.argv[1:5]
        reg = Registry.open(url)
        print("ready", flush=True)
        wait_until(lambda: os.path.exists(barrier), "the barrier", interval=0.005)
        for i in range(15):
            todos.add(reg, "user", goal_id=goal_id, text=f"{tag}-{i}")
    """)
    results = _together(tmp_path, pg_url, [
        (lambda b, k=k: [pg_url, goal["id"], f"p{k}", str(b)]) for k in range(8)
    ], script=script)
    assert all(code == 0 for code, _, _ in results), results
    texts = [t["text"] for t in loopx("todo", "list", "--goal-id", goal["id"], "--json").json]
    assert sorted(texts) == sorted(f"p{k}-{i}" for k in range(8) for i in range(15))
    from loopx.ledger.registry import Registry

    with Registry.open(pg_url) as reg:
        events = _state_is_the_replayed_ledger(reg, goal["id"])
        assert len(events) == 1 + 8 * 15
        assert reg.store.integrity_check() == []


def test_a_writer_killed_inside_its_transaction_leaves_no_half_record(pg_url, loopx):
    goal = loopx("project_prompt", "create", "--title", "victim", "--criterion", "c", "--json").json
    p = subprocess.Popen([sys.executable, "-c", HOLD_OPEN_TRANSACTION, pg_url, goal["id"]], cwd=ROOT,
                         env=loopx_env(pg_url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "inside", p.stderr.read()
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    # The server rolls the dead writer back and releases the goal: the next writer gets it.
    r = loopx("project_prompt", "close", "--goal-id", goal["id"], "--reason", "after the crash", "--json")
    assert r.code == 0, r
    from loopx.ledger.registry import Registry

    with Registry.open(pg_url) as reg:
        events = _state_is_the_replayed_ledger(reg, goal["id"])
        assert [e.kind for e in events] == ["goal.created", "goal.closed"]
        assert reg.store.integrity_check() == []
    shown = loopx("project_prompt", "show", "--goal-id", goal["id"], "--json").json
    assert shown["status"] == "closed" and shown["criteria"][0]["met"] is False
