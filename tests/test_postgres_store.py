"""What is particular to the PostgreSQL store: SQL translation, connections, read-only sessions,
migrations, conflict retries, change notifications. Behaviour shared with SQLite is pinned by
``test_store_conformance.py``; tests needing a server skip without ``LOOPX_TEST_POSTGRES_URL``."""

from __future__ import annotations

import sys
import threading

import pytest

from loopx.values.errors import LoopxError
from loopx.testing import wait_until
from tests import backends

psycopg = pytest.importorskip("psycopg")

from loopx.store import postgres, schema  # noqa: E402  (needs psycopg)


@pytest.fixture
def pg_url(tmp_path):
    url = backends.fresh_registry("postgres", tmp_path)
    yield url
    backends.drop_registry("postgres", url)


def _admin():
    return psycopg.connect(backends.postgres_base_url(), autocommit=True)


# -- no server needed ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("SELECT * FROM t WHERE a = ? AND b = ?", "SELECT * FROM t WHERE a = %s AND b = %s"),
        ("SELECT '?' AS q, \"we?ird\" FROM t WHERE a = ?", "SELECT '?' AS q, \"we?ird\" FROM t WHERE a = %s"),
        ("SELECT 1 WHERE a LIKE '10%' AND b = ?", "SELECT 1 WHERE a LIKE '10%%' AND b = %s"),
        ("SELECT a % 2 FROM t", "SELECT a %% 2 FROM t"),
        ("SELECT 'it''s ?' , ?", "SELECT 'it''s ?' , %s"),
    ],
)
def test_placeholders_translate_and_percent_signs_escape(sql, expected):
    assert postgres.translate(sql) == expected


def test_passwords_never_appear_in_messages():
    assert postgres.redact("postgresql://ann:s3cret@db.example:5432/loopx") == "postgresql://ann:***@db.example:5432/loopx"
    assert postgres.redact("postgresql://ann@db/loopx") == "postgresql://ann@db/loopx"


def test_an_unreachable_server_is_one_clear_error_without_the_password():
    from loopx.ledger.registry import Registry

    with pytest.raises(LoopxError) as err:
        Registry.open("postgresql://ann:s3cret@127.0.0.1:1/loopx?connect_timeout=5")
    assert err.value.code == "registry_unavailable"
    assert "s3cret" not in err.value.message and "127.0.0.1" in err.value.message


def test_without_psycopg_the_error_names_the_extra_to_install(monkeypatch):
    from loopx import builtin

    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now raises ImportError
    monkeypatch.delitem(sys.modules, "loopx.store.postgres", raising=False)
    with pytest.raises(LoopxError) as err:
        builtin.open_postgres("postgresql://127.0.0.1/db")
    assert err.value.code == "registry_unavailable"
    assert "pip install 'psycopg[binary]>=3.2'" in err.value.message


def test_the_cli_reports_a_bad_postgres_url_as_json(tmp_path):
    from click.testing import CliRunner

    from loopx.cli import cli

    r = CliRunner().invoke(cli, ["--registry", "postgresql://ann:pw@127.0.0.1:1/x?connect_timeout=5",
                                 "project_prompt", "list", "--json"])
    assert r.exit_code == 2
    assert '"registry_unavailable"' in r.stdout and ":pw@" not in r.stdout


# -- against a server --------------------------------------------------------------------------

pytestmark_server = pytest.mark.postgres  # the tests below need a server


@pytestmark_server
def test_read_only_sessions_are_read_only_in_the_server(pg_url):
    postgres.PostgresStore(pg_url).close()
    ro = postgres.PostgresStore(pg_url, readonly=True)
    try:
        with ro.read() as tx:
            assert tx.one("SHOW default_transaction_read_only")["default_transaction_read_only"] == "on"
        with pytest.raises(LoopxError) as err:
            with ro.read() as tx:
                tx.execute("INSERT INTO meta (key, value) VALUES ('x', 'y')")
        assert err.value.code == "registry_readonly"
        # A plain statement on the session, outside LoopX's transactions, is refused as well.
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            ro._conn.execute("INSERT INTO meta (key, value) VALUES ('x', 'y')")
    finally:
        ro.close()


@pytestmark_server
def test_read_only_open_of_an_empty_schema_creates_nothing(pg_url):
    with pytest.raises(LoopxError) as err:
        postgres.PostgresStore(pg_url, readonly=True)
    assert err.value.code == "registry_unavailable" and "no LoopX registry" in err.value.message
    with _admin() as conn:
        count = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s", (backends.schema_of(pg_url),))
        assert count.fetchone()[0] == 0


