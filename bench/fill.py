"""The benchmark's bulk fill: registries of any size, whose goals are the ones the CLI makes (not a benchmark itself).

The first :data:`TEMPLATE_GOALS` goals are made through the Python API, one command (one
transaction) per step, exactly as ``loopx`` commands make them (:func:`api_goal`). Every later
goal is a copy of the one of them with the same mix (:func:`variant`), written in bulk: each row
the commands wrote for the template goal (events and every goal table of
:data:`loopx.store.schema.GOAL_TABLES`) with the template's ids, title, creation numbers and
contract fingerprint replaced by the new goal's, and everything that depends on them computed
again with the registry's key as a command computes it: the events' hash chain
(:func:`loopx.ledger.integrity.event_hash`), each state row's MAC over the text the database prints for
it (taken from the ``state_dirty`` change log the triggers fill, as
:func:`loopx.ledger.state_macs.seal_incremental` does), the digest's sum, counts and tag
(:func:`loopx.ledger.state_macs.encode`) and the chain head, and the contract fingerprint
(:func:`loopx.domain.usage.fingerprint_of`). So ``self-repair check`` passes on the result and
should-run makes the decision a real goal gets (``run``, not ``repair``);
``tests/test_bench_fill.py`` checks both and compares the copies' rows with the API's.

What the bulk path skips is per-command overhead: a process, a transaction and a commit per
step, and the rollback anchor's entry per goal (an anchor behind the registry is accepted; see
loopx/ledger/anchor.py). A copy's times are its template's. How it is fast: the copies are compiled
templates (string joins), 25,000 goals a transaction in the order of their ids, the MACs are
one-shot HMACs, the change log's triggers are left out while a batch is written (and put back,
as the schema makes them, before it commits), and on SQLite the goal tables' secondary indexes
are made once at the end (their random keys made each batch rewrite most index pages).

The mix per goal: created, limits set (``max_turns`` 3, ``max_tokens`` 50,000), three todos (the
second depending on the first), then (one goal in ten) a turn, then two allow-listed actions. One
goal in ten has thus had a finished run (one in thirty of all goals a failed one, which needs attention); one in fifty waits
on a pending gate; one in five thousand has an open run whose lease has already expired
(attention judged at read time).
"""

from __future__ import annotations

import hmac
import json
import os
import re
import time

FILL_VERSION = 3  # bump when the mix or the way it is written changes: cached registries are rebuilt
BATCH_GOALS = 25_000
CACHE_KIB = 1_000_000  # SQLite's page cache while filling
#: Goals 0..10 are made through the API; they hold one goal of each mix (see :func:`variant`).
TEMPLATE_GOALS = 11
#: One goal in this many has an open run whose lease ran out (the tests make them more often).
EXPIRED_EVERY = 5000
_ID = re.compile(r"\b([a-z])-[0-9a-f]{12}\b")
_PREV = "PREVIOUSHASH"  # where the previous event's hash goes in an event's hash input
_INT_OFFSET = {("events", "id"), ("goals", "created_seq"), ("todos", "created_seq"), ("todo_ready", "created_seq"),
               ("goal_summary", "created_seq")}


def variant(i: int) -> int:
    """The template goal (0..10) that goal ``i`` copies: the first goal with the same mix."""
    if i % EXPIRED_EVERY == 1:
        return 1  # an open run whose lease ran out
    if i % 30 == 0:
        return 0  # a failed run
    if i % 10 == 0:
        return 10  # a finished run
    if i % 50 == 7:
        return 7  # a pending gate
    return 2


