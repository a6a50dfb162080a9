"""The CLI, the MCP server and the broker agree on every agent-facing operation (loopx/operations.py).

Each operation is declared once; these tests hold the three surfaces to it: the click command
takes each declared parameter under its declared option, the MCP tool lists exactly the declared
parameters and required set, the argv the broker is sent parses back (by the real CLI) to the
arguments the tool was given, the same calls give the same answers and the same error codes
on an open registry and through a real turn's broker, and what a tool requires the command
refuses to go without (or fills itself, as listed).
"""

from __future__ import annotations

import json
import sys

import click
import pytest

from loopx.turn import confine
from loopx.turn import governed as turns
from loopx.cli import cli, run_inprocess
from loopx.cli.ids import IdType
from loopx.values.errors import LoopxError
from loopx.mcp_server import TOOLS, BrokeredTools, Tools, refused_tools
from loopx.operations import OPERATIONS, Operation, check_args
from loopx.ledger.registry import Registry
from loopx.values.validate import check_id, new_id
from tests.test_turn_helpers import make_goal

PY = sys.executable


def _command(op: Operation) -> click.Command:
    ctx, cmd = click.Context(cli), cli
    for word in op.command:
        cmd = cmd.get_command(ctx, word)
        assert cmd is not None, f"{op.tool}: no command `loopx {' '.join(op.command)}`"
    return cmd


def _sample(op: Operation, leave_out: str | None = None) -> dict:
    """A value for every parameter (of a ``one_of`` pair, all but ``leave_out``'s partner)."""
    out = {}
    for p in op.params:
        s = p.schema
        if p.id_kind and s["type"] == "string":
            out[p.name] = new_id(p.id_kind)
        elif p.id_kind:
            out[p.name] = [new_id(p.id_kind), new_id(p.id_kind)]
        elif "enum" in s:
            out[p.name] = s["enum"][-1]
        elif s["type"] == "integer":
            out[p.name] = 7
        elif s["type"] == "number":
            out[p.name] = 2.5
        elif s["type"] == "object":
            out[p.name] = {"seen": ["a", 1], "ok": True}
        elif s["type"] == "array":
            out[p.name] = ["echo", "--not-an-option", "two words"]
        else:
            out[p.name] = "build.test" if "pattern" in s else "a value -- with spaces"
    for name in op.one_of:
        if name != leave_out:
            continue
        out.pop(next(n for n in op.one_of if n != name))
    return out


def _cases():
    for op in OPERATIONS.values():
        for keep in op.one_of or (None,):
            yield pytest.param(op, keep, id=f"{op.tool}-{keep}" if keep else op.tool)


def test_the_mcp_tools_are_the_declared_operations_and_none_is_the_users():
    assert set(TOOLS) == set(OPERATIONS)
    for name, (description, schema) in TOOLS.items():
        op = OPERATIONS[name]
        assert description == op.description and list(schema["properties"]) == [p.name for p in op.params]
        assert schema["required"] == [p.name for p in op.params if p.required]
        assert schema["additionalProperties"] is False
    # The actor rule: an executor may call every operation, so neither the broker nor the MCP
    # server refuses one (both read loopx.turn.broker's list of what is the user's).
    from loopx.turn.broker import refusal

    refused = refused_tools()
    for op in OPERATIONS.values():
        assert "executor" in op.actors and op.tool not in refused
        assert refusal(list(op.command)) is None, op.tool


def test_every_declared_parameter_is_an_option_of_the_cli_command():
    for op in OPERATIONS.values():
        params = {o: p for p in _command(op).params for o in (p.opts if isinstance(p, click.Option) else [p.name])}
        for p in op.params:
            found = params.get("argv" if p.form == "argv" else p.option)
            assert found is not None, f"{op.tool}: `loopx {' '.join(op.command)}` has no {p.option}"
            assert found.multiple == (p.form == "repeat") or p.form == "argv", (op.tool, p.name)
            if p.id_kind:
                assert isinstance(found.type, IdType) and found.type.kind == p.id_kind, (op.tool, p.name)
            if "enum" in p.schema:  # the CLI takes at least every value the tool does
                assert set(p.schema["enum"]) <= set(found.type.choices), (op.tool, p.name)
            if p.schema.get("type") in ("integer", "number"):
                assert found.type in (click.INT, click.FLOAT), (op.tool, p.name)