@pytestmark_server
def test_a_search_path_without_a_schema_is_a_clear_error():
    base = backends.postgres_base_url()
    with pytest.raises(LoopxError) as err:
        postgres.PostgresStore(backends.with_schema(base, "t_doesnotexist0000"))
    assert err.value.code == "registry_unavailable" and "search_path" in err.value.message


@pytestmark_server
def test_an_older_schema_is_migrated_and_a_newer_one_refused(pg_url):
    schema_name = backends.schema_of(pg_url)
    with _admin() as conn:
        conn.execute(f"SET search_path = {schema_name}")
        for sql in schema.MIGRATIONS[0]:
            conn.execute(sql.format(**schema.DIALECT_WORDS["postgres"]))
        conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '1')")
    store = postgres.PostgresStore(pg_url)
    try:
        assert store.schema_version() == schema.CURRENT_VERSION
        assert store.integrity_check() == []
    finally:
        store.close()
    with _admin() as conn:
        conn.execute(f"UPDATE {schema_name}.meta SET value = %s WHERE key = 'schema_version'",
                     (str(schema.CURRENT_VERSION + 1),))
    with pytest.raises(LoopxError) as err:
        postgres.PostgresStore(pg_url)
    assert err.value.code == "registry_newer"


@pytestmark_server
def test_integrity_check_finds_a_gap_in_a_ledger(pg_url):
    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry

    with Registry.open(pg_url) as reg:
        goal = project_prompt.create(reg, "user", title="g")
        project_prompt.transition(reg, "user", "pause", goal["id"])
        project_prompt.transition(reg, "user", "resume", goal["id"])
        assert reg.store.integrity_check() == []
        reg.store.write(lambda tx: tx.execute("DELETE FROM events WHERE goal_id = ? AND seq = 2", (goal["id"],)))
        problems = reg.store.integrity_check()
    assert any(goal["id"] in p and "numbered" in p for p in problems), problems


@pytestmark_server
def test_a_gap_is_known_loss_only_for_the_kinds_the_caller_names(pg_url):
    """The store names no event kind of its own: which events record loss is the caller's to say
    (``self-repair check`` names loopx.ledger.integrity.LOSS_KINDS)."""
    from loopx.domain import damage
    from loopx.domain import goals as project_prompt
    from loopx.ledger.integrity import LOSS_KINDS
    from loopx.ledger.registry import Registry

    with Registry.open(pg_url) as reg:
        g = project_prompt.create(reg, "user", title="g")["id"]
        project_prompt.transition(reg, "user", "pause", g)
        project_prompt.transition(reg, "user", "resume", g)
        reg.store.write(lambda tx: tx.execute("DELETE FROM events WHERE goal_id = ? AND seq = 2", (g,)))
        reg.store.write(lambda tx: tx.execute("UPDATE events SET kind = ?, body = ? WHERE goal_id = ? AND seq = 3",
                                              ("capability.loss_recorded", '{"lost":[2],"acknowledged":[]}', g)))
        assert any(g in p and "numbered" in p for p in reg.store.integrity_check())
        assert any(g in p for p in reg.store.integrity_check(("some.other_kind",)))
        assert reg.store.integrity_check(LOSS_KINDS) == []
        assert damage.storage_integrity(reg.store) == []


@pytestmark_server
def test_a_writer_that_waited_for_the_goal_runs_again_on_a_fresh_snapshot(pg_url):
    """Two writers on one goal: the second queues on the goal's row, then is retried and sees
    the first one's change: nothing lost, the ledger numbered without gaps."""
    from loopx.ledger import log as ledger
    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry

    first, second = Registry.open(pg_url), Registry.open(pg_url)
    try:
        goal = project_prompt.create(first, "user", title="contended", criteria=["a", "b"])
        holding, release = threading.Event(), threading.Event()
        attempts = []

        def slow(w):
            holding.set()
            assert release.wait(60)
            w.emit("goal.criterion_met", {"index": 0})
            return w.revision

        def quick(w):
            attempts.append(w.goal["revision"])
            w.emit("goal.criterion_met", {"index": 1})
            return w.revision

        results = {}
        t1 = threading.Thread(target=lambda: results.setdefault("slow", first.mutate("user", slow, goal_id=goal["id"])))
        t1.start()
        assert holding.wait(60)
        t2 = threading.Thread(target=lambda: results.setdefault("quick", second.mutate("user", quick, goal_id=goal["id"])))
        t2.start()
        waiting = second.store._conn.info.backend_pid

        def blocked():
            with _admin() as conn:
                return conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                    (waiting,)).fetchone() == ("Lock",)

        wait_until(blocked, "the second writer to wait on the first one's lock")  # (correct without it, too)
        release.set()
        t1.join(60)
        t2.join(60)
        assert results == {"slow": 2, "quick": 3}
        assert attempts[-1] == 2  # the attempt that committed saw the first writer's event
        with second.read() as tx:
            events = ledger.events(tx, goal["id"])
            assert [e.seq for e in events] == [1, 2, 3]
            state = ledger.snapshot(tx, goal["id"])
        assert ledger.normalise(ledger.replayed_snapshot(events)) == ledger.normalise(state)
        assert [c["met"] for c in project_prompt.show(second, goal["id"])["criteria"]] == [True, True]
    finally:
        first.close()
        second.close()


