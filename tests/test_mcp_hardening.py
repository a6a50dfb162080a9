"""``loopx mcp`` answers every line a client sends: the JSON-RPC error the spec names, bounded
line size and depth, and it keeps serving. Fuzzed over the whole tool surface with hypothesis
through the official SDK's client and a real stdio process."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import select
import subprocess
import sys

import pytest

# Found, not imported: importing the SDK costs 1.4 s of CPU in every worker that collects this
# file; the tests that use it import it.
if importlib.util.find_spec("mcp") is None:
    pytest.skip("the mcp SDK is not installed (pip install '.[mcp]')", allow_module_level=True)

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from loopx.views.should_run import should_run  # noqa: E402
from loopx.values.errors import CODES  # noqa: E402
from loopx.mcp_server import MAX_LINE_BYTES, TOOLS  # noqa: E402
from loopx.ledger.registry import Registry  # noqa: E402
from tests.test_turn_helpers import make_goal  # noqa: E402

PY = sys.executable


def _env(url, home=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env["LOOPX_REGISTRY"] = url
    if home is not None:  # user directories of its own, not one test's
        env.update(XDG_CONFIG_HOME=str(home / "config"), XDG_DATA_HOME=str(home / "data"))
    return env


class Wire:
    """``loopx mcp`` as a real process, spoken to one raw line at a time."""

    def __init__(self, url, home=None):
        self.p = subprocess.Popen([PY, "-m", "loopx", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, env=_env(url, home), bufsize=0)
        # Unbuffered: select() on the pipe must see every line not yet read (a buffered reader
        # could hold a second answer where select cannot see it).
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        # The first answer waits for the server's start-up (the MCP SDK's import: seconds on a
        # loaded machine), so a longer deadline than an answer's.
        assert self.ask(json.dumps(init).encode(), timeout=120)["id"] == 0
        self.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

    def send(self, line: bytes):
        self.p.stdin.write(line + b"\n")
        self.p.stdin.flush()

    def ask(self, line: bytes, timeout=20) -> dict:
        self.send(line)
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        assert ready, f"no answer to {line[:80]!r}"
        return json.loads(self.p.stdout.readline())

    def alive(self) -> bool:
        listed = self.ask(b'{"jsonrpc":"2.0","id":"ping","method":"tools/list"}')
        return listed["id"] == "ping" and {t["name"] for t in listed["result"]["tools"]} == set(TOOLS)

    def close(self):
        self.p.stdin.close()
        assert self.p.wait(20) == 0


@pytest.fixture(scope="module")
def _server(tmp_path_factory):
    """One ``loopx mcp`` process for the module's line-by-line tests (starting one costs about 2 s
    of CPU: the MCP SDK's import), on a registry and user directories of its own."""
    home = tmp_path_factory.mktemp("mcp-wire")
    box = [Wire(str(home / "registry.db"), home=home)]
    yield box, home
    box[0].close()  # it still exits 0 after every line the tests sent


@pytest.fixture
def wire(_server):
    """The module's server, each test's lines sent after the previous test's. Each test still
    checks its own line's answer and that the server serves after it (``alive``); a server a
    previous test's line killed is replaced (that test failed), so one crash fails one test."""
    box, home = _server
    if box[0].p.poll() is not None:
        box[0] = Wire(str(home / "registry.db"), home=home)
    return box[0]


def _call(rid, name, arguments):
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}}).encode()


@pytest.mark.parametrize("line", [b'{"jsonrpc":"2.0","id":2,"meth', b"not json", b"{", b'{"a":1,}', b"\xff\xfe{}"])
def test_a_malformed_or_truncated_line_is_answered_with_parse_error_and_the_server_keeps_serving(wire, line):
    answer = wire.ask(line)
    assert answer["id"] is None and answer["error"]["code"] == -32700
    assert wire.alive()


@pytest.mark.parametrize("line,rid", [(b"[1, 2]", None), (b'{"foo": 1}', None), (b'{"jsonrpc": "2.0", "id": 3}', 3),
                                      (b'"hello"', None), (b'{"jsonrpc": "1.0", "id": "x", "method": "tools/list"}', "x"),
                                      (b'{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": 5}', 8)])
def test_json_that_is_not_a_jsonrpc_message_is_answered_with_invalid_request(wire, line, rid):
    answer = wire.ask(line)
    assert answer["error"]["code"] == -32600 and answer["id"] == rid
    assert wire.alive()


def test_arguments_nested_250_deep_are_answered_not_ignored(wire):
    deep = _call(5, "evidence_add", {"run_id": "r-000000000000", "summary": "x", "data": {}})
    deep = deep.replace(b'"data": {}', b'"data": ' + b"[" * 250 + b"]" * 250)
    answer = wire.ask(deep)
    assert answer["id"] == 5 and answer["error"]["code"] == -32600 and "deeper" in answer["error"]["message"]
    # Far deeper than Python's recursion limit: still an answer.
    answer = wire.ask(b'{"jsonrpc":"2.0","id":6,"params":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert answer["error"]["code"] == -32600
    assert wire.alive()


def test_a_line_over_the_bound_is_refused_whole_and_the_next_line_is_served(wire):
    huge = _call(7, "evidence_add", {"run_id": "r-000000000000", "summary": "x" * (MAX_LINE_BYTES + 10)})
    answer = wire.ask(huge, timeout=60)
    assert answer["error"]["code"] == -32600 and str(MAX_LINE_BYTES) in answer["error"]["message"]
    # The rest of the long line was skipped, not read as a new message: the next answer is the ping's.
    assert wire.alive()
    just_under = _call(8, "goal_status", {"goal_id": "g-000000000000", "pad": "y" * (1 << 20)})
    assert wire.ask(just_under)["id"] == 8


# --- fuzzing the tool surface through the official client ------------------------------------

_scalars = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) \
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40)
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=12)


