"""One conformance suite for stores: every test here runs on SQLite and on PostgreSQL.

The registry, contract, gates and claims are written against the store interface of
``loopx/store/base.py``; these tests pin what that interface promises, so a backend that
passes them is a drop-in.
"""

from __future__ import annotations

import pytest

from loopx.values.errors import LoopxError
from loopx.ledger.registry import Registry, open_store
from loopx.store import schema


@pytest.fixture
def store(registry_url):
    s = open_store(registry_url)
    yield s
    s.close()


def _put(store, key, value):
    def work(tx):
        return tx.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))

    return store.write(work)


def test_a_new_registry_is_at_the_current_schema_and_healthy(store):
    assert store.schema_version() == schema.CURRENT_VERSION
    assert store.integrity_check() == []
    assert store.dialect in ("sqlite", "postgres")


def test_rows_are_dicts_and_one_returns_the_first_or_none(store):
    assert _put(store, "k1", "v1") == 1
    _put(store, "k2", "v2")
    with store.read() as tx:
        rows = tx.query("SELECT key, value FROM meta WHERE key IN (?, ?) ORDER BY key", ("k1", "k2"))
        assert rows == [{"key": "k1", "value": "v1"}, {"key": "k2", "value": "v2"}]
        assert tx.one("SELECT value FROM meta WHERE key = ?", ("k2",)) == {"value": "v2"}
        assert tx.one("SELECT value FROM meta WHERE key = ?", ("missing",)) is None


def test_question_marks_and_percent_signs_inside_literals_are_left_alone(store):
    _put(store, "pct", "100% sure?")
    with store.read() as tx:
        row = tx.one("SELECT value, 'a?b' AS lit, '50%' AS pc FROM meta WHERE key = ? AND value LIKE '100%'", ("pct",))
    assert row == {"value": "100% sure?", "lit": "a?b", "pc": "50%"}


def test_execute_returns_the_number_of_rows_changed(store):
    _put(store, "a", "1")
    _put(store, "b", "1")
    changed = store.write(lambda tx: tx.execute("UPDATE meta SET value = ? WHERE value = ?", ("2", "1")))
    assert changed == 2


def test_a_transaction_that_raises_writes_nothing(store):
    def work(tx):
        tx.execute("INSERT INTO meta (key, value) VALUES (?, ?)", ("half", "written"))
        raise LoopxError("invalid_argument", "changed my mind")

    with pytest.raises(LoopxError):
        store.write(work)
    with store.read() as tx:
        assert tx.one("SELECT 1 AS x FROM meta WHERE key = ?", ("half",)) is None


def test_write_returns_what_work_returns(store):
    assert store.write(lambda tx: {"answer": 42}) == {"answer": 42}


def test_booleans_store_as_integers_and_sums_come_back_as_numbers(reg):
    from loopx.domain import goals as project_prompt

    goal = project_prompt.create(reg, "user", title="T", parallel_runs=True)
    with reg.read() as tx:
        row = tx.one(
            "SELECT parallel_runs, sum(revision) AS total, count(*) AS n FROM goals WHERE id = ? GROUP BY parallel_runs",
            (goal["id"],),
        )
    assert row == {"parallel_runs": 1, "total": 1, "n": 1}
    assert all(type(v) is int for v in row.values())
    with reg.read() as tx:
        row = tx.one("SELECT sum(seq) AS s FROM events WHERE goal_id = ?", (goal["id"],))
    assert row["s"] == 1 and type(row["s"]) is int


def test_bool_parameters_are_accepted_as_integers(store):
    store.write(lambda tx: tx.execute("INSERT INTO meta (key, value) VALUES (?, ?)", ("b", "x")))
    with store.read() as tx:
        assert tx.one("SELECT ? + 1 AS v FROM meta WHERE key = ?", (True, "b"))["v"] == 2


def test_text_round_trips_exactly(store):
    text = "héllo ✓ 日本 🎉 'quote' \"dq\" \\ back \n newline"
    _put(store, "u", text)
    with store.read() as tx:
        assert tx.one("SELECT value FROM meta WHERE key = ?", ("u",))["value"] == text


def test_real_columns_keep_fractions(reg):
    def work(tx):
        tx.execute(
            "INSERT INTO rewards (id, goal_id, run_id, score, comment, author, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            ("w-000000000001", "g-000000000001", "r-000000000001", -0.25, None, "user", "t"),
        )

    reg.store.write(work)
    with reg.read() as tx:
        assert tx.one("SELECT score FROM rewards")["score"] == -0.25


def test_lock_goal_returns_the_row_or_none(reg):
    from loopx.domain import goals as project_prompt

    goal = project_prompt.create(reg, "user", title="Locked")
    row = reg.store.write(lambda tx: tx.lock_goal(goal["id"]))
    assert row["id"] == goal["id"] and row["title"] == "Locked"
    assert reg.store.write(lambda tx: tx.lock_goal("g-000000000000")) is None