@pytestmark_server
def test_a_unique_violation_outside_the_ledger_is_not_retried(pg_url):
    store = postgres.PostgresStore(pg_url)
    calls = []
    try:
        store.write(lambda tx: tx.execute("INSERT INTO meta (key, value) VALUES ('dup', '1')"))

        def work(tx):
            calls.append(1)
            tx.execute("INSERT INTO meta (key, value) VALUES ('dup', '2')")

        with pytest.raises(psycopg.errors.UniqueViolation):
            store.write(work)
        assert calls == [1]
    finally:
        store.close()


@pytestmark_server
def test_wait_for_change_wakes_on_a_commit_and_times_out_without_one(pg_url):
    postgres.PostgresStore(pg_url).close()
    watcher = postgres.PostgresStore(pg_url, readonly=True)
    try:
        start = watcher.data_version()
        assert watcher.wait_for_change(0.2) is False
        timer = threading.Timer(0.5, lambda: _create(pg_url))
        timer.start()
        assert watcher.wait_for_change(60) is True
        timer.join()
        assert watcher.data_version() > start
    finally:
        watcher.close()


def _create(url):
    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry

    with Registry.open(url) as reg:
        project_prompt.create(reg, "user", title="ping")


@pytestmark_server
def test_the_store_reconnects_after_the_server_dropped_its_connection(pg_url):
    store = postgres.PostgresStore(pg_url, readonly=False)
    try:
        version = store.data_version()
        pid = store._conn.info.backend_pid
        with _admin() as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))

        def noticed():
            try:
                with store.read() as tx:
                    tx.one("SELECT 1 AS x")
            except LoopxError as err:
                assert err.code == "registry_unavailable"
                return True
            except psycopg.OperationalError:
                return True
            return store._conn.broken

        wait_until(noticed, "the store to notice its connection is gone", timeout=30)
        with store.read() as tx:  # the next transaction starts on a new connection
            assert tx.one("SELECT 1 AS x") == {"x": 1}
        assert store._conn.info.backend_pid != pid
        # Commits made while the connection was down went unheard: a watcher is told to look.
        assert store.data_version() != version
    finally:
        store.close()


@pytestmark_server
def test_threads_sharing_one_store_do_not_interleave_transactions(pg_url):
    """The status server may share a store between threads; each transaction stays whole."""
    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry

    reg = Registry.open(pg_url)
    errors = []

    def worker(k):
        try:
            for i in range(10):
                project_prompt.create(reg, "user", title=f"t{k}-{i}")
                with reg.read() as tx:
                    tx.one("SELECT count(*) AS n FROM goals")
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    try:
        assert errors == []
        assert len(project_prompt.list_goals(reg, limit=100)) == 40
    finally:
        reg.close()


@pytestmark_server
def test_numeric_results_come_back_as_python_numbers(pg_url):
    store = postgres.PostgresStore(pg_url)
    try:
        with store.read() as tx:
            row = tx.one("SELECT sum(x) AS s, 1.5::numeric AS f FROM (SELECT 2::bigint AS x UNION ALL SELECT 3) t")
        assert row == {"s": 5, "f": 1.5}
        assert type(row["s"]) is int and type(row["f"]) is float
    finally:
        store.close()


@pytestmark_server
def test_the_registry_url_works_with_both_schemes(pg_url):
    from loopx.domain import goals as project_prompt
    from loopx.ledger.registry import Registry

    alias = pg_url.replace("postgresql://", "postgres://", 1)
    with Registry.open(pg_url) as reg:
        goal = project_prompt.create(reg, "user", title="x")
    with Registry.open(alias) as reg:
        assert reg.store.dialect == "postgres"
        assert project_prompt.show(reg, goal["id"])["title"] == "x"
