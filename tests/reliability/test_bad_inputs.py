"""Hostile input, one case at a time: exit 2, a stable error code, and a ledger and state that
are exactly what they were (every row of every table compared before and after)."""

from __future__ import annotations

import pytest

from loopx.store import schema
from tests.factories import make_goal

BIG = "x" * (70 * 1024)
DEEP = "[" * 30000 + "]" * 30000

# (name, argv with {G} goal, {T} todo, {U} second todo, {X} pending gate, {R} open run, env, code)
CASES = [
    ("data lone surrogate", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s", "--data",
                             '{"s":"\\ud800"}'], None, "invalid_argument"),
    ("data lone low surrogate", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s",
                                 "--data", '["\\udfff\\ud800"]'], None, "invalid_argument"),
    ("data surrogate key", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s", "--data",
                            '{"\\udc00":1}'], None, "invalid_argument"),
    ("data 1e999", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s", "--data", "[1e999]"],
     None, "invalid_argument"),
    ("data -1e999", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s", "--data",
                     '{"x":-1e999}'], None, "invalid_argument"),
    ("data NaN", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s", "--data", "[NaN]"],
     None, "invalid_argument"),
    ("data Infinity", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s", "--data",
                       "[Infinity]"], None, "invalid_argument"),
    ("data 30000 brackets", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s", "--data",
                             DEEP], None, "invalid_argument"),
    ("data 65 levels", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s", "--data",
                        "[" * 65 + "]" * 65], None, "invalid_argument"),
    ("data huge integer", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s", "--data",
                           "[1" + "0" * 5000 + "]"], None, "invalid_argument"),
    ("data beyond 64 bits", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s", "--data",
                             "[18446744073709551616]"], None, "invalid_argument"),
    ("data too big", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s", "--data",
                      '["' + BIG + '"]'], None, "invalid_argument"),
    ("data malformed", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s", "--data",
                        '{"a": 1'], None, "invalid_argument"),
    ("data a bare string", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s", "--data",
                            '"text"'], None, "invalid_argument"),
    ("data trailing garbage", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s",
                               "--data", "[1] [2]"], None, "invalid_argument"),
    ("evidence bad kind", ["evidence", "add", "--goal-id", "{G}", "--kind", "NOT A KIND", "--summary", "s"], None,
     "invalid_argument"),
    ("evidence empty summary", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", " "], None,
     "invalid_argument"),
    ("evidence missing file", ["evidence", "add", "--goal-id", "{G}", "--kind", "file", "--summary", "s",
                               "--file", "/nonexistent/file"], None, "invalid_argument"),
    ("evidence unknown run", ["evidence", "add", "--run-id", "r-000000000000", "--kind", "note", "--summary", "s"],
     None, "run_not_found"),
    ("executor evidence without run", ["evidence", "add", "--goal-id", "{G}", "--kind", "note", "--summary", "s"],
     {"LOOPX_ACTOR": "executor"}, "run_not_open"),
    ("empty title", ["project_prompt", "create", "--title", ""], None, "invalid_argument"),
    ("title too long", ["project_prompt", "create", "--title", "x" * 201], None, "invalid_argument"),
    ("title NUL", ["project_prompt", "create", "--title", "a\x00b"], None, "invalid_argument"),
    ("path traversal goal id", ["todo", "add", "--goal-id", "g-../../etc/pa", "--text", "x"], None,
     "invalid_argument"),
    ("unknown goal", ["todo", "add", "--goal-id", "g-0123456789ab", "--text", "x"], None, "goal_not_found"),
    ("empty todo text", ["todo", "add", "--goal-id", "{G}", "--text", ""], None, "invalid_argument"),
    ("todo on unknown todo", ["todo", "add", "--goal-id", "{G}", "--text", "x", "--depends-on", "t-0123456789ab"],
     None, "todo_not_found"),
    ("dependency cycle", ["todo", "depend", "--goal-id", "{G}", "--todo-id", "{T}", "--on", "{U}"], None,
     "dependency_cycle"),
    ("unknown gate", ["gate", "approve", "--goal-id", "{G}", "--gate-id", "x-0123456789ab"], None, "gate_not_found"),
    ("executor approves", ["gate", "approve", "--goal-id", "{G}", "--gate-id", "{X}"],
     {"LOOPX_ACTOR": "executor"}, "actor_forbidden"),
    ("executor creates goal", ["project_prompt", "create", "--title", "mine"], {"LOOPX_ACTOR": "executor"},
     "actor_forbidden"),
    ("bogus actor", ["project_prompt", "create", "--title", "t"], {"LOOPX_ACTOR": "root"}, "invalid_actor"),
    ("dashboard writes", ["todo", "add", "--goal-id", "{G}", "--text", "x"], {"LOOPX_ACTOR": "dashboard"},
     "actor_forbidden"),
    ("negative max turns", ["quota", "set", "--goal-id", "{G}", "--max-turns", "-1"], None, "invalid_argument"),
    ("nan max cost", ["quota", "set", "--goal-id", "{G}", "--max-cost", "nan"], None, "invalid_argument"),
    ("inf max wall", ["quota", "set", "--goal-id", "{G}", "--max-wall-seconds", "inf"], None, "invalid_argument"),
    ("1e999 grant", ["quota", "grant", "--goal-id", "{G}", "--wall-seconds", "1e999"], None, "invalid_argument"),
    ("zero grant", ["quota", "grant", "--goal-id", "{G}", "--turns", "0"], None, "invalid_argument"),
    ("unicode digit turns", ["quota", "set", "--goal-id", "{G}", "--max-turns", "\u00b2"], None,
     "invalid_argument"),
    ("ttl zero", ["quota", "should-run", "--goal-id", "{G}", "--ttl-seconds", "0"], None, "invalid_argument"),
    ("ttl nan", ["quota", "should-run", "--goal-id", "{G}", "--ttl-seconds", "nan"], None, "invalid_argument"),
    ("agent too long", ["quota", "should-run", "--goal-id", "{G}", "--agent", "a" * 101], None, "invalid_argument"),
    ("unknown run finish", ["run", "finish", "--run-id", "r-0123456789ab", "--outcome", "ok"], None,
     "run_not_found"),
    ("reward out of range", ["reward", "add", "--goal-id", "{G}", "--run-id", "{R}", "--score", "2"], None,
     "invalid_argument"),
    ("reward nan", ["reward", "add", "--goal-id", "{G}", "--run-id", "{R}", "--score", "nan"], None,
     "invalid_argument"),
    ("bad action name", ["action", "add", "--goal-id", "{G}", "--name", "Bad Name", "--", "true"], None,
     "invalid_argument"),
    ("exec unknown action", ["exec", "--run-id", "{R}", "--action", "nope"], None, "action_not_allowed"),
    ("operation id reused", ["todo", "add", "--goal-id", "{G}", "--text", "different", "--operation-id", "op-1"],
     None, "operation_conflict"),
    ("operation id NUL", ["todo", "add", "--goal-id", "{G}", "--text", "x", "--operation-id", "a\x00"], None,
     "invalid_argument"),
    ("history unicode after", ["history", "--goal-id", "{G}", "--after", "\u00b2"], None, "invalid_argument"),
]


