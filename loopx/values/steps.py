"""Contract steps: what a turn consists of, as argv lists, and what the evidence says about them.

A ``run`` contract lists its work as ``cli_channel.steps``: each step has an ``id``, a ``kind``
(``claim`` takes the work, ``do`` does it, ``record`` records what happened, ``finish`` closes
the run), an ``argv`` (a list: no shell is involved) and ``after`` (the steps it follows).
``next_cli_actions`` is generated from the steps (:func:`lines`), never the other way round.

Every ``do`` step of a run is a ``loopx exec`` of an allowed action or of a capability's
command, so each one records its own evidence (kind ``command``, written by the core, naming
the step). :func:`results_from` judges that evidence (:func:`loopx.domain.runs.results` reads it);
``run finish`` derives its outcome from it (:func:`derive`), ``todo done`` refuses to close a todo
over a failed step, and :func:`loopx.domain.runs.repeated_failure` notices the same step failing run after
run. This module reads no database (it is below the store): its callers hand it the rows.

Capability contributions are checked here, once, when they are contributed
(:func:`check_argv`, :func:`contributed`): a ``loopx`` program, no shell operators, no control
characters, bounded size. A malformed one is dropped and reported with its plugin's name.
"""

from __future__ import annotations

import json
import shlex

KINDS = ("claim", "do", "record", "finish")
MAX_ARGS = 64
MAX_BYTES = 2048
DEFAULT_STUCK_AFTER = 3
TAIL_SHOWN = 600
# Characters a shell would act on; a contributed argument holding one is refused, even though
# the shell-quoted line would keep it inert, because no honest loopx argument needs them.
_SHELL_CHARS = set(";&|<>`")
_SHELL_SEQS = ("$(", "${")


def step(step_id: str, kind: str, argv: list[str], after: list[str]) -> dict:
    """One step (``after``: ids of the steps it follows)."""
    return {"id": step_id, "kind": kind, "argv": [str(a) for a in argv], "after": after}


def chain(items: list[tuple[str, str, list]]) -> list[dict]:
    """Steps from ``(id, kind, argv)`` triples, each after the one before it; ids made unique."""
    out, seen = [], set()
    for step_id, kind, argv in items:
        base, n = step_id, 2
        while step_id in seen:
            step_id, n = f"{base}#{n}", n + 1
        seen.add(step_id)
        out.append(step(step_id, kind, argv, [out[-1]["id"]] if out else []))
    return out


def lines(steps: list[dict]) -> list[str]:
    """``next_cli_actions``: each step's argv as one shell-quoted line, in order."""
    return [shlex.join(s["argv"]) for s in steps]


def of(doc: dict | None) -> list[dict]:
    """The steps of a contract document (none for a contract issued before steps existed)."""
    if not doc:
        return []
    return list((doc.get("cli_channel") or {}).get("steps") or [])


# --- what a contributed action may be ------------------------------------------------------------


def check_argv(argv) -> str | None:
    """``None`` when ``argv`` is an acceptable contributed ``loopx`` command; else why not."""
    if isinstance(argv, str):
        return "argv is a string, not a list of arguments"
    if not isinstance(argv, (list, tuple)) or not argv:
        return "argv must be a non-empty list of strings"
    if len(argv) > MAX_ARGS:
        return f"argv has {len(argv)} arguments; at most {MAX_ARGS}"
    size = 0
    for arg in argv:
        if not isinstance(arg, str):
            return f"argv holds a {type(arg).__name__}, not a string"
        if any(ord(c) < 32 or 127 <= ord(c) < 160 or c in "\u2028\u2029" for c in arg):
            return f"argument {arg[:40]!r} holds a control character"
        if any(c in _SHELL_CHARS for c in arg) or any(s in arg for s in _SHELL_SEQS):
            return f"argument {arg[:40]!r} holds a shell operator"
        size += len(arg.encode("utf-8", errors="replace"))
    if argv[0] != "loopx":
        return f"the program must be loopx, not {argv[0][:40]!r}"
    if len(argv) < 2:
        return "a loopx command needs a subcommand"
    if size > MAX_BYTES:
        return f"argv is {size} bytes; at most {MAX_BYTES}"
    return None


