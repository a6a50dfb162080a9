"""``loopx mcp``: LoopX as a Model Context Protocol server on stdio, acting as the executor.

An agent host (Claude Code, Codex, anything that speaks MCP) starts ``loopx mcp`` once and keeps
it: every tool call is a query on an open registry, not a Python start-up. The server acts as
``executor`` and offers only what an executor may do - ask should-run, read a goal, add / claim /
finish todos inside a run, record evidence, run an allowed action, finish the run, ask for a gate.
What only a user may do (decide gates, set budgets, score runs, create or close goals) is not
offered, and a call for it is refused with ``actor_forbidden``. Errors are tool results with
``isError`` and ``{"error": {"code", "message"}}``, the CLI's stable codes. Goals are resources:
``loopx://goals/{goal_id}``.

The tools are the operations of :mod:`loopx.operations`, each declared once with the CLI command
it is: their schemas, handlers and (inside a step) the argv sent to the turn's broker come from
there.

Built on the official ``mcp`` SDK (``pip install '.[mcp]'`` from the checkout); imported only by ``loopx mcp``.
"""

from __future__ import annotations

import contextlib
import json
import os

from loopx.operations import EXECUTOR as ACTOR
from loopx.operations import OPERATIONS, Operation, check_args

# Bounds on one JSON-RPC line from the client (docs/agents.md): a longer line is answered with
# -32600 and skipped; a message nesting deeper is answered with -32600 (tool arguments are held
# to jsonsafe's 64 levels by the tools themselves). Nothing a client sends goes unanswered.
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_MESSAGE_DEPTH = 100


def tool_name(command: str, sub: str | None = None) -> str:
    """The tool name of the ``loopx`` command ``command sub``: ``gate approve`` is ``gate_approve``,
    ``project-prompt close`` is ``goal_close`` (the tools call goals goals)."""
    words = ["goal" if command == "project-prompt" else command, *([sub] if sub else [])]
    return "_".join(words).replace("-", "_")


def refused_tools() -> set[str]:
    """The tool names refused with ``actor_forbidden``, never run: every command the broker refuses
    an executor (:data:`loopx.turn.broker.REFUSED`, the installed capabilities' ``user_commands``) by
    its tool name. One definition, so a command made the user's there is refused here too."""
    from loopx.turn.broker import REFUSED
    from loopx.seam.capabilities import user_commands

    return {tool_name(command, sub) for command, sub in REFUSED | user_commands()}


#: name -> (description, input schema) of every tool, derived from :data:`loopx.operations.OPERATIONS`.
TOOLS = {op.tool: (op.description, op.schema()) for op in OPERATIONS.values()}


class Tools:
    """The tool handlers on one open registry (sync: every call is one short transaction)."""

    def __init__(self, registry):
        self.reg = registry
        self._refused: set[str] | None = None

    def refused(self) -> set[str]:
        """:func:`refused_tools`, worked out once per server (the installed plugins do not change under it)."""
        if self._refused is None:
            self._refused = refused_tools()
        return self._refused

    def call(self, name: str, args: dict) -> dict:
        """Run tool ``name``; raises ``LoopxError`` with the CLI's codes."""
        from loopx.values.errors import LoopxError

        if name in self.refused():
            raise LoopxError("actor_forbidden", f"{name} is for users only; loopx mcp acts as the executor")
        if name not in TOOLS:
            raise LoopxError("invalid_argument", f"no tool {name!r} (tools: {', '.join(TOOLS)})")
        check_args(TOOLS[name][1], args)
        return self.run(OPERATIONS[name], args)

    def run(self, op: Operation, args: dict):
        """Do ``op`` with checked ``args``."""
        return op.run(self.reg, ACTOR, args)

    def goal_status(self, goal_id: str) -> dict:
        """A goal, as the resource ``loopx://goals/{goal_id}`` shows it (the ``goal_status`` tool)."""
        return self.run(OPERATIONS["goal_status"], {"goal_id": goal_id})