def api_goal(reg, i: int) -> str:
    """Make goal number ``i`` of the mix through the Python API, one command per step; its id."""
    from loopx.domain import actions, gates, goals, runs, todos
    from loopx.values import clock
    from loopx.views import quota
    from loopx.views.should_run import should_run

    expired = i % EXPIRED_EVERY == 1
    if expired:  # the whole goal two hours ago: its run's lease (an hour) has run out
        clock.set_offset(-7200)
    try:
        g = goals.create(reg, "user", title=f"goal {i}", description="benchmark goal", criteria=["a criterion"])["id"]
        quota.set_limits(reg, "user", goal_id=g, values={"max_turns": 3, "max_tokens": 50_000})
        first = todos.add(reg, "user", goal_id=g, text="first step", priority="P1")["id"]
        todos.add(reg, "user", goal_id=g, text="second step", priority="P1", depends_on=[first])
        todos.add(reg, "user", goal_id=g, text="third step", priority="P2")
        # The turn before the actions are allowed: with them its contract would list their steps,
        # and an ``ok`` finish needs their evidence.
        if i % 10 == 0 or expired:
            out = should_run(reg, "user", goal_id=g, agent="bench")
            assert out["decision"] == "run", out
            if not expired:
                runs.finish(reg, "executor", run_id=out["interaction_contract"]["run_id"],
                            outcome="failed" if i % 30 == 0 else "ok", tokens=1200, cost=0.03, handoff="turn done",
                            agent="bench")
        actions.add(reg, "user", goal_id=g, name="test", argv=["pytest", "-q"])
        actions.add(reg, "user", goal_id=g, name="lint", argv=["ruff", "check", "."])
        if i % 50 == 7:
            gates.add(reg, "user", goal_id=g, title="approve the deploy", scope="production", blocks="all")
    finally:
        clock.set_offset(0)
    return g


