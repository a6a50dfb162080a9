"""The broker: the only way a confined step reaches the registry, as this run's executor.

One :class:`Broker` per turn, owned by the executor's process (outside confinement). It listens
on a Unix socket in the step's private directory; the ``loopx`` CLI inside the step forwards
its argv there (:mod:`loopx.sandbox.broker_client`, chosen by ``LOOPX_BROKER`` and a per-turn token that
only the step's own processes hold). Each request runs as *this run's executor* on *this
turn's registry*, whatever the request or the step's environment says:

* user-only verbs (:data:`USER_ONLY`: gate approve/reject, reward add, quota set/grant, goal
  creation, closing, retrying, criteria, pause/resume, capabilities, allowed actions, settings,
  notify check)
  and LoopX's own administration (:data:`ADMINISTRATION`: turn, loop, worker, registry,
  plugins...) are refused with ``actor_forbidden`` before anything runs, and so is ``--unconfined``;
* every refusal (the broker's or the ledger's role check) is recorded as evidence on the run
  (kind ``refused``);
* the rest runs in LoopX's process, however many at once (an ``exec`` whose confined child itself
  calls ``loopx`` is served while the ``exec`` runs): each request in a thread of its own, with
  its own output and identity (:mod:`loopx.values.served`), never in the directory it names - the
  relative paths it gives are made absolute against that directory first. A broker without the
  in-process CLI (a turn started through the Python API without ``run_cli``) runs a ``loopx``
  child instead, started as every child of LoopX is (:mod:`loopx.sandbox.selfrun`: isolated interpreter,
  absolute entry point, LoopX's own directory and environment), with the same forced identity.
  Children of ``exec`` stay confined.
* a step of ``exec`` that is itself a ``loopx`` command (a capability's step) never starts a
  process: ``exec`` hands it to :meth:`Broker.run_step`, as the confined child would have.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading

from loopx.sandbox.broker_client import ENV, ENV_TOKEN, receive, send
from loopx.values.errors import LoopxError

#: (command, subcommand) whose every write the ledger refuses to the executor: the event kinds
#: only a user may write (``goal.created``, ``goal.closed``, ``goal.retried``, ``gate.approved``,
#: ``quota.set``, ``reward.added``, ``action.added``... see the writers of loopx/ledger/events/*.py) and
#: the settings only a user changes (loopx/domain/supervision.py). The ledger still refuses them; the
#: broker refuses them before anything runs, all with the same code.
USER_ONLY = {
    ("gate", "approve"), ("gate", "reject"), ("gate", "reopen"), ("reward", "add"), ("quota", "set"), ("quota", "grant"),
    ("project-prompt", "create"), ("project-prompt", "close"), ("project-prompt", "retry"),
    ("project-prompt", "criterion"), ("project-prompt", "pause"), ("project-prompt", "resume"),
    ("project-prompt", "capabilities"), ("action", "add"), ("action", "remove"),
    ("config", "set"), ("config", "unset"),
    # Runs the user's notification command (what the worker does): an agent must not be able to
    # page the user or run that command at will.
    ("notify", "check"),
    # Stops a worker (maybe the one running this turn): the user's, like the rest of `worker`.
    ("worker", "stop"),
    # Brings the agent's own change into the user's checkout, or throws the workspace away.
    ("workspace", "apply"), ("workspace", "discard"),
}
#: Commands the broker never runs at all: LoopX's own administration (turns of their own,
#: servers, the registry and the installed plugins).
ADMINISTRATION = {"turn", "loop", "worker", "demo", "status-server", "mcp", "registry", "plugins"}
#: Both, as (command, subcommand or None for all).
REFUSED = USER_ONLY | {(name, None) for name in ADMINISTRATION}
_GLOBAL_WITH_VALUE = ("--registry", "--format")


def split(argv: list[str]) -> tuple[list[str], list[str]]:
    """``(global options, the command and its arguments)``; ``--registry`` is dropped (the turn's is used)."""
    head, i = [], 0
    while i < len(argv) and argv[i].startswith("-"):
        a = argv[i]
        if a in _GLOBAL_WITH_VALUE and i + 1 < len(argv):
            if a != "--registry":
                head += [a, argv[i + 1]]
            i += 2
            continue
        if not a.startswith("--registry="):
            head.append(a)
        i += 1
    return head, argv[i:]


def refusal(command: list[str]) -> str | None:
    """Why the broker refuses ``command`` (the part after the global options), or ``None``."""
    if "--unconfined" in command:
        return "--unconfined is the user's choice, never a step's"
    if not command:
        return None
    # The seed's underscore spellings (`project_prompt`) are aliases of the hyphenated names.
    name = command[0].replace("_", "-")
    sub = _subcommand(command[1:])
    refused = REFUSED
    if not any(n == name for n, _ in REFUSED):
        # Perhaps a plugin's command: its capability says which of them are the user's.
        from loopx.seam.capabilities import user_commands

        try:
            refused = user_commands()
        except LoopxError as exc:  # fail closed: which commands are the user's is unknown
            return f"the installed capabilities' declarations do not load ({exc.message})"
    if (name, None) in refused or (name, sub) in refused:
        shown = f"{name} {sub}" if (name, sub) in refused else name
        return f"`loopx {shown}` is the user's, not an executor's"
    return None


def _subcommand(args: list[str]) -> str | None:
    """The first argument that is not an option, skipping the value of a group's ``--format``."""
    i = 0
    while i < len(args):
        if args[i] == "--format":
            i += 2
            continue
        if not args[i].startswith("-"):
            return args[i]
        i += 1
    return None


class Broker:
    """Serves one turn's ``loopx`` commands as its executor (see the module docstring)."""

    def __init__(self, *, registry_url: str, run_id: str, goal_id: str, agent: str, directory: str, step=None,
                 run_cli=None):
        """``run_cli(argv)``: the ``loopx`` CLI in this process (``loopx.cli.run_inprocess``); without
        it every request runs in a ``loopx`` child."""
        # Absolute: a served command never runs in the directory this turn was started in.
        url = registry_url if "://" in registry_url or registry_url == ":memory:" else os.path.abspath(registry_url)
        self.url, self.run_id, self.goal_id, self.agent, self.step = url, run_id, goal_id, agent, step
        self.run_cli = run_cli
        self.path = os.path.join(directory, "broker.sock")
        self.token = secrets.token_hex(16)
        self.served = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o600)
        self.sock.listen(16)
        self.thread = threading.Thread(target=self._accept, name="loopx-broker", daemon=True)
        self.thread.start()

    def env(self) -> dict:
        """What a confined child's environment gets to reach this broker."""
        return {ENV: self.path, ENV_TOKEN: self.token, "LOOPX_RUN_ID": self.run_id, "LOOPX_GOAL_ID": self.goal_id,
                "LOOPX_AGENT": self.agent}

    def close(self) -> None:
        """Stop listening (requests being served finish)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn) -> None:
        try:
            with conn:
                request = receive(conn)
                if not isinstance(request, dict) or not secrets.compare_digest(str(request.get("token")), self.token):
                    send(conn, {"exit_code": 2, "stdout": "", "stderr": "loopx: error: not this step's broker "
                                                                        "[broker_unavailable]\n"})
                    return
                argv = [str(a) for a in request.get("argv") or []]
                cwd = request.get("cwd") if isinstance(request.get("cwd"), str) else None
                step_id = request.get("step_id") if isinstance(request.get("step_id"), str) else None
                send(conn, self.dispatch(argv, cwd=cwd, step_id=step_id))
        except (OSError, ValueError):
            pass

    def dispatch(self, argv: list[str], *, cwd: str | None = None, step_id: str | None = None) -> dict:
        """Run ``loopx ARGV`` as this run's executor; ``{"exit_code", "stdout", "stderr"}``."""
        from loopx.sandbox import safe_open

        # The paths the request names are resolved once (:meth:`_outside`) and held while it runs:
        # the command opens those very directories (loopx.sandbox.safe_open.step_place), not the path again.
        with safe_open.holding():
            return self._dispatch(argv, cwd=cwd, step_id=step_id)

    def _dispatch(self, argv: list[str], *, cwd: str | None, step_id: str | None) -> dict:
        head, command = split(argv)
        why = refusal(command)
        if why is None:
            command, why = self._absolute(command, cwd)
        why = why or self._outside(command)
        if why is not None:
            self.record_refusal(argv, "actor_forbidden", why)
            err = {"code": "actor_forbidden", "message": f"refused inside run {self.run_id}: {why}; "
                                                         "the attempt is recorded on the run"}
            as_json = "json" in head or "--json" in head or "--json" in command
            if as_json:
                return {"exit_code": 2, "stdout": json.dumps({"error": err}) + "\n", "stderr": ""}
            return {"exit_code": 2, "stdout": "", "stderr": f"loopx: error: {err['message']} [{err['code']}]\n"}
        full = ["--registry", self.url, *head, *command]
        self.served += 1
        caller = cwd if cwd and os.path.isabs(cwd) and os.path.isdir(cwd) else None
        if self.run_cli is not None:
            out = self._inprocess(full, step_id=step_id, caller=caller)
        else:
            out = self._child(full, step_id=step_id, caller=caller)
        code = _error_code(out)
        if code in ("actor_forbidden", "invalid_actor"):
            self.record_refusal(argv, code, _error_message(out) or code)
        return out

    def run_step(self, argv: list[str], *, cwd: str | None, step_id: str) -> dict:
        """Run the step ``loopx ARGV`` of ``loopx exec`` as a request to this broker, without a process.

        What a confined ``loopx`` child of ``exec`` would have asked this broker (same checks,
        same identity, same step id), served directly: the request no longer needs a client
        process, a watcher and (while ``exec`` itself holds this process) a whole ``loopx`` child.
        Returns :func:`loopx.sandbox.process.run_command`'s result (stdout, then stderr, as its output).
        A LoopX command has no time-out of its own here: its own limits apply (an Issue-Fix test
        run's), and a turn's stop reaches the processes it starts.
        """
        import time

        from loopx.sandbox.process import result_of

        started = time.monotonic()
        out = self.dispatch(argv, cwd=cwd, step_id=step_id)
        output = (out.get("stdout") or "").encode("utf-8", errors="replace") + \
            (out.get("stderr") or "").encode("utf-8", errors="replace")
        return result_of(out["exit_code"], output, time.monotonic() - started)

    def _named(self, command: list[str]) -> list[tuple[str, str]]:
        """``[(option, path)]`` of the command's ``click.Path`` / ``click.File`` parameters, as the
        in-process CLI declares them; a broker without one reads :data:`FALLBACK_PATH_OPTIONS`."""
        return (getattr(self.run_cli, "path_options", None) or _fallback_path_options)(command)

    def _absolute(self, command: list[str], cwd: str | None) -> tuple[list[str], str | None]:
        """``(command with every relative path option made absolute against the request's
        directory, None)``, or ``(command, why it is refused)``. The command then runs in LoopX's
        own directory, never the step's, and reads exactly the path checked here."""
        base = cwd if cwd and os.path.isabs(cwd) else (self.step.workdir if self.step is not None else None)
        named = self._named(command)
        if not named:
            return command, None
        out = list(command)
        for option, path in named:
            full = os.path.expanduser(path)
            if os.path.isabs(full) and full == path:
                continue
            if base is None and not os.path.isabs(full):
                return command, f"{option} {path} is relative and the request names no directory"
            full = os.path.join(base or "/", full)
            for i, arg in enumerate(out):
                if arg == option and i + 1 < len(out) and out[i + 1] == path:
                    out[i + 1] = full
                elif arg == f"{option}={path}":
                    out[i] = f"{option}={full}"
        left = [f"{o} {p}" for o, p in self._named(out) if not os.path.isabs(p)]
        if left:  # spelled some way this broker does not rewrite: refused rather than guessed
            return command, f"{left[0]}: give this path as an absolute path or as {left[0].split()[0]} PATH"
        return out, None

    def _outside(self, command: list[str]) -> str | None:
        """Why a path the command names is refused: LoopX reads or writes it outside confinement, so
        it must be one the step could read and write itself (beneath its workdir or temp dir). The
        paths are the values of the command's ``click.Path`` / ``click.File`` parameters, as the
        in-process CLI declares them (:meth:`_named`), absolute by now (:meth:`_absolute`).

        The check is the open (:func:`loopx.sandbox.safe_open.place`): each path's directory is opened
        beneath one of the step's roots with no symbolic link followed, and held for the command
        (:data:`loopx.sandbox.safe_open.HELD`); nothing is resolved twice."""
        if self.step is None:
            return None
        from loopx.sandbox import safe_open

        held = safe_open.HELD.get()
        for option, path in self._named(command):
            try:
                found = safe_open.place(os.path.expanduser(path), roots=self.step.writable(),
                                        cwd=self.step.workdir)
            except LoopxError as exc:
                if exc.code != "actor_forbidden":
                    continue  # missing: the command, resolving it the same way, says so itself
                return f"{option} {exc.message}"
            if held is None or path in held:
                found.close()
            else:
                held[path] = found
        return None

    def identity_env(self, step_id: str | None) -> dict:
        """The environment a served command runs with (``None`` removes a variable)."""
        env: dict = {k: None for k in os.environ if k.startswith("LOOPX_")}
        env.update({"LOOPX_ACTOR": "executor", "LOOPX_RUN_ID": self.run_id, "LOOPX_GOAL_ID": self.goal_id,
                    "LOOPX_AGENT": self.agent, "LOOPX_REGISTRY": self.url})
        if step_id:
            env["LOOPX_STEP_ID"] = step_id
        return env

    def _inprocess(self, argv: list[str], *, step_id, caller) -> dict:
        """Serve ``argv`` in this thread with its own output and identity (:mod:`loopx.values.served`)."""
        from loopx.sandbox import process
        from loopx.ledger import registry
        from loopx.values import served

        tokens = [registry.IDENTITY.set({"run_id": self.run_id, "goal_id": self.goal_id, "agent": self.agent,
                                         "step_id": step_id}),
                  process.STEP.set(self.step), process.CALLER_DIR.set(caller)]
        code = 0
        try:
            with served.serving(self.identity_env(step_id)) as (out, err):
                try:
                    self.run_cli(argv)
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                except Exception as exc:  # a bug must reach the agent as an error, not kill the broker
                    err.write(f"loopx: error: {type(exc).__name__}: {exc} [internal_error]\n")
                    code = 1
        finally:
            process.CALLER_DIR.reset(tokens[2])
            process.STEP.reset(tokens[1])
            registry.IDENTITY.reset(tokens[0])
        return {"exit_code": code, "stdout": out.value(), "stderr": err.value()}

    def _child(self, argv: list[str], *, step_id, caller) -> dict:
        """Serve ``argv`` in a ``loopx`` child started as LoopX starts itself (:mod:`loopx.sandbox.selfrun`):
        never in the request's directory, never with anything of the step's environment."""
        import subprocess

        from loopx.values import clock
        from loopx.sandbox import process, selfrun

        changes = self.identity_env(step_id)
        if self.step is not None:
            changes["LOOPX_STEP"] = self.step.describe()  # exec's children stay confined
            changes[process.ENV_CALLER_DIR] = caller  # ... and run where the step asked
        if clock.offset_file():  # the broker's own clock (a test harness's), never the request's
            changes[clock.OFFSET_ENV] = clock.offset_file()
        spawn = selfrun.command(argv, changes)
        p = subprocess.run(spawn["args"], env=spawn["env"], cwd=spawn["cwd"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True)
        return {"exit_code": p.returncode, "stdout": p.stdout, "stderr": p.stderr}

    def record_refusal(self, argv: list[str], code: str, why: str) -> None:
        """Evidence on the run that the step tried something only the user may do."""
        import shlex

        from loopx.domain import evidence
        from loopx.values.errors import LoopxError
        from loopx.ledger.registry import Registry

        try:
            with Registry.open(self.url) as reg:
                evidence.record(reg, "core", run_id=self.run_id, kind="refused",
                                summary=f"refused: loopx {shlex.join(argv)}"[:500],
                                data={"argv": argv[:64], "code": code, "why": why[:500], "by": "broker"})
        except LoopxError:
            pass  # the run may be closed already; the refusal itself still stands


#: The path options a broker checks when no in-process CLI tells it a command's (a turn started
#: through the Python API without ``run_cli``; every ``loopx`` command gives one).
FALLBACK_PATH_OPTIONS = ("--file", "--output")


def _fallback_path_options(command: list[str]) -> list[tuple[str, str]]:
    found = []
    for i, arg in enumerate(command):
        for option in FALLBACK_PATH_OPTIONS:
            if arg == option and i + 1 < len(command):
                found.append((option, command[i + 1]))
            elif arg.startswith(option + "="):
                found.append((option, arg.split("=", 1)[1]))
    return found


def _error(out: dict) -> dict | None:
    text = out.get("stdout") or ""
    try:
        doc = json.loads(text)
        if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
            return doc["error"]
    except ValueError:
        pass
    import re

    found = re.search(r"loopx: error: (.*) \[([a-z_.]+)\]\s*$", out.get("stderr") or "")
    return {"message": found.group(1), "code": found.group(2)} if found else None


def _error_code(out: dict) -> str | None:
    if out.get("exit_code") == 0:
        return None
    err = _error(out)
    return err.get("code") if err else None


def _error_message(out: dict) -> str | None:
    err = _error(out)
    return err.get("message") if err else None