def parse_command(text) -> tuple[list[str] | None, str | None]:
    """``(argv, None)`` from a contributed command *string* (the older form), or ``(None, why)``.

    The string is split once, here, with shell punctuation kept as separate tokens, so
    ``loopx x; touch /tmp/y`` is refused rather than passed on to a harness that evals it.
    """
    if not isinstance(text, str):
        return None, f"command must be text, not {type(text).__name__}"
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return None, "command holds a control character"
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError as exc:
        return None, f"command does not parse: {exc}"
    if any(t and set(t) <= set("();<>|&") for t in tokens):
        return None, "command holds a shell operator"
    why = check_argv(tokens)
    return (None, why) if why else (tokens, None)


def contributed(items, plugin: str) -> tuple[list[dict], list[str]]:
    """Check one plugin's ``loopx_contract_actions`` answer: ``(good items, problems)``.

    A good item is a dict with ``argv`` (a list; a ``command`` string is accepted and split
    once), optional short texts ``note``, ``capability`` and ``action``, and an optional
    ``workdir`` (an absolute path: the directory the agent works in for this step).
    """
    if items is None:
        return [], []
    if not isinstance(items, (list, tuple)):
        return [], [f"plugin {plugin}: its actions must be a list, not {type(items).__name__}; dropped"]
    good, problems = [], []
    for item in items:
        if not isinstance(item, dict):
            problems.append(f"plugin {plugin}: dropped an action ({str(item)[:40]!r} is a {type(item).__name__}, "
                            "not a dict)")
            continue
        if "argv" in item:
            argv, why = item["argv"], check_argv(item["argv"])
        else:
            argv, why = parse_command(item.get("command"))
        for key, limit in (("note", 1000), ("capability", 100), ("action", 100), ("workdir", 4096)):
            value = item.get(key)
            if value is not None and (not isinstance(value, str) or len(value) > limit):
                why = why or f"{key} must be text of at most {limit} characters"
        workdir = item.get("workdir")
        if isinstance(workdir, str) and (not workdir.startswith("/") or any(ord(c) < 32 or ord(c) == 127
                                                                          for c in workdir)):
            why = why or "workdir must be an absolute path without control characters"
        if why:
            problems.append(f"plugin {plugin}: dropped an action ({why})")
            continue
        good.append({"argv": list(argv), "note": item.get("note"), "capability": item.get("capability"),
                     "action": item.get("action"), "workdir": workdir, "plugin": plugin})
    return good, problems


def veto_actions(actions, plugin: str) -> tuple[list[list[str]], list[str]]:
    """Check a veto's ``actions``: a list of argv lists (or command strings). ``(argvs, problems)``."""
    if actions is None:
        return [], []
    if not isinstance(actions, (list, tuple)):
        return [], [f"plugin {plugin}: veto actions must be a list, not {type(actions).__name__}; dropped"]
    good, problems = [], []
    for action in actions:
        if isinstance(action, str):
            argv, why = parse_command(action)
        else:
            argv, why = action, check_argv(action)
        if why:
            problems.append(f"plugin {plugin}: dropped a repair action ({why})")
        else:
            good.append(list(argv))
    return good, problems


# --- what a do step is, and what its evidence says -------------------------------------------------


def exec_target(s: dict) -> tuple[str, object] | None:
    """What a ``do`` step runs: ``("action", NAME)``, ``("argv", [...])``, or ``None``."""
    argv = s.get("argv") or []
    if s.get("kind") != "do" or argv[:2] != ["loopx", "exec"]:
        return None
    if "--" in argv:
        return "argv", argv[argv.index("--") + 1:]
    if "--action" in argv[:-1]:
        return "action", argv[argv.index("--action") + 1]
    return None


def command_step(doc: dict | None, argv: list[str]) -> str | None:
    """The id of the ``do`` step that runs capability command ``argv``, or ``None``.

    ``argv`` may add options after the step's own (``--root-cause TEXT``): they go to the
    capability's command, which checks them; the program and subcommand are the step's.
    """
    for s in of(doc):
        target = exec_target(s)
        if target and target[0] == "argv" and len(target[1]) >= 2 and argv[: len(target[1])] == target[1]:
            return s["id"]
    return None