class Template:
    """The rows the API wrote for one goal, compiled so that a copy costs string joins and hashes."""

    def __init__(self, tx, goal_id: str):
        from loopx.domain.goals import load_goal
        from loopx.store import schema
        from loopx.domain.usage import fingerprint_of, usage

        self.goal_id = goal_id
        events = tx.query("SELECT * FROM events WHERE goal_id = ? ORDER BY seq", (goal_id,))
        self.first_event = events[0]["id"]
        if [e["id"] - self.first_event for e in events] != list(range(len(events))):
            raise RuntimeError(f"template goal {goal_id}: its events are not numbered one after another")
        for table in ("operations", "notifications", "goal_leases"):
            if tx.one(f"SELECT count(*) AS n FROM {table} WHERE goal_id = ?", (goal_id,))["n"]:
                raise RuntimeError(f"template goal {goal_id} has {table} rows, which the bulk copy does not make")
        rows = {}
        for table, _ in schema.GOAL_TABLES.items():
            column = "id" if table == "goals" else "goal_id"
            got = tx.query(f"SELECT * FROM {table} WHERE {column} = ?", (goal_id,))
            if got:
                rows[table] = got
        goal_row = rows["goals"][0]
        # Every id the rows hold (todos, runs, contracts, gates, the goal): each copy gets its own.
        ids = {}
        for value in self._texts(events, rows):
            for m in _ID.finditer(value):
                ids.setdefault(m.group(0), m.group(1))
        ids.pop(goal_id)
        self.ids = [goal_id, *ids]  # the goal first
        self.kinds = [goal_id[0], *ids.values()]
        self.title = goal_row["title"]
        tokens = [re.escape(t) for t in self.ids] + [re.escape(self.title) + r"(?![0-9])"]
        # The contract fingerprint names the goal (and its gates): computed anew for each copy.
        self.fingerprint = None
        if "runs" in rows:
            fps = {r["fingerprint"] for r in rows["runs"]}
            run = rows["runs"][0]
            goal = load_goal(tx, goal_id)
            # The goal as it stood when the run opened (gates and actions added since left out).
            opened = run["opened_at"]
            gates = [(g["id"], g["status"], g["blocks"]) for g in rows.get("gates", ()) if g["created_at"] <= opened]
            acts = [(a["name"], json.loads(a["argv"]), a["gate_id"]) for a in rows.get("actions", ())
                    if a["created_at"] <= opened]
            self._fp_args = (goal, gates, acts, usage(tx, goal_id, exclude_run=run["id"]))
            if len(fps) != 1 or fingerprint_of(*self._fp_args) != run["fingerprint"]:
                raise RuntimeError(f"template goal {goal_id}: its run's fingerprint is not the goal's as it stands")
            self.fingerprint = run["fingerprint"]
            tokens.append(re.escape(self.fingerprint))
        self._token = re.compile("|".join(tokens + [_PREV]))
        self._fingerprint_of = fingerprint_of
        # Each row as a compiled function of the copy's values ``v`` and its first event number
        # ``e``; each event also as its chain hash's input, a function of ``v`` and the previous hash.
        columns = ("id", "goal_id", "seq", "at", "actor", "kind", "body", "operation_id")
        self.events = [(self._compile("events", e, columns),
                        self._code(self._parts(json.dumps([_PREV, goal_id, *(e[c] for c in columns[2:])],
                                                          separators=(",", ":"))), "v, p"))
                       for e in events]
        self.tables = {t: (list(rs[0]), eval("lambda v, e: [" + ", ".join(  # noqa: S307 - code made just above
            self._row_expr(t, r, list(r)) for r in rs) + "]")) for t, rs in rows.items()}

    @staticmethod
    def _texts(events, rows):
        for r in events:
            yield from (v for v in r.values() if isinstance(v, str))
        for rs in rows.values():
            for r in rs:
                yield from (v for v in r.values() if isinstance(v, str))

    def _parts(self, text: str) -> str:
        """``text`` as a Python expression joining its fixed parts and the substituted values."""
        parts, at = [], 0
        for m in self._token.finditer(text):
            parts += [repr(text[at:m.start()]), self._slot(m.group(0))]
            at = m.end()
        parts.append(repr(text[at:]))
        return " + ".join(p for p in parts if p != "''") or "''"

    def _slot(self, text: str) -> str:
        if text == _PREV:
            return "p"
        if text in self.ids:
            return f"v[{self.ids.index(text)}]"
        if text == self.fingerprint:
            return f"v[{len(self.ids) + 1}]"
        return f"v[{len(self.ids)}]"  # the title

    def _row_expr(self, table: str, row: dict, columns) -> str:
        out = []
        for c in columns:
            v = row[c]
            if (table, c) in _INT_OFFSET:
                out.append(f"e + {v - self.first_event}")
            elif isinstance(v, str):
                out.append(self._parts(v))
            elif v is None or type(v) in (int, float, bool):
                out.append(repr(v))
            else:
                raise RuntimeError(f"template goal {self.goal_id}: {table}.{c} holds a {type(v).__name__}")
        return "(" + ", ".join(out) + ",)"

    def _compile(self, table: str, row: dict, columns):
        return self._code(self._row_expr(table, row, columns), "v, e")

    @staticmethod
    def _code(expr: str, args: str):
        return eval(f"lambda {args}: {expr}")  # noqa: S307 - an expression made from the template's own rows

    def values(self, i: int, rnd: bytes) -> list[str]:
        """The substituted values of copy number ``i``: its ids (from 6 random bytes each of
        ``rnd``), its title and its fingerprint."""
        vals = [f"{kind}-{rnd[6 * k:6 * k + 6].hex()}" for k, kind in enumerate(self.kinds)]
        vals.append(f"goal {i}")
        if self.fingerprint is not None:
            import attrs

            goal, gates, acts, used = self._fp_args
            ren = dict(zip(self.ids, vals))
            vals.append(self._fingerprint_of(attrs.evolve(goal, id=vals[0]), [(ren.get(g, g), s, b) for g, s, b in gates],
                                             acts, used))
        return vals


def _hmac_hex(key: bytes):
    def digest(msg: bytes) -> str:
        return hmac.digest(key, msg, "sha256").hex()
    return digest


def _drop_triggers(dialect: str) -> list[str]:
    """The statements that remove the change log's triggers (:func:`loopx.ledger.state_macs.trigger_sql`
    makes them again)."""
    from loopx.ledger import state_macs

    if dialect == "sqlite":
        return [f"DROP TRIGGER state_dirty_{t}_{op}" for t in state_macs.TABLES for op in ("insert", "update", "delete")]
    return [f"DROP TRIGGER state_dirty_{t} ON {t}" for t in state_macs.TABLES]


_INDEXES_KEY = "bench_fill_indexes"


