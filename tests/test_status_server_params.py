"""Every query parameter of the status server that fails to parse gets a 400 with a JSON error.

Real HTTP against a running server: each parameter of each endpoint (found in
``loopx/status_server/routes.py``, so a new one without a row here fails) is sent values that
look like numbers to ``str.isdigit()`` but are not ASCII digits (superscripts, circled digits,
Arabic-Indic, Devanagari and fullwidth digits), a NUL, numbers too large, negative, with
whitespace or a sign. Each answer is a 400 with ``{"error": {"code": "invalid_argument"}}`` -
never a dropped connection, never a 500 - and the same connection then serves the next request.
"""

from __future__ import annotations

import ast
import http.client
import json
from pathlib import Path
from urllib.parse import quote

import pytest

from loopx.ledger.registry import Registry
from tests.factories import make_goal
from tests.test_status_server import _start

ROUTES = Path(__file__).resolve().parent.parent / "loopx" / "status_server" / "routes.py"

#: Values that are not what the parameter takes, one of each kind of Unicode digit and more.
NOT_NUMBERS = [
    "²", "³", "¹²", "①", "⑫", "٣", "١٢", "۳", "३", "१२", "৩", "๓", "３", "１２", "𝟑", "\x00", "1\x00",
    "9" * 19, "1" + "0" * 40, "-1", "-0", "+5", " 5", "5 ", "\t5", "5\n", "5.0", "1e3", "0x10", "five", "∞",
]
CURSORS = ["a." + v for v in NOT_NUMBERS] + ["r." + v for v in NOT_NUMBERS] + [
    "a", "a.", ".5", "b.5", "a.5.5", "²", "\x00", "a.%", "r.-1"]
FLAGS = ["²", "①", "１", "maybe", "\x00", "TRUE ", "2"]

#: Every (endpoint, parameter) the server reads, and the bad values each is sent.
PARAMETERS = {
    ("/api/status", "limit"): NOT_NUMBERS + ["0"],
    ("/api/status", "cursor"): CURSORS,
    ("/api/status", "all"): FLAGS,
    ("/api/goals", "limit"): NOT_NUMBERS + ["0"],
    ("/api/goals", "cursor"): CURSORS,
    ("/api/goals", "all"): FLAGS,
    ("/api/goals/{goal}/events", "after"): NOT_NUMBERS,
    ("/api/goals/{goal}/events", "limit"): NOT_NUMBERS + ["0"],
}


def _read_in_routes() -> set[str]:
    """The query parameters routes.py reads: ``q.get("X")``, ``q["X"]``, ``_int(q, "X")``, ``_flag(q, "X")``."""
    names = set()
    for node in ast.walk(ast.parse(ROUTES.read_text())):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "get" and getattr(func.value, "id", "") == "q":
                first = node.args[0]
            elif isinstance(func, ast.Name) and len(node.args) > 1 and getattr(node.args[0], "id", "") == "q":
                first = node.args[1]
            else:
                continue
            if isinstance(first, ast.Constant):
                names.add(first.value)
        elif isinstance(node, ast.Subscript) and getattr(node.value, "id", "") == "q":
            if isinstance(node.slice, ast.Constant):
                names.add(node.slice.value)
    return names


def test_every_parameter_the_routes_read_is_fuzzed():
    read = _read_in_routes()
    assert {"limit", "cursor", "after"} <= read, read  # the scan still sees the routes' reads
    assert read == {name for _path, name in PARAMETERS}


@pytest.fixture
def server(registry_url):
    with Registry.open(registry_url) as reg:
        goal = make_goal(reg, title="served", todo_texts=("one",))["goal"]
    srv = _start(registry_url)
    yield srv, goal
    srv.shutdown_all()


def test_a_value_that_does_not_parse_is_a_400_with_a_json_error(server):
    srv, goal = server
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=30)
    try:
        for (path, name), values in PARAMETERS.items():
            for value in values:
                target = f"{path.format(goal=goal)}?{name}={quote(value, safe='')}"
                conn.request("GET", target, headers={"Host": f"127.0.0.1:{srv.server_address[1]}"})
                resp = conn.getresponse()  # a dropped connection raises here
                body = resp.read()
                assert resp.status == 400, (target, resp.status, body[:300])
                assert resp.getheader("Content-Type", "").startswith("application/json"), target
                assert json.loads(body)["error"]["code"] == "invalid_argument", (target, body)
                assert not resp.will_close, f"{target}: the connection was closed"
        # The same connection still answers a good request.
        conn.request("GET", "/api/status?limit=5&cursor=a.0&all=1",
                     headers={"Host": f"127.0.0.1:{srv.server_address[1]}"})
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["view"] == "overview"
    finally:
        conn.close()


def test_the_superscript_cursor_of_the_report(server):
    srv, _goal = server
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=30)
    try:
        conn.request("GET", "/api/status?cursor=a.%C2%B2", headers={"Host": f"127.0.0.1:{srv.server_address[1]}"})
        resp = conn.getresponse()
        assert resp.status == 400 and json.loads(resp.read())["error"]["code"] == "invalid_argument"
    finally:
        conn.close()
