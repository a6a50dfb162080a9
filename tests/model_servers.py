"""Scripted model servers for the agent-CLI tests: stdlib HTTP on 127.0.0.1, one per API.

Each server answers every request from a script, not from a model: it reads the prompt LoopX
gave the agent (the first user message), takes the commands of its ```sh block, and asks the
agent to run the next one it has not run yet as a tool call (Claude Code: a ``Bash``
``tool_use``; Codex: the shell function its request offers). When every command has run it
answers with text and the turn ends. Every response reports known token counts, and every
request is logged (method, path, model, the usage reported, the body), so a test can assert both the
totals a CLI charged and that nothing but the expected paths was called.

Scripts: ``before`` commands are run first (e.g. a user-only ``loopx gate approve``), then the
prompt's commands; ``hang=True`` accepts requests and never answers; ``refuse="text"`` answers
every request with an HTTP 400 API error carrying that text. ``policy(results, tools)``
(Anthropic only) replaces the script: given the text of every tool result so far and the names
of the tools offered (and, if it takes a third parameter, the prompt), it returns the next
``(tool, input)`` to call - ``Bash``, or Claude Code's own ``Read``/``Edit``/``Write`` - or ``None``
to end the turn.
"""

from __future__ import annotations

import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_BLOCK = re.compile(r"```sh\n(.*?)\n```", re.S)


def prompt_commands(prompt: str) -> list[str]:
    """The commands of the first ```sh block of ``prompt``, one per line."""
    found = _BLOCK.search(prompt)
    return [line for line in found.group(1).splitlines() if line.strip()] if found else []


class _Server:
    """Shared part: thread, request log, script."""

    def __init__(self, *, before=(), hang=False, base_input=1000, base_output=50, policy=None, refuse=None):
        self.before, self.hang, self.policy, self.refuse = list(before), hang, policy, refuse
        # A policy with a third parameter is also given the prompt (the turn's contract, as text).
        import inspect

        self.policy_reads_prompt = policy is not None and len(inspect.signature(policy).parameters) >= 3
        self.base_input, self.base_output = base_input, base_output
        self.log: list[dict] = []
        self.prompts: list[str] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                owner._record(self, None)
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_HEAD = do_GET

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                entry = owner._record(self, body)
                if owner.hang:
                    # Never answer; hold the connection until the test stops the server.
                    owner.stopping.wait(120)
                    return
                if owner.refuse:
                    # An API error (both APIs share the shape closely enough for their CLIs).
                    _json(self, 400, {"type": "error", "error": {"type": "invalid_request_error",
                                                                 "message": owner.refuse, "code": "invalid_request"}})
                    return
                owner.answer(self, body, entry)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _record(self, handler, body) -> dict:
        entry = {"method": handler.command, "path": handler.path,
                 "model": (body or {}).get("model"), "stream": (body or {}).get("stream"), "usage": None,
                 "body": json.dumps(body) if body is not None else ""}
        with self.lock:
            self.log.append(entry)
        return entry

    def next_command(self, prompt: str, done: int) -> str | None:
        """The command to ask for after ``done`` tool results, or ``None`` when all have run."""
        with self.lock:
            self.prompts.append(prompt)
        script = self.before + prompt_commands(prompt)
        return script[done] if done < len(script) else None

    def usage_for(self, entry: dict) -> tuple[int, int]:
        with self.lock:
            n = sum(1 for e in self.log if e["usage"] is not None)
            used = (self.base_input + 7 * n, self.base_output + 3 * n)
            entry["usage"] = used
        return used

    def paths(self) -> set[str]:
        """Every distinct ``METHOD path`` requested."""
        with self.lock:
            return {f"{e['method']} {e['path']}" for e in self.log}

    def bodies(self) -> str:
        """Every request body received, as JSON text (what the CLI sent the model: system prompt,
        instructions, messages), to assert what reached the model and what did not."""
        with self.lock:
            return "\n".join(e["body"] for e in self.log)

    def tokens(self) -> int:
        """Input plus output tokens of every answer given."""
        with self.lock:
            return sum(sum(e["usage"]) for e in self.log if e["usage"])

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def _sse(handler, events: list[tuple[str, dict]]) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Connection", "close")
    handler.end_headers()
    for name, data in events:
        handler.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
    handler.wfile.flush()
    handler.close_connection = True


def _json(handler, status: int, data: dict) -> None:
    body = json.dumps(data).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _parts(content) -> list[str]:
    """The text parts of a message's content (the prompt is one of them; hosts add others)."""
    if isinstance(content, str):
        return [content]
    return [p["text"] for p in content or [] if isinstance(p, dict) and isinstance(p.get("text"), str)]