def _drop_indexes(tx) -> None:
    """Drop the goal tables' secondary indexes for the bulk copy (SQLite): built once at the end
    from sorted rows (:func:`_make_indexes`) they cost a fraction of a million random inserts.
    Their definitions wait in ``meta`` meanwhile, so an interrupted fill still makes them."""
    if tx.one("SELECT value FROM meta WHERE key = ?", (_INDEXES_KEY,)) is not None:
        return  # dropped by the fill this one resumes
    from loopx.store import schema

    tables = ("events", *schema.GOAL_TABLES)
    found = tx.query(f"SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN"
                     f" ({', '.join('?' for _ in tables)}) ORDER BY name", tables)
    tx.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (_INDEXES_KEY, json.dumps(
        [[r["name"], r["sql"]] for r in found])))
    for r in found:
        tx.execute(f"DROP INDEX {r['name']}")


def _make_indexes(tx) -> None:
    row = tx.one("SELECT value FROM meta WHERE key = ?", (_INDEXES_KEY,))
    if row is None:
        return
    for _, sql in json.loads(row["value"]):
        tx.execute(sql)
    tx.execute("DELETE FROM meta WHERE key = ?", (_INDEXES_KEY,))


def fill(reg, n: int, *, progress=None) -> None:
    """Fill ``reg`` up to ``n`` goals, in batches of one transaction each (so an interrupted fill
    leaves whole batches, and calling this again resumes it)."""
    from loopx.ledger import integrity, keys, state_macs

    if reg.store.dialect == "sqlite":
        # Goal ids are random, so every batch touches pages all over the indexes: keep them in
        # memory (the default 2 MB cache turns a million-goal fill into gigabytes of page reads).
        for pragma in (f"cache_size = -{CACHE_KIB}", "mmap_size = 4294967296", "wal_autocheckpoint = 50000"):
            reg.store._conn.execute(f"PRAGMA {pragma}")
    with reg.read() as tx:
        done = tx.one("SELECT count(*) AS n FROM goals")["n"]
    while done < min(n, TEMPLATE_GOALS):
        api_goal(reg, done)
        done += 1
    if done >= n:
        return
    with reg.read() as tx:
        ring = keys.keyring(tx)
        if ring.state != "keyed":
            raise RuntimeError(f"the registry is not keyed ({ring.state}): the fill writes keyed chains and digests")
        first = [r["id"] for r in tx.query("SELECT id FROM goals ORDER BY created_seq LIMIT ?", (TEMPLATE_GOALS,))]
        templates = {k: Template(tx, first[k]) for k in {variant(i) for i in range(TEMPLATE_GOALS)}}
    mac = _hmac_hex(ring.key)
    keep_ids = " OVERRIDING SYSTEM VALUE" if reg.store.dialect == "postgres" else ""
    inserts = {"events": f"INSERT INTO events (id, goal_id, seq, at, actor, kind, body, operation_id, prev_hash, hash)"
                         f"{keep_ids} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"}
    for t in templates.values():
        for table, (columns, _) in t.tables.items():
            inserts[table] = (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})")
    # The tables in the order the API fills them (goals before what refers to them).
    order = [t for t in ("goals", "gates", "todos", "actions", "runs", "contracts", "evidence", "rewards",
                         "capability_state", "goal_summary", "goal_usage", "todo_deps", "todo_ready")
             if t in inserts]
    started = time.monotonic()
    if reg.store.dialect == "sqlite":
        reg.store.write(_drop_indexes)
    while done < n:
        count = min(BATCH_GOALS, n - done)

        def batch(tx, first_goal=done, count=count):
            if tx.one("SELECT count(*) AS n FROM state_dirty")["n"]:
                raise RuntimeError("state_dirty is not empty outside a transaction: the registry is damaged")
            # The change log's triggers are left out while the batch is written (they are put back,
            # exactly as the schema made them, before it commits): the texts are read below.
            for sql in _drop_triggers(tx.dialect):
                tx.execute(sql)
            event_id = first_event = int(tx.one("SELECT max(id) AS m FROM events")["m"] or 0) + 1
            if tx.dialect == "sqlite":  # the batch's rows are those past each table's last rowid
                before = {t: tx.one(f"SELECT max(rowid) AS m FROM {t}")["m"] or 0 for t in state_macs.TABLES}
            events, rows, heads = [], {t: [] for t in order}, {}
            # The batch's goals in the order of their ids, so that every index on the goal is
            # written in order (a command's random ids would otherwise scatter each batch).
            copies = []
            for i in range(first_goal, first_goal + count):
                t = templates[variant(i)]
                copies.append((t.values(i, os.urandom(6 * len(t.kinds))), t))
            copies.sort(key=lambda c: c[0][0])
            for vals, t in copies:
                goal_id = vals[0]
                prev = integrity.GENESIS
                for row_of, hash_input in t.events:
                    digest = mac(hash_input(vals, prev).encode("ascii", "backslashreplace"))
                    events.append((*row_of(vals, event_id), prev, digest))
                    prev = digest
                heads[goal_id] = (len(t.events), prev)
                for table, (_, rows_of) in t.tables.items():
                    rows[table] += rows_of(vals, event_id)
                event_id += len(t.events)
            tx.executemany(inserts["events"], events)
            for table in order:
                if rows[table]:
                    tx.executemany(inserts[table], rows[table])
            # The state digest, as a command's seal makes it: each row's MAC over its text as the
            # database prints it (the expression the change log's triggers store), summed per goal.
            query = tx.tuples if hasattr(tx, "tuples") else (lambda sql, p: (None, [tuple(r.values())
                                                                                      for r in tx.query(sql, p)]))
            sums: dict = {g: [0, {}] for g in heads}
            macs = []
            for table, (column, _, _) in state_macs.TABLES.items():
                where, param = ((f"t.{column} IN (SELECT goal_id FROM events WHERE id >= ? AND seq = 1)", first_event)
                                if tx.dialect != "sqlite" else ("t.rowid > ?", before[table]))
                _, found = query(f"SELECT t.{column} AS g, {state_macs.key_sql(tx.dialect, table, 't')} AS k,"
                                 f" {state_macs.text_sql(tx.dialect, table, 't')} AS txt FROM {table} t"
                                 f" WHERE {where}", (param,))
                for goal_id, key, text in found:
                    msg = f"loopx-row-v1 {len(goal_id)}:{goal_id}{len(table)}:{table}{len(key)}:{key}{text}"
                    hexed = mac(msg.encode("utf-8", "backslashreplace"))
                    acc = sums[goal_id]
                    acc[0] += int(hexed, 16)
                    counts = acc[1]
                    counts[table] = counts.get(table, 0) + 1
                    if table == "runs" and json.loads(text).get("status") == "open":
                        counts[state_macs.OPEN_RUNS] = counts.get(state_macs.OPEN_RUNS, 0) + 1
                    macs.append((goal_id, table, key, hexed))
            for sql in state_macs.trigger_sql(tx.dialect):
                tx.execute(sql)
            from loopx.ledger import history_guard

            history_guard.mark(tx)  # (PostgreSQL gives re-created triggers new oids: marked again, with the key)
            tx.executemany("INSERT INTO state_macs (goal_id, tbl, k, mac) VALUES (?, ?, ?, ?)", macs)
            tx.executemany("INSERT INTO goal_heads (goal_id, seq, head_hash, state_digest) VALUES (?, ?, ?, ?)",
                           [(g, seq, head, state_macs.encode(ring, g, seq, head, sums[g][0] % state_macs.MODULUS,
                                                             sums[g][1]))
                            for g, (seq, head) in heads.items()])
            if tx.dialect == "postgres":
                tx.execute("SELECT setval(pg_get_serial_sequence('events', 'id'), (SELECT max(id) FROM events))")

        reg.store.write(batch)
        done += count
        if progress:
            rate = (done - TEMPLATE_GOALS) / max(time.monotonic() - started, 1e-9)
            progress(f"  {done:,}/{n:,} goals ({rate:,.0f}/s)")
    if reg.store.dialect == "sqlite":
        reg.store.write(_make_indexes)
        if progress:
            progress(f"  indexes made: {time.monotonic() - started:,.0f} s")