@pytest.mark.parametrize("op,keep", list(_cases()))
def test_what_the_broker_is_sent_parses_back_to_the_tools_arguments(op, keep):
    args = _sample(op, keep)
    check_args(op.schema(), args)  # the sample is a valid tool call
    argv = op.encode(args)
    assert argv[:len(op.command)] == list(op.command)
    cmd = _command(op)
    ctx = cmd.make_context(op.command[-1], argv[len(op.command):], parent=click.Context(cli))
    by_dest = {p.name: p for p in cmd.params}
    for p in op.params:
        dest = next(d for d, q in by_dest.items() if (p.option in q.opts if isinstance(q, click.Option)
                                                       else p.form == "argv" and q.nargs == -1))
        got, want = ctx.params[dest], args.get(p.name)
        if want is None:
            continue  # left out: the command's own default applies
        if p.form == "json":
            got = json.loads(got)
        elif p.form in ("repeat", "argv"):
            got = list(got)
        assert got == want, (op.tool, p.name, got, want)


def _call(tools, name, args):
    try:
        return tools.call(name, args), None
    except LoopxError as exc:
        return None, exc.code


def _script(g: str, r: str, todo: str):
    """(tool, args, what to compare) for one turn; a missing goal/todo/run and a bad value each."""
    ghost_goal, ghost_todo = "g-000000000000", "t-000000000000"
    return [
        ("goal_status", {"goal_id": g}, ("status", "title", "needs_you")),
        ("goal_status", {"goal_id": ghost_goal}, ()),
        ("todo_add", {"goal_id": g, "run_id": r, "text": "found on the way", "priority": "P1"},
         ("status", "priority", "text")),
        ("todo_add", {"goal_id": g, "run_id": r, "text": "x", "depends_on": [ghost_todo]}, ()),
        ("todo_claim", {"goal_id": g, "todo_id": todo, "run_id": r}, ("status",)),
        ("todo_claim", {"goal_id": g, "todo_id": ghost_todo, "run_id": r}, ()),
        ("evidence_add", {"run_id": r, "summary": "looked", "data": {"n": 1}}, ("kind", "summary", "data")),
        ("evidence_add", {"run_id": r, "summary": "looked", "kind": "Not-A-Kind"}, ()),
        ("exec_step", {"run_id": r, "action": "test"}, ("kind",)),
        ("exec_step", {"run_id": r, "action": "no-such-action"}, ()),
        ("exec_step", {"run_id": r, "action": "test", "argv": ["true"]}, ()),
        ("todo_done", {"goal_id": g, "todo_id": todo, "run_id": r, "note": "did it"}, ("status", "note")),
        ("todo_done", {"goal_id": g, "todo_id": ghost_todo, "run_id": r}, ()),
        ("gate_request", {"goal_id": g, "title": "Ship it?", "scope": "production"}, ("status", "scope", "title")),
        ("gate_request", {"goal_id": g, "title": "Ship it?", "blocks": "todo:nothing"}, ()),
        ("run_finish", {"run_id": r, "outcome": "great"}, ()),
        ("run_finish", {"run_id": r, "outcome": "partial", "tokens": 12, "handoff": "over to you"},
         ("status", "outcome", "tokens", "handoff")),
        ("todo_add", {"goal_id": g, "run_id": r, "text": "after the run"}, ()),
    ]


def _turn(url, tools_for) -> list:
    """Play :func:`_script` on a fresh goal; ``[(tool, answer's compared fields or None, error code)]``."""
    with Registry.open(url) as reg:
        made = make_goal(reg, acts={"test": [PY, "-c", "print('green')"]})
        g, todo = made["goal"], made["todos"][0]
        contract = Tools(reg).call("should_run", {"goal_id": g, "agent": "ops-bot"})
        assert contract["decision"] == "run"
        r = contract["interaction_contract"]["run_id"]
        out = []
        with tools_for(reg, g, r) as tools:
            for name, args, fields in _script(g, r, todo):
                answer, code = _call(tools, name, args)
                out.append((name, {f: answer[f] for f in fields} if answer is not None else None, code))
        return out