def _state(url: str) -> dict:
    """Every row of the ledger's and the goals' tables, read directly (no LoopX involved), through
    one connection: a PostgreSQL connection a table would cost more than the command tested."""
    tables = ["events", "operations", "goal_heads", *schema.GOAL_TABLES]
    if url.startswith("postgres"):
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
            found = {t: conn.execute(f"SELECT * FROM {t}").fetchall() for t in tables}
    else:
        import sqlite3

        conn = sqlite3.connect(url)
        conn.row_factory = sqlite3.Row
        try:
            found = {t: [dict(r) for r in conn.execute(f"SELECT * FROM {t}")] for t in tables}
        finally:
            conn.close()
    return {t: sorted(repr(sorted(r.items())) for r in found[t]) for t in tables}


@pytest.fixture
def world(loopx):
    g = make_goal(loopx, title="target")["goal"]
    t = loopx("todo", "add", "--goal-id", g, "--text", "first", "--json").json["id"]
    u = loopx("todo", "add", "--goal-id", g, "--text", "second", "--depends-on", t, "--json").json["id"]
    assert loopx("todo", "add", "--goal-id", g, "--text", "third", "--operation-id", "op-1").code == 0
    x = loopx("gate", "add", "--goal-id", g, "--title", "later", "--blocks", f"todo:{u}", "--json").json["id"]
    run = loopx("quota", "should-run", "--goal-id", g, "--agent", "a1", "--json").json
    assert run["decision"] == "run", run
    return {"G": g, "T": t, "U": u, "X": x, "R": run["interaction_contract"]["run_id"]}


def test_there_are_at_least_forty_cases():
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name,argv,env,code", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_and_changes_nothing(loopx, world, name, argv, env, code):
    before = _state(loopx.url)
    args = []
    for a in argv:
        for key, value in world.items():
            a = a.replace("{" + key + "}", value)
        args.append(a)
    r = loopx("--format", "json", *args, env=env)
    assert r.code == 2, (name, r)
    assert r.json["error"]["code"] == code, (name, r.json)
    assert "\n" not in r.json["error"]["message"]
    assert _state(loopx.url) == before, name
