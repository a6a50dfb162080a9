"""Nothing lost, ever: concurrent writers, killed writers, replay == state."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from loopx.testing import wait_until
from tests.conftest import ROOT, loopx_env

WRITER = textwrap.dedent("""
    import sys
    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry

    url, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    reg = Registry.open(url)
    for i in range(count):
        project_prompt.create(reg, "user", title=f"{tag}-{i}", criteria=["done"])
    print("ok")
""")

STREAM = textwrap.dedent("""
    import sys
    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry

    reg = Registry.open(sys.argv[1])
    print("started", flush=True)
    i = 0
    while True:
        goal = project_prompt.create(reg, "user", title=f"g{i}", criteria=["a", "b"])
        project_prompt.transition(reg, "user", "pause", goal["id"], reason="r")
        project_prompt.transition(reg, "user", "resume", goal["id"])
        i += 1
""")


def _run_many(url, script, n, *args):
    procs = [subprocess.Popen([sys.executable, "-c", script, url, f"p{k}", *args], cwd=ROOT,
                              env=loopx_env(url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(n)]
    return [(p.wait(timeout=600), *p.communicate()) for p in procs]


@pytest.mark.slow
def test_eight_processes_create_800_goals(registry_url):
    from loopx.ledger.registry import Registry

    Registry.open(registry_url).close()  # schema in place; first-open races are tested below
    results = _run_many(registry_url, WRITER, 8, "100")
    for code, out, err in results:
        assert code == 0, err
        assert "locked" not in err.lower()
    with Registry.open(registry_url) as reg, reg.read() as tx:
        assert tx.one("SELECT count(*) AS n FROM goals")["n"] == 800
        assert tx.one("SELECT count(*) AS n FROM events WHERE kind = 'goal.created'")["n"] == 800
        titles = {r["title"] for r in tx.query("SELECT title FROM goals")}
    assert titles == {f"p{k}-{i}" for k in range(8) for i in range(100)}


@pytest.mark.slow
def test_concurrent_first_open_of_a_new_registry(sqlite_url):
    results = _run_many(sqlite_url, WRITER, 8, "5")
    assert all(code == 0 for code, _, _ in results), results
    from loopx.ledger.registry import Registry

    with Registry.open(sqlite_url) as reg, reg.read() as tx:
        assert tx.one("SELECT count(*) AS n FROM goals")["n"] == 40


def test_sigkill_mid_stream_leaves_a_consistent_registry(registry_url):
    from loopx.ledger import integrity, log as ledger
    from loopx.ledger.registry import Registry

    Registry.open(registry_url).close()
    p = subprocess.Popen([sys.executable, "-c", STREAM, registry_url], cwd=ROOT, env=loopx_env(registry_url),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "started"
    with Registry.open(registry_url) as reg:  # let it write a while, then kill it wherever it is

        def written(n):
            with reg.read() as tx:
                return tx.one("SELECT count(*) AS n FROM events")["n"] >= n

        wait_until(lambda: written(150), "150 events to be written")
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    with Registry.open(registry_url) as reg:
        assert reg.store.integrity_check() == []
        with reg.read() as tx:
            goals = [r["id"] for r in tx.query("SELECT id FROM goals")]
            assert len(goals) >= 40
            for goal_id in goals:
                events = ledger.events(tx, goal_id)
                assert [e.seq for e in events] == list(range(1, len(events) + 1))
                assert ledger.normalise(ledger.replayed_snapshot(events)) == ledger.normalise(ledger.snapshot(tx, goal_id))
                # The hash chain and state digest were committed with every write, or not at all.
                assert integrity.verify_chain(tx, goal_id) == []
            orphans = tx.one("SELECT count(*) AS n FROM events WHERE goal_id NOT IN (SELECT id FROM goals)")
            assert orphans["n"] == 0


@pytest.mark.slow
def test_cli_processes_in_parallel_lose_nothing(registry_url):
    env = loopx_env(registry_url)
    procs = [subprocess.Popen([sys.executable, "-m", "loopx", "project_prompt", "create", "--title", f"t{i}"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(8)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    listed = subprocess.run([sys.executable, "-m", "loopx", "project_prompt", "list", "--json"], env=env,
                            capture_output=True, text=True)
    import json

    assert sorted(g["title"] for g in json.loads(listed.stdout)) == sorted(f"t{i}" for i in range(8))


def test_a_damaged_revision_column_does_not_break_writes(sqlite_url):
    """Events are numbered from the ledger, never from goals.revision (which repair may need to fix)."""
    import sqlite3

    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry

    with Registry.open(sqlite_url) as reg:
        goal = project_prompt.create(reg, "user", title="t")
        project_prompt.transition(reg, "user", "pause", goal["id"])
    conn = sqlite3.connect(sqlite_url)
    conn.execute("UPDATE goals SET revision = 1")
    conn.commit()
    conn.close()
    with Registry.open(sqlite_url) as reg:
        resumed = project_prompt.transition(reg, "user", "resume", goal["id"])
        assert resumed["revision"] == 3
        assert [e["seq"] for e in project_prompt.history(reg, goal["id"])] == [1, 2, 3]


def test_threads_sharing_one_sqlite_store_take_turns(sqlite_url):
    import threading

    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry

    errors = []
    with Registry.open(sqlite_url) as reg:
        def work(k):
            try:
                for i in range(20):
                    project_prompt.create(reg, "user", title=f"{k}-{i}")
                    project_prompt.list_goals(reg, limit=5)
            except Exception as exc:  # noqa: BLE001 - the test reports whatever went wrong
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(project_prompt.list_goals(reg, status="all", limit=1000)) == 80


def test_a_registry_made_while_it_is_identified_is_not_taken_for_another_application(tmp_path, monkeypatch):
    """The first-open race, made to happen every time: another process commits a new registry's
    schema between the opener's reading of the file's version and of its tables. The opener
    must see one moment of the file (empty, or a whole registry), never the tables without the
    version ("an SQLite database of another application")."""
    import sqlite3

    from loopx.ledger.registry import Registry

    path = tmp_path / "loopx.db"
    sqlite3.connect(path).close()  # an empty file: a registry about to be made
    # What another opener's first migration commits: the tables and the version, in one go.
    source = tmp_path / "made.db"
    Registry.open(f"sqlite:///{source}").close()
    made = sqlite3.connect(source)
    schema = [sql for (sql,) in made.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL"
                                          " AND name NOT LIKE 'sqlite_%'")]
    version = made.execute("PRAGMA user_version").fetchone()[0]
    made.close()
    real_connect = sqlite3.connect
    tried = []

    def create_the_registry_meanwhile(statement):
        if "sqlite_master" not in statement or tried:
            return
        other = real_connect(path, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            for sql in schema:
                other.execute(sql)
            other.execute(f"PRAGMA user_version = {version}")
            other.execute("COMMIT")
            tried.append("committed")
        except sqlite3.OperationalError:  # the opener holds its snapshot: the creator waits
            tried.append("waited")
        finally:
            other.close()

    def connect(*args, **kwargs):
        conn = real_connect(*args, **kwargs)
        if str(args[0] if args else kwargs.get("database")).endswith("loopx.db"):
            conn.set_trace_callback(create_the_registry_meanwhile)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    Registry.open(f"sqlite:///{path}").close()  # no registry_invalid
    assert tried, "the other opener never ran between the two reads"