def test_every_operation_answers_alike_on_the_registry_and_through_a_turns_broker(sqlite_url, tmp_path,
                                                                                    monkeypatch):
    import contextlib

    @contextlib.contextmanager
    def direct(reg, g, r):
        yield Tools(reg)

    @contextlib.contextmanager
    def brokered(reg, g, r):
        workdir = tmp_path / "work"
        workdir.mkdir(exist_ok=True)
        with turns.step(reg, run_id=r, goal_id=g, agent="ops-bot", workdir=str(workdir),
                        backend=confine.check(False), run_cli=run_inprocess) as step:
            for key, value in step.broker_env.items():
                monkeypatch.setenv(key, value)
            yield BrokeredTools()
            assert step.broker.served > 0  # the calls really went through the broker

    here = _turn(sqlite_url, direct)
    there = _turn(sqlite_url, brokered)
    for mine, theirs in zip(here, there):
        assert theirs == mine
    assert len(here) == len(there)
    # And the script means something: successes and refusals both, each refusal with a stable code.
    assert sum(code is None for _, _, code in here) == 8
    codes = {code for _, _, code in here if code}
    assert {"goal_not_found", "invalid_argument"} <= codes


def test_a_malformed_id_is_refused_by_the_one_pattern_on_every_surface():
    """Ids are checked by one definition (loopx.values.validate): the tool schema, the domain check."""
    for op in OPERATIONS.values():
        for p in op.params:
            if p.id_kind and p.schema["type"] == "string":
                bad = _sample(op, op.one_of[0] if op.one_of else None)
                bad[p.name] = bad[p.name][:-1] + "G"
                with pytest.raises(LoopxError) as tool_err:
                    check_args(op.schema(), bad)
                with pytest.raises(LoopxError) as domain_err:
                    check_id(p.id_kind, bad[p.name])
                assert tool_err.value.code == domain_err.value.code == "invalid_argument"


#: Required of a tool call, optional on the command line because the CLI fills it itself: the run
#: from the step's environment (LOOPX_RUN_ID, which the broker sets to its own run), and a run's
#: outcome from its evidence. Everything else a tool requires, the command refuses to go without.
FILLED_BY_THE_CLI = {("run_finish", "outcome")}


def test_what_a_tool_requires_the_command_refuses_to_go_without_through_the_broker(sqlite_url, tmp_path,
                                                                                    monkeypatch):
    with Registry.open(sqlite_url) as reg:
        made = make_goal(reg, acts={"test": [PY, "-c", "print('green')"]})
        g, todo = made["goal"], made["todos"][0]
        r = Tools(reg).call("should_run", {"goal_id": g, "agent": "ops-bot"})["interaction_contract"]["run_id"]
        args = {"goal_id": g, "run_id": r, "todo_id": todo, "text": "t", "summary": "s", "title": "Ship?",
                "outcome": "ok", "action": "test"}
        workdir = tmp_path / "work"
        workdir.mkdir()
        tried = []
        with turns.step(reg, run_id=r, goal_id=g, agent="ops-bot", workdir=str(workdir),
                        backend=confine.check(False), run_cli=run_inprocess) as step:
            for key, value in step.broker_env.items():
                monkeypatch.setenv(key, value)
            tools = BrokeredTools()
            for op in OPERATIONS.values():
                for p in op.params:
                    if not p.required or (op.tool, p.name) in FILLED_BY_THE_CLI:
                        continue
                    if (p.cli or {}).get("envvar") == "LOOPX_RUN_ID":
                        assert step.broker.identity_env(None)["LOOPX_RUN_ID"] == r  # the broker's own run
                        continue
                    given = {q.name: args[q.name] for q in op.params if q.required and q.name != p.name}
                    given.update({n: args[n] for n in op.one_of[:1]})
                    with pytest.raises(LoopxError) as err:
                        tools._cli(op.encode(given))  # past the tool's schema, straight to the command
                    tried.append((op.tool, p.name, err.value.code))
        # A malformed command line is invalid_argument; an executor's call outside a run is run_not_open.
        assert all(code == ("run_not_open" if name == "run_id" else "invalid_argument")
                   for _, name, code in tried), tried
        assert len(tried) == 14 and {("todo_add", "run_id"), ("todo_add", "text"), ("gate_request", "title"),
                                     ("should_run", "goal_id")} <= {(t, n) for t, n, _ in tried}