def results_from(rows: list[dict], do: list[dict]) -> list[dict]:
    """Each of the ``do`` steps with its latest result in ``rows`` (the core's step evidence of the
    run, oldest first: ``id, data``; :func:`loopx.domain.runs.results` reads them).

    ``{"step", "status": ok|failed|not_run, "evidence_id", "exit_code", "output_tail"}``. Only
    evidence ``loopx exec`` wrote (kind ``command``, actor ``core``) counts: an agent cannot
    record a step as passed by writing a note.
    """
    latest: dict[str, tuple[str, dict]] = {}
    for row in rows:
        data = json.loads(row["data"]) if row["data"] else {}
        if data.get("step"):
            latest[data["step"]] = (row["id"], data)
    out = []
    for s in do:
        found = latest.get(s["id"])
        if found is None:
            out.append({"step": s["id"], "status": "not_run", "evidence_id": None, "exit_code": None,
                        "output_tail": None})
            continue
        ev_id, data = found
        if data.get("result") == "unknown":  # its process died with its owner (loopx.domain.claims)
            out.append({"step": s["id"], "status": "unknown", "evidence_id": ev_id, "exit_code": None,
                        "output_tail": None})
            continue
        # A step that hit one of its limits (loopx/sandbox/limits.py) failed, whatever its exit code.
        ok = data.get("exit_code") == 0 and not data.get("timed_out") and not data.get("limit_hit")
        out.append({"step": s["id"], "status": "ok" if ok else "failed", "evidence_id": ev_id,
                    "exit_code": data.get("exit_code"), "timed_out": bool(data.get("timed_out")),
                    "output_tail": data.get("output_tail")})
        if data.get("limit_hit"):
            out[-1]["limit_hit"] = data["limit_hit"]
    return out


#: The ``do`` steps of contract documents parsed before, by their stored text (read-only here):
#: ``todo done`` and ``run finish`` both check the steps of the same few-KB contract every turn.
_DO_STEPS: dict[str, list[dict]] = {}


def do_steps_of(text: str) -> list[dict]:
    """The ``do`` steps of a contract document, given as its stored JSON text."""
    found = _DO_STEPS.get(text)
    if found is None:
        if len(_DO_STEPS) >= 32:
            _DO_STEPS.clear()
        found = _DO_STEPS[text] = [s for s in of(json.loads(text)) if s.get("kind") == "do"]
    return found


def refusal_lines(rows: list[dict]) -> list[str]:
    """What the broker refused during a run (``rows``: the data of the ``refused`` evidence the core
    wrote, oldest first), one line each: ``tried `loopx gate approve …`: `loopx gate approve` is the
    user's, not an executor's``."""
    out = []
    for row in rows:
        data = json.loads(row["data"]) if row["data"] else {}
        argv = [str(a) for a in (data.get("argv") or [])][:12]
        out.append(f"tried `loopx {shlex.join(argv)}`"[:300] + (f" ({str(data.get('why'))[:200]})"
                                                                if data.get("why") else ""))
    return out


def derive(res: list[dict]) -> str:
    """The outcome the evidence supports: ``failed`` when a do step failed or never ran, else ``ok``."""
    return "failed" if any(r["status"] != "ok" for r in res) else "ok"


def describe(r: dict) -> str:
    """One step result for people: ``step action:test failed (exit 5)``."""
    if r["status"] == "not_run":
        return f"step {r['step']} has not run"
    if r["status"] == "unknown":
        return f"step {r['step']} ran, result unknown"
    if r["status"] == "failed":
        how = r["limit_hit"] if r.get("limit_hit") else "timed out" if r.get("timed_out") else (
            f"exit {r['exit_code']}" if r.get("exit_code") is not None else "ran, result unknown")
        return f"step {r['step']} failed ({how})"
    return f"step {r['step']} ok"


def last_line(text: str | None, limit: int = 160) -> str:
    """The last non-empty line of an output tail, shortened."""
    for line in reversed((text or "").splitlines()):
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def handoff_for(res: list[dict], open_todos: list[str]) -> str | None:
    """A hand-off saying why a run failed (``None`` when every do step succeeded)."""
    bad = [r for r in res if r["status"] != "ok"]
    if not bad:
        return None
    parts = []
    for r in bad:
        text = describe(r)
        tail = last_line(r.get("output_tail"))
        parts.append(text + (f": {tail}" if tail else ""))
    if open_todos:
        parts.append(f"todo {', '.join(open_todos)} stays open")
    return "; ".join(parts)


# --- stuck detection ----------------------------------------------------------------------------


def first_failure(res: list[dict]) -> dict | None:
    """The first do step that ran and failed (steps that never ran are not failures of their own)."""
    return next((r for r in res if r["status"] == "failed"), None)


def stuck_after(goal) -> int:
    """How many failed runs in a row make the goal wait for a person (0: never)."""
    n = getattr(goal.limits, "stuck_after", None)
    return DEFAULT_STUCK_AFTER if n is None else int(n)