_BY_TYPE = {"string": st.text(min_size=1, max_size=30), "integer": st.integers(0, 10**6),
            "number": st.floats(0.001, 1000), "object": st.dictionaries(st.text(max_size=8), _json, max_size=3),
            "array": st.lists(st.text(max_size=8), min_size=1, max_size=3), "boolean": st.booleans()}


def _arguments(ids):
    """A tool and its arguments: mostly well-formed (real ids, the schema's types), sometimes any
    JSON in any key, sometimes keys of its own; and the user-only and unknown tool names."""
    def value(key, spec):
        good = st.sampled_from(spec["enum"]) if "enum" in spec else \
            st.sampled_from(ids[key]) if key in ids else _BY_TYPE[spec["type"]]
        return st.one_of(good, good, good, _json)

    def for_tool(name):
        schema = TOOLS[name][1]
        props, required = schema["properties"], schema.get("required", [])
        return st.fixed_dictionaries({k: value(k, props[k]) for k in required},
                                     optional={k: value(k, props[k]) for k in props if k not in required}) \
            .flatmap(lambda d: st.dictionaries(st.text(max_size=10), _json, max_size=1).map(lambda extra: {**extra, **d}))
    names = st.sampled_from(sorted(TOOLS) + ["gate_approve", "no_such_tool"])
    return names.flatmap(lambda n: st.tuples(st.just(n), for_tool(n) if n in TOOLS else _json))


@pytest.mark.slow  # a hundred tool calls through the SDK's client: seconds of CPU
def test_fuzzing_every_tool_through_a_real_client_gets_an_answer_with_a_stable_code(sqlite_url):
    from anyio.from_thread import start_blocking_portal
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    reg = Registry.open(sqlite_url)
    made = make_goal(reg, acts={"test": [PY, "-c", "print('ok')"]}, parallel=True)
    run = should_run(reg, "executor", goal_id=made["goal"])["interaction_contract"]["run_id"]
    reg.close()
    ids = {"goal_id": [made["goal"], "g-000000000000"], "todo_id": made["todos"], "run_id": [run, "r-000000000000"],
           "action": ["test"], "outcome": ["ok", "failed"], "summary": ["seen"], "title": ["Ship?"]}
    params = StdioServerParameters(command=PY, args=["-m", "loopx", "mcp"], env=_env(sqlite_url))
    seen = set()
    with start_blocking_portal() as portal, open(os.devnull, "w") as errlog, contextlib.ExitStack() as stack:
        read, write = stack.enter_context(portal.wrap_async_context_manager(stdio_client(params, errlog=errlog)))
        session = stack.enter_context(portal.wrap_async_context_manager(ClientSession(read, write)))
        portal.call(session.initialize)

        @settings(max_examples=100, deadline=None, database=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
        @given(_arguments(ids))
        def one_call(call):
            name, args = call
            result = portal.call(session.call_tool, name, args if isinstance(args, dict) else {"x": args})
            body = json.loads(result.content[0].text)
            if result.is_error:
                assert body["error"]["code"] in CODES, body
                seen.add(body["error"]["code"])
            else:
                assert isinstance(body, dict) and "error" not in body
                seen.add("ok:" + name)

        one_call()
        tools = portal.call(session.list_tools).tools
        assert {t.name for t in tools} == set(TOOLS)
    # The fuzz reached past the schema check, into the tools themselves.
    assert {"invalid_argument", "actor_forbidden", "goal_not_found", "ok:should_run"} <= seen, seen


_VALID = _call(1, "goal_status", {"goal_id": "g-000000000000"})
_lines = st.one_of(
    st.binary(max_size=200),                                              # anything at all
    _json.map(lambda v: json.dumps(v).encode()),                          # any JSON
    st.integers(0, len(_VALID) - 1).map(lambda n: _VALID[:n]),            # a request cut short
    st.tuples(st.integers(0, len(_VALID) - 1), st.binary(min_size=1, max_size=3))
      .map(lambda t: _VALID[:t[0]] + t[1] + _VALID[t[0] + 1:]),           # a request with bytes changed
).map(lambda b: b.replace(b"\n", b" "))


@pytest.mark.slow
def test_fuzzed_lines_each_get_an_answer_or_are_messages_and_the_server_lives(sqlite_url):
    """The oracle: a line the SDK's own validator rejects gets its error answer at once (before
    the ping that follows it); a line it accepts is a message the SDK serves (a request's answer
    may come after the ping). Every answer is well-formed, and the ping is always answered."""
    import itertools

    import mcp_types as types

    w = Wire(sqlite_url)
    pings = itertools.count()
    try:
        @settings(max_examples=60, deadline=None, database=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow])
        @given(_lines)
        def one_line(line):
            ping = f"ping-{next(pings)}"
            w.send(line)
            w.send(json.dumps({"jsonrpc": "2.0", "id": ping, "method": "ping"}).encode())
            at_once = []
            while True:
                ready, _, _ = select.select([w.p.stdout], [], [], 20)
                assert ready, f"no answer to the ping after {line[:80]!r}"
                answer = json.loads(w.p.stdout.readline())
                assert answer.get("jsonrpc") == "2.0" and ("result" in answer or "error" in answer), answer
                if answer.get("id") == ping:
                    break
                if answer.get("error", {}).get("code") in (-32700, -32600):
                    at_once.append(answer)
            try:
                types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                accepted = bool(line.strip())
            except Exception:  # noqa: BLE001 - rejected by the SDK's validator
                accepted = False
            if accepted or not line.strip():
                assert at_once == [], (line, at_once)
            else:
                assert len(at_once) == 1, (line, at_once)

        one_line()
        assert w.alive()
    finally:
        w.close()
