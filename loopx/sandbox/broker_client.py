"""The ``loopx`` command inside a confined step: forward argv to the turn's broker, print its answer.

Inside a step the agent cannot open the registry (confinement hides and write-protects it), so
when ``LOOPX_BROKER`` names a socket the ``loopx`` CLI sends its argv and working directory
there (:mod:`loopx.turn.broker` runs the command as this run's executor) and prints what comes back,
exiting with the same status. Nothing of LoopX is imported: this path costs a socket round trip.
"""

from __future__ import annotations

import json
import os
import socket
import sys

ENV = "LOOPX_BROKER"
ENV_TOKEN = "LOOPX_BROKER_TOKEN"
#: The largest message either side accepts (a command line, or a command's output).
MAX_MESSAGE = 16 * 1024 * 1024


def send(sock, doc: dict) -> None:
    """One length-prefixed JSON message."""
    raw = json.dumps(doc).encode("utf-8")
    sock.sendall(len(raw).to_bytes(4, "big") + raw)


def receive(sock) -> dict | None:
    """One length-prefixed JSON message (``None`` when the peer closed)."""
    head = _exactly(sock, 4)
    if head is None:
        return None
    size = int.from_bytes(head, "big")
    if size > MAX_MESSAGE:
        raise ValueError(f"a message of {size} bytes is more than {MAX_MESSAGE}")
    raw = _exactly(sock, size)
    return None if raw is None else json.loads(raw.decode("utf-8"))


def _exactly(sock, n: int) -> bytes | None:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            return None
        out += chunk
    return bytes(out)


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the directory was removed under the step (a worktree cleaned up)
        return None


def request(argv: list[str]) -> dict:
    """Send ``argv`` to the broker; its answer ``{"exit_code", "stdout", "stderr"}`` (``OSError`` if unreachable)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(os.environ[ENV])
        send(sock, {"token": os.environ.get(ENV_TOKEN, ""), "argv": argv, "cwd": _cwd(),
                    "step_id": os.environ.get("LOOPX_STEP_ID")})
        answer = receive(sock)
    finally:
        sock.close()
    if answer is None:
        raise OSError("the step's broker closed the connection")
    return answer


def forward(argv: list[str]) -> int:
    """Send ``argv`` to the broker; print its output; return its exit status."""
    path = os.environ[ENV]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        send(sock, {"token": os.environ.get(ENV_TOKEN, ""), "argv": argv, "cwd": _cwd(),
                    "step_id": os.environ.get("LOOPX_STEP_ID")})
        answer = receive(sock)
    except OSError as exc:
        sys.stderr.write(f"loopx: error: cannot reach the step's broker at {path}: {exc} [broker_unavailable]\n")
        return 2
    finally:
        sock.close()
    if answer is None:
        sys.stderr.write("loopx: error: the step's broker closed the connection [broker_unavailable]\n")
        return 2
    sys.stdout.write(answer.get("stdout", ""))
    sys.stderr.write(answer.get("stderr", ""))
    sys.stdout.flush()
    return int(answer.get("exit_code", 1))


#: The ``loopx`` a step finds first on its PATH (:func:`write_client`): this module alone, run by
#: this interpreter without site-packages (``-IS``: a client has no use for them, and processing
#: them - an editable install's finders, every ``.pth`` - is most of a Python start-up). Anything
#: but a request to the broker execs the whole ``loopx`` (``loopx mcp``, or no broker at all).
CLIENT = """#!{python} -IS
import os, sys
sys.path.append({root!r})
if os.environ.get("LOOPX_BROKER") and sys.argv[1:2] != ["mcp"]:
    from loopx.sandbox.broker_client import forward
    sys.exit(forward(sys.argv[1:]))
from loopx.sandbox import selfrun
os.execv(sys.executable, selfrun.argv(sys.argv[1:]))
"""


def write_client(directory: str) -> str | None:
    """Write the step's ``loopx`` client (:data:`CLIENT`) into ``directory/bin``; that directory,
    or ``None`` where a ``#!`` line cannot name this interpreter (no path, spaces, too long)."""
    python = sys.executable
    if not python or " " in python or len(python) > 120 or not sys.platform.startswith("linux"):
        return None
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bindir = os.path.join(directory, "bin")
    os.mkdir(bindir, 0o755)
    path = os.path.join(bindir, "loopx")
    with open(path, "w", encoding="utf-8") as f:
        f.write(CLIENT.format(python=python, root=root))
    os.chmod(path, 0o755)
    return bindir