class AnthropicServer(_Server):
    """``POST /v1/messages`` with SSE streaming, as Claude Code calls it."""

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(self, handler, body, entry):
        if not handler.path.startswith("/v1/messages") or "count_tokens" in handler.path:
            _json(handler, 404, {"type": "error", "error": {"type": "not_found_error", "message": "no such path"}})
            return
        messages = body.get("messages") or []
        prompt = next((t for m in messages if m.get("role") == "user" for t in _parts(m.get("content"))
                       if "```sh" in t), "")
        done = sum(1 for m in messages if m.get("role") == "user" and isinstance(m.get("content"), list)
                   for part in m["content"] if isinstance(part, dict) and part.get("type") == "tool_result")
        tools = {t.get("name") for t in body.get("tools") or []}
        if self.policy is not None:
            # A scripted policy over the conversation so far: its tool results, the tools offered.
            results = [_parts(part.get("content")) for m in messages if m.get("role") == "user"
                       and isinstance(m.get("content"), list) for part in m["content"]
                       if isinstance(part, dict) and part.get("type") == "tool_result"]
            texts = ["\n".join(r) for r in results]
            call = self.policy(texts, tools, prompt) if self.policy_reads_prompt else self.policy(texts, tools)
        else:
            command = self.next_command(prompt, done) if "Bash" in tools else None
            call = ("Bash", {"command": command, "description": "contract step"}) if command is not None else None
        command = call
        n_in, n_out = self.usage_for(entry)
        if call is not None:
            block = {"type": "tool_use", "id": f"toolu_{len(self.log):04d}", "name": call[0], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(call[1])}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": "All steps of the contract ran."}
            stop = "end_turn"
        message = {"id": f"msg_{len(self.log):04d}", "type": "message", "role": "assistant",
                   "model": body.get("model") or "scripted", "content": [], "stop_reason": None,
                   "stop_sequence": None, "usage": {"input_tokens": n_in, "output_tokens": 1}}
        if not body.get("stream"):
            block_full = dict(block)
            if command is not None:
                block_full["input"] = command[1]
            else:
                block_full["text"] = delta["text"]
            _json(handler, 200, {**message, "content": [block_full], "stop_reason": stop,
                                 "usage": {"input_tokens": n_in, "output_tokens": n_out}})
            return
        _sse(handler, [
            ("message_start", {"type": "message_start", "message": message}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": n_out}}),
            ("message_stop", {"type": "message_stop"}),
        ])


class OpenAIServer(_Server):
    """``POST /v1/responses`` with SSE streaming, as Codex calls it through a custom provider."""

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def answer(self, handler, body, entry):
        if handler.path.split("?")[0] != "/v1/responses":
            _json(handler, 404, {"error": {"message": "no such path", "type": "invalid_request_error"}})
            return
        items = body.get("input") or []
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        prompt = next((t for item in items if item.get("role") == "user" for t in _parts(item.get("content"))
                       if "```sh" in t), "")
        done = sum(1 for item in items if item.get("type") in ("function_call_output", "custom_tool_call_output"))
        tool, args = _shell_tool(body.get("tools") or [])
        command = self.next_command(prompt, done) if tool else None
        n_in, n_out = self.usage_for(entry)
        rid = f"resp_{len(self.log):04d}"
        if command is not None:
            item = {"type": "function_call", "id": f"fc_{len(self.log):04d}", "call_id": f"call_{len(self.log):04d}",
                    "name": tool, "arguments": json.dumps(args(command)), "status": "completed"}
        else:
            item = {"type": "message", "id": f"msg_{len(self.log):04d}", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "All steps of the contract ran.", "annotations": []}]}
        usage = {"input_tokens": n_in, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": n_out,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": n_in + n_out}
        _sse(handler, [
            ("response.created", {"type": "response.created", "response": {"id": rid, "status": "in_progress"}}),
            ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
            ("response.completed", {"type": "response.completed",
                                    "response": {"id": rid, "status": "completed", "output": [item], "usage": usage}}),
        ])


def _shell_tool(tools: list[dict]):
    """The name of the function tool that runs a shell command, and how to build its arguments."""
    for tool in tools:
        name = tool.get("name") or (tool.get("function") or {}).get("name")
        props = ((tool.get("parameters") or (tool.get("function") or {}).get("parameters") or {})
                 .get("properties") or {})
        if name in ("exec_command", "shell", "shell_command", "local_shell") or "cmd" in props:
            if "cmd" in props:
                return name, lambda c: {"cmd": c}
            if (props.get("command") or {}).get("type") == "array":
                return name, lambda c: {"command": ["bash", "-lc", c]}
            return name, lambda c: {"command": c}
    return None, None


def agents_dir() -> Path:
    """Where the test script installs the agent CLIs (``LOOPX_TEST_AGENTS_DIR``, else its cache)."""
    if os.environ.get("LOOPX_TEST_AGENTS_DIR"):
        return Path(os.environ["LOOPX_TEST_AGENTS_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "loopx-test" / "agents" / "node_modules" / ".bin"


def cli_path(name: str) -> str:
    """The agent CLI ``name``'s path, or skip the test with the reason."""
    import pytest

    from tests.tiers import refuse_in_quick_tier

    refuse_in_quick_tier("agents", f"the real agent CLI {name}")
    path = agents_dir() / name
    if not os.access(path, os.X_OK):
        pytest.skip(f"{name} is not installed in {agents_dir()} (scripts/test.sh installs it with npm; "
                    f"or set LOOPX_TEST_AGENTS_DIR)")
    return str(path)