class BrokeredTools(Tools):
    """The same tools inside a confined step: each call goes to the turn's broker as the CLI
    command it stands for (:meth:`loopx.operations.Operation.encode`), so it acts as *this
    run's* executor (:mod:`loopx.turn.broker`)."""

    def __init__(self):
        super().__init__(None)

    def run(self, op: Operation, args: dict):
        if op.brokered is not None:
            return op.brokered(self._cli, **op.complete(args))
        return self._cli(op.encode(args))

    def _cli(self, argv: list) -> dict:
        from loopx.sandbox.broker_client import request
        from loopx.values.errors import LoopxError

        try:
            answer = request(["--format", "json", *[str(a) for a in argv]])
        except OSError as exc:
            raise LoopxError("broker_unavailable", f"cannot reach the step's broker: {exc}") from None
        try:
            out = json.loads(answer.get("stdout") or "null")
        except ValueError:
            out = None
        if isinstance(out, dict) and isinstance(out.get("error"), dict):
            code = out["error"].get("code") or "internal_error"
            raise LoopxError(code if code != "internal_error" else "invalid_argument", out["error"].get("message", ""))
        if answer.get("exit_code") not in (0, 1) or out is None:
            raise LoopxError("invalid_argument", (answer.get("stderr") or "the broker refused").strip()[-500:])
        return out

    def list_goals(self):
        return self._cli(["project-prompt", "list"])


def _brokered() -> bool:
    """Started inside a confined step (the turn's broker is in the environment)."""
    return bool(os.environ.get("LOOPX_BROKER"))