def test_insert_returning_gives_the_new_event_id(reg):
    from loopx.domain import goals as project_prompt

    a = project_prompt.create(reg, "user", title="A")
    b = project_prompt.create(reg, "user", title="B")
    with reg.read() as tx:
        ids = [r["id"] for r in tx.query("SELECT id FROM events WHERE goal_id IN (?, ?) ORDER BY id", (a["id"], b["id"]))]
        created = tx.query("SELECT created_seq FROM goals ORDER BY created_seq")
    assert ids[0] < ids[1]
    assert [r["created_seq"] for r in created] == ids


def test_a_read_snapshot_does_not_see_later_commits(registry_url):
    reader, writer = open_store(registry_url), open_store(registry_url)
    try:
        _put(writer, "before", "1")
        with reader.read() as tx:
            assert tx.one("SELECT count(*) AS n FROM meta WHERE key IN ('before', 'after')")["n"] == 1
            _put(writer, "after", "1")
            assert tx.one("SELECT count(*) AS n FROM meta WHERE key IN ('before', 'after')")["n"] == 1
        with reader.read() as tx:
            assert tx.one("SELECT count(*) AS n FROM meta WHERE key IN ('before', 'after')")["n"] == 2
    finally:
        reader.close()
        writer.close()


def test_a_read_only_store_cannot_write_at_all(registry_url):
    open_store(registry_url).close()  # create it
    ro = open_store(registry_url, readonly=True)
    try:
        assert ro.readonly
        with pytest.raises(LoopxError) as err:
            ro.write(lambda tx: tx.execute("INSERT INTO meta (key, value) VALUES ('x', 'y')"))
        assert err.value.code == "registry_readonly"
        # Not merely refused by LoopX: the database itself refuses a write smuggled into a read.
        with pytest.raises(Exception):
            with ro.read() as tx:
                tx.execute("INSERT INTO meta (key, value) VALUES ('x', 'y')")
        with ro.read() as tx:
            assert tx.one("SELECT 1 AS x FROM meta WHERE key = 'x'") is None
    finally:
        ro.close()


def test_a_read_only_registry_cannot_be_written_through_the_registry(registry_url):
    from loopx.domain import goals as project_prompt

    Registry.open(registry_url).close()
    with Registry.open(registry_url, readonly=True) as ro:
        with pytest.raises(LoopxError) as err:
            project_prompt.create(ro, "user", title="nope")
        assert err.value.code == "registry_readonly"
        assert project_prompt.list_goals(ro) == []


def test_data_version_changes_when_another_connection_commits(registry_url):
    from loopx.domain import goals as project_prompt

    watcher = open_store(registry_url, readonly=False)
    try:
        first = watcher.data_version()
        assert watcher.data_version() == first  # nothing happened
        with Registry.open(registry_url) as other:
            project_prompt.create(other, "user", title="news")
        from loopx.testing import wait_until

        wait_until(lambda: watcher.data_version() != first, "the other connection's change to be seen")
    finally:
        watcher.close()


def test_reopening_finds_everything_committed(registry_url):
    from loopx.domain import goals as project_prompt

    with Registry.open(registry_url) as reg:
        goal = project_prompt.create(reg, "user", title="durable", criteria=["c"])
    with Registry.open(registry_url) as reg:
        assert project_prompt.show(reg, goal["id"]) == goal


def test_replayed_ledger_equals_state_on_every_backend(reg):
    from loopx.ledger import log as ledger
    from loopx.domain import goals as project_prompt

    goal = project_prompt.create(reg, "user", title="replay", criteria=["a", "b"])
    project_prompt.transition(reg, "user", "pause", goal["id"], reason="lunch")
    project_prompt.transition(reg, "user", "resume", goal["id"])
    with reg.read() as tx:
        events = ledger.events(tx, goal["id"])
        state = ledger.snapshot(tx, goal["id"])
    assert [e.seq for e in events] == [1, 2, 3]
    assert ledger.normalise(ledger.replayed_snapshot(events)) == ledger.normalise(state)


def test_operation_id_retry_returns_the_first_result_on_every_backend(reg):
    from loopx.domain import goals as project_prompt

    first = project_prompt.create(reg, "user", title="once", operation_id="op-1")
    again = project_prompt.create(reg, "user", title="once", operation_id="op-1")
    assert again == first
    assert len(project_prompt.list_goals(reg)) == 1


def test_the_postgres_scheme_is_registered_through_the_state_hook():
    from loopx.seam import plugins

    registered = []
    plugins.get_plugin_manager().hook.loopx_register_stores(register=lambda s, f: registered.append(s))
    assert {"sqlite", "postgresql", "postgres"} <= set(registered)
    factories = plugins.store_factories()
    assert factories["postgres"] is factories["postgresql"]