def serve(registry_url: str | None = None) -> None:
    """Serve MCP on stdin/stdout until the client disconnects."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    from loopx import __version__
    from loopx.values.errors import LoopxError
    from loopx.ledger.registry import Registry

    # Inside a step the registry is out of reach: every call goes through the turn's broker.
    reg = None if _brokered() else Registry.open(registry_url)
    tools = BrokeredTools() if reg is None else Tools(reg)

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[types.Tool(name=n, description=d, input_schema=s)
                                            for n, (d, s) in TOOLS.items() if n not in tools.refused()])

    async def call_tool(ctx, params):
        try:
            if params.name == "exec_step":
                # A step's command may run for minutes: run it on a worker thread with its own
                # connection (a connection belongs to one thread), so the other tools still answer.
                out = await anyio.to_thread.run_sync(_exec_step, registry_url, dict(params.arguments or {}))
            else:
                out = tools.call(params.name, dict(params.arguments or {}))
        except LoopxError as exc:
            err = {"error": {"code": exc.code, "message": str(exc)}}
            return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(err))],
                                        structured_content=err, is_error=True)
        # The answer is JSON text only: sending it again as structuredContent (which clients
        # validate) cost about 1.5 ms of the ~4 ms a should-run takes over MCP.
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(out, ensure_ascii=False))])

    async def list_resources(ctx, params):
        from loopx.domain import goals as goal_store

        goals = tools.list_goals()[:50] if reg is None else goal_store.list_goals(reg, limit=50)
        return types.ListResourcesResult(resources=[
            types.Resource(name=g["id"], title=g["title"], uri=f"loopx://goals/{g['id']}", mime_type="application/json")
            for g in goals])

    async def list_templates(ctx, params):
        return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate(
            name="goal", uri_template="loopx://goals/{goal_id}", mime_type="application/json",
            description="A goal: objective, criteria, lifecycle, gates, todos, quota.")])

    async def read_resource(ctx, params):
        uri = str(params.uri)
        prefix = "loopx://goals/"
        if not uri.startswith(prefix):
            raise ValueError(f"unknown resource {uri} [not_found]")
        try:
            out = tools.goal_status(goal_id=uri[len(prefix):])
        except LoopxError as exc:
            raise ValueError(f"{exc} [{exc.code}]") from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=uri, mime_type="application/json", text=json.dumps(out, ensure_ascii=False))])

    server = Server("loopx", version=__version__,
                    instructions="LoopX governs this agent's work. Call should_run before every turn and do "
                                 "only what its contract lists; finish the run with run_finish.",
                    on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
                    on_list_resource_templates=list_templates, on_read_resource=read_resource)

    async def main():
        transport = _pipe_streams() if os.name == "posix" else stdio_server()
        async with transport as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(main)
    finally:
        if reg is not None:
            reg.close()


def _exec_step(registry_url: str | None, args: dict) -> dict:
    """``exec_step`` on a connection of its own (called on a worker thread)."""
    from loopx.ledger.registry import Registry

    if _brokered():
        return BrokeredTools().call("exec_step", args)
    with Registry.open(registry_url) as reg:
        return Tools(reg).call("exec_step", args)


@contextlib.asynccontextmanager
async def _pipe_streams():
    """stdin/stdout as MCP message streams, read and written on the event loop itself.

    The SDK's ``stdio_server`` moves every read and write through a worker thread; on a busy
    machine those thread hand-offs were most of a should-run's round trip. Like the SDK, it keeps
    the wire to itself: fd 0 becomes /dev/null and fd 1 points at stderr while serving, so a child
    or a stray print cannot corrupt the protocol.
    """
    import asyncio

    import anyio
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    wire_in, wire_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                os.fdopen(wire_in, "rb", buffering=0))
    out = os.fdopen(wire_out, "wb", buffering=0)
    read_send, read_recv = anyio.create_memory_object_stream(0)
    write_send, write_recv = anyio.create_memory_object_stream(0)

    def write_line(data: bytes) -> None:
        # A reply is a few KB and the client is reading: a blocking write is immediate. No await
        # in here, so a reply and an error answer never interleave on the wire.
        view = memoryview(data)
        while view:
            view = view[out.write(view) or 0:]

    async def pump_in():
        async with read_send:
            async for line in _lines(reader):
                answer, message = _decode(line)
                if answer is not None:
                    if answer:
                        write_line(answer)
                    continue
                await read_send.send(SessionMessage(message))

    async def pump_out():
        async with write_recv:
            async for message in write_recv:
                write_line((message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode())

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pump_in)
            tg.start_soon(pump_out)
            yield read_recv, write_send
            tg.cancel_scope.cancel()
    finally:
        transport.close()
        out.close()


_TOO_LONG = b"\0too long"  # the marker _lines yields for a line over the bound (never a JSON line)


async def _lines(reader, limit: int | None = None):
    """The lines of ``reader`` without their newline; a line over ``limit`` bytes is skipped
    whole (read to its end and dropped) and yields :data:`_TOO_LONG` once in its place."""
    limit = limit or MAX_LINE_BYTES
    buf, skipping = bytearray(), False
    while chunk := await reader.read(1 << 20):
        start = 0
        while (nl := chunk.find(b"\n", start)) >= 0:
            if not skipping:
                buf += chunk[start:nl]
                yield _TOO_LONG if len(buf) > limit else bytes(buf)
            skipping = False
            buf.clear()
            start = nl + 1
        if not skipping:
            buf += chunk[start:]
            if len(buf) > limit:
                skipping = True
                buf.clear()
                yield _TOO_LONG
    if buf and not skipping:
        yield bytes(buf)


def _decode(line: bytes):
    """``(answer, None)`` for a line that is not a JSON-RPC message (the error line to send
    back, or ``b""`` for a blank line), else ``(None, message)``.

    JSON-RPC 2.0 names the answers: -32700 Parse error for text that is not JSON, -32600
    Invalid Request for JSON that is not a message (with the request's id when it has one).
    """
    import mcp_types as types

    if line is _TOO_LONG:
        return _rpc_error(None, -32600, f"Invalid Request: a message is at most {MAX_LINE_BYTES} bytes"), None
    if not line.strip():
        return b"", None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return _rpc_error(None, -32700, "Parse error: the line is not UTF-8"), None
    from loopx.values.jsonsafe import depth

    if depth(text, MAX_MESSAGE_DEPTH) > MAX_MESSAGE_DEPTH:
        return _rpc_error(_request_id(text), -32600,
                          f"Invalid Request: the message nests deeper than {MAX_MESSAGE_DEPTH} levels"), None
    try:
        return None, types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception:  # noqa: BLE001 - pydantic's ValidationError, or anything it raises on bad input
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return _rpc_error(None, -32700, "Parse error: the line is not valid JSON"), None
        return _rpc_error(_request_id(value), -32600, "Invalid Request: not a JSON-RPC 2.0 request, notification "
                          "or response (an object with jsonrpc \"2.0\", and method, result or error)"), None


def _request_id(value):
    """The id of a (possibly malformed) request, when it has a valid one; else None."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return None
    rid = value.get("id") if isinstance(value, dict) else None
    return rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


def _rpc_error(rid, code: int, message: str) -> bytes:
    return (json.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}) + "\n").encode()
