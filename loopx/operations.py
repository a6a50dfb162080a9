"""The agent-facing operations, each declared once: its parameters, who may call it, its handler.

What an agent does to LoopX (ask should-run, read a goal, add / claim / finish todos, record
evidence, run an allowed step, finish its run, ask for a gate) is served on three surfaces: the
``loopx`` CLI, the MCP server (:mod:`loopx.mcp_server`) and, inside a confined step, the turn's
broker (:mod:`loopx.turn.broker`), which takes CLI argv. Each surface is derived from one
:class:`Operation` here: the MCP tool's name, description and JSON schema (:meth:`Operation.schema`),
the argv the broker is sent (:meth:`Operation.encode`), the click options of the CLI command
(:mod:`loopx.cli.op_options`) and the call on an open registry (:meth:`Operation.run`).
``tests/test_operations.py`` checks that the three agree.

Plain ``NamedTuple`` records, not attrs: ``loopx quota should-run`` (run before every agent turn)
reads this table through its CLI options, and ``typing`` is loaded on that path already.
"""


from typing import Any, Callable, NamedTuple

from loopx.model import GATE_SCOPES, TODO_PRIORITIES
from loopx.values.validate import id_pattern

#: The actor every operation here runs as on the MCP server and the broker (a run's executor).
EXECUTOR = "executor"


def id_schema(kind: str, description: str) -> dict:
    """The JSON schema of an id of ``kind`` (:func:`loopx.values.validate.id_pattern`, the one definition)."""
    return {"type": "string", "pattern": id_pattern(kind), "description": description}


GOAL_ID = id_schema("goal", "A goal id (g-…).")
RUN_ID = id_schema("run", "The run id the contract gave (r-…).")
TODO_ID = id_schema("todo", "A todo id (t-…).")
AGENT = {"type": "string", "minLength": 1, "maxLength": 200, "description": "Agent name (default: LOOPX_AGENT or 'agent')."}


class Param(NamedTuple):
    """One parameter of an operation, on every surface.

    ``schema``: its JSON schema (the MCP tool's property); ``required`` on the MCP tool;
    ``default``: the value the handler gets when it is left out. On the command line it is the
    option ``flag`` (``--`` and the name with dashes unless given), sent by the broker as
    ``form``: ``value`` (``--flag V``), ``repeat`` (``--flag V`` per item), ``json`` (``--flag
    JSON``) or ``argv`` (every item after ``--``). ``cli``: what the click option adds (help,
    its own default, ``required``, ``envvar``, ``dest``, ``choices`` where the CLI takes more).
    """

    name: str
    schema: dict
    required: bool = False
    default: Any = None
    flag: str = ""
    form: str = "value"
    cli: dict | None = None

    @property
    def option(self) -> str:
        """The CLI option (``--goal-id``)."""
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def id_kind(self) -> str | None:
        """``goal``, ``run``, ``todo``... when the value (or each item) is an id, else ``None``."""
        spec = self.schema.get("items", self.schema)
        pattern = spec.get("pattern", "")
        return next((k for k in ("goal", "run", "todo") if pattern == id_pattern(k)), None)


class Operation(NamedTuple):
    """One agent-facing operation: the MCP tool ``tool``, the CLI command ``command``, one handler.

    ``handler(registry, actor, **every parameter)`` does it on an open registry; ``brokered``,
    when set, does it through the broker instead of the one command ``command``
    (``brokered(call, **every parameter)``, ``call(argv)`` answering the command's JSON);
    ``one_of``: parameters of which exactly one is given. ``actors``: who may call it (the
    broker and the MCP server act as :data:`EXECUTOR`; a user may run the CLI command too).
    """

    tool: str
    description: str
    command: tuple[str, ...]
    params: tuple[Param, ...]
    handler: Callable[..., Any]
    brokered: Callable[..., Any] | None = None
    one_of: tuple[str, ...] = ()
    actors: tuple[str, ...] = ("user", EXECUTOR)

    def param(self, name: str) -> Param:
        """The parameter ``name``."""
        return next(p for p in self.params if p.name == name)

    def schema(self) -> dict:
        """The MCP tool's input schema."""
        out = {"type": "object", "properties": {p.name: p.schema for p in self.params},
               "required": [p.name for p in self.params if p.required], "additionalProperties": False}
        if self.one_of:
            out["oneOf"] = [{"required": [name]} for name in self.one_of]
        return out

    def complete(self, args: dict) -> dict:
        """``args`` with every parameter left out at its default."""
        return {p.name: args.get(p.name, p.default) for p in self.params}

    def encode(self, args: dict) -> list[str]:
        """The ``loopx`` argv (after the global options) the broker is sent for ``args``."""
        argv, tail = list(self.command), []
        for p in self.params:
            value = args.get(p.name, p.default)
            if value is None:
                continue
            if p.form == "repeat":
                argv += [a for item in value for a in (p.option, str(item))]
            elif p.form == "json":
                import json

                argv += [p.option, json.dumps(value)]
            elif p.form == "argv":
                tail = ["--", *map(str, value)]
            else:
                argv += [p.option, str(value)]
        return argv + tail

    def run(self, registry, actor: str, args: dict) -> Any:
        """Do it on ``registry`` as ``actor`` (``args`` checked already: :func:`check_args`)."""
        return self.handler(registry, actor, **self.complete(args))


_TYPES = {"string": str, "integer": int, "number": (int, float), "object": dict, "array": list, "boolean": bool}


def check_args(schema: dict, args: dict) -> None:
    """Check ``args`` against the subset of JSON Schema the tool schemas use (``invalid_argument``)."""
    import re

    from loopx.values.errors import LoopxError

    def bad(msg):
        raise LoopxError("invalid_argument", msg)

    if not isinstance(args, dict):
        bad("arguments must be an object")
    for key in schema.get("required", []):
        if key not in args:
            bad(f"missing argument {key!r}")
    if schema.get("oneOf") and sum(all(k in args for k in alt["required"]) for alt in schema["oneOf"]) != 1:
        bad("give exactly one of " + " or ".join(repr(alt["required"][0]) for alt in schema["oneOf"]))
    props = schema.get("properties", {})
    for key, value in args.items():
        spec = props.get(key)
        if spec is None:
            bad(f"unknown argument {key!r} (expected: {', '.join(props)})")
        want = _TYPES[spec["type"]]
        if not isinstance(value, want) or isinstance(value, bool) and spec["type"] != "boolean":
            bad(f"{key} must be of type {spec['type']}")
        if "enum" in spec and value not in spec["enum"]:
            bad(f"{key} must be one of {', '.join(map(str, spec['enum']))}")
        if "pattern" in spec and not re.fullmatch(spec["pattern"].strip("^$"), value):
            bad(f"{key} is malformed: {value[:80]!r}")
        if isinstance(value, str) and len(value) > spec.get("maxLength", 1 << 30):
            bad(f"{key} is longer than {spec['maxLength']} characters")
        if isinstance(value, str) and len(value) < spec.get("minLength", 0):
            bad(f"{key} must not be empty")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value < spec.get("minimum", float("-inf")) or value > spec.get("maximum", float("inf")):
                bad(f"{key} is out of range")
            if "exclusiveMinimum" in spec and value <= spec["exclusiveMinimum"]:
                bad(f"{key} must be more than {spec['exclusiveMinimum']}")
        if isinstance(value, list):
            if len(value) < spec.get("minItems", 0) or len(value) > spec.get("maxItems", 1 << 30):
                bad(f"{key} has the wrong number of items")
            items = spec.get("items") or {}
            for item in value:
                check_args({"properties": {"item": items}}, {"item": item})


# -- handlers: one call into the domain each (imports are lazy: the CLI reads this table) --------

def _should_run(reg, actor, goal_id, agent, ttl_seconds):
    from loopx.views.should_run import should_run

    return should_run(reg, actor, goal_id=goal_id, agent=agent, ttl_seconds=ttl_seconds)


def _goal_status(reg, actor, goal_id):
    from loopx.values import clock
    from loopx.domain import goals
    from loopx.views.needs_you import needs

    out = goals.show(reg, goal_id)
    # Whether it waits for a person, and why: the one definition status and the dashboard use.
    with reg.read() as tx:
        out["needs_you"] = needs(tx, out["id"], clock.now()) if out["status"] == "open" else None
    return out


def _goal_status_brokered(call, goal_id):
    out = call(["project-prompt", "show", "--goal-id", goal_id])
    out["needs_you"] = call(["status", "--goal-id", goal_id]).get("needs_you")
    return out


def _todo_add(reg, actor, goal_id, run_id, text, priority, depends_on):
    from loopx.domain import todos

    return todos.add(reg, actor, goal_id=goal_id, run_id=run_id, text=text, priority=priority,
                     depends_on=list(depends_on))


def _todo_claim(reg, actor, goal_id, todo_id, run_id, agent):
    from loopx.domain import todos

    return todos.claim(reg, actor, goal_id=goal_id, todo_id=todo_id, run_id=run_id, agent=agent)


def _todo_done(reg, actor, goal_id, todo_id, run_id, note):
    from loopx.domain import todos

    return todos.settle(reg, actor, "done", goal_id=goal_id, todo_id=todo_id, run_id=run_id, note=note)


def _evidence_add(reg, actor, run_id, kind, summary, data):
    from loopx.domain import evidence

    return evidence.record(reg, actor, run_id=run_id, kind=kind, summary=summary, data=data)


def _exec_step(reg, actor, run_id, action, argv, timeout_seconds):
    from loopx.domain import actions

    kw = {"timeout": timeout_seconds} if timeout_seconds else {}
    return actions.execute(reg, actor, run_id=run_id, action=action, argv=argv, **kw)


def _run_finish(reg, actor, run_id, outcome, tokens, cost, handoff):
    from loopx.domain import runs

    return runs.finish(reg, actor, run_id=run_id, outcome=outcome, tokens=tokens, cost=cost, handoff=handoff)


def _gate_request(reg, actor, goal_id, title, scope, blocks):
    from loopx.domain import gates

    return gates.add(reg, actor, goal_id=goal_id, title=title, scope=scope, blocks=blocks)


# -- the table -----------------------------------------------------------------------------------

_RUN_ENV = {"envvar": "LOOPX_RUN_ID", "required": True}  # the run a step's command acts under by default
_GOAL = Param("goal_id", GOAL_ID, required=True)


def _run(help: str) -> Param:
    """The run an agent acts under: required of the agent, optional on the user's command line."""
    return Param("run_id", RUN_ID, required=True, cli={"help": help})


def _todo(help: str | None = None) -> Param:
    return Param("todo_id", TODO_ID, required=True, cli={"required": True, **({"help": help} if help else {})})


OPERATIONS: dict[str, Operation] = {op.tool: op for op in (
    Operation("should_run", "Ask before every turn: the decision (run, wait, ask_user, repair, stop), its reasons and "
              "the interaction contract (a run decision opens a run). Do only what the contract lists.",
              ("quota", "should-run"), (
                  _GOAL,
                  Param("agent", AGENT, cli={"help": "Who asks (default: env LOOPX_AGENT, else 'agent')."}),
                  Param("ttl_seconds", {"type": "number", "exclusiveMinimum": 0, "maximum": 86400,
                                        "description": "Lease of the run opened (default 3600)."},
                        cli={"help": "How long an opened run stays open (default 3600)."})),
              _should_run),
    Operation("goal_status", "A goal: objective, criteria, lifecycle, gates, todos, quota, and needs_you (whether it "
              "waits for a person, why, the commands).", ("project-prompt", "show"), (_GOAL,),
              _goal_status, brokered=_goal_status_brokered),
    Operation("todo_add", "Add a todo to the goal's plan inside your run.", ("todo", "add"), (
        _GOAL,
        _run("The open run an agent adds it under (required for agents)."),
        Param("text", {"type": "string", "minLength": 1, "maxLength": 2000}, required=True,
              cli={"required": True, "help": "What to do."}),
        Param("priority", {"type": "string", "enum": ["P0", "P1", "P2", "P3"]}, default="P2",
              cli={"choices": TODO_PRIORITIES, "default": "P2", "show_default": True}),
        Param("depends_on", {"type": "array", "items": TODO_ID, "maxItems": 50}, default=(), form="repeat",
              cli={"help": "A todo that must be done first (repeatable)."})),
        _todo_add),
    Operation("todo_claim", "Claim the contract's todo for your run (a lease).", ("todo", "claim"), (
        _GOAL, _todo(),
        _run("The open run the claim is made under (required for agents)."),
        Param("agent", AGENT, cli={"help": "Who claims it (default: the agent of --run-id)."})),
        _todo_claim),
    Operation("todo_done", "Mark your claimed todo done.", ("todo", "done"), (
        _GOAL, _todo(),
        _run("The open run it happens under (required for agents)."),
        Param("note", {"type": "string", "maxLength": 8192},
              cli={"help": "What happened (kept on the todo and in the ledger)."})),
        _todo_done),
    Operation("evidence_add", "Record evidence of what you did or saw in your run.", ("evidence", "add"), (
        Param("run_id", RUN_ID, required=True, cli={**_RUN_ENV, "required": False}),
        Param("kind", {"type": "string", "pattern": "^[a-z][a-z0-9_.-]{0,63}$",
                       "description": "note (default), file, test, …"}, default="note",
              cli={"required": True, "help": "note, command, file, metric... (a short name)."}),
        Param("summary", {"type": "string", "minLength": 1, "maxLength": 8192}, required=True,
              cli={"required": True, "help": "One line on what was observed."}),
        Param("data", {"type": "object", "description": "Structured details (≤ 64 KiB as JSON)."}, form="json",
              cli={"help": "A JSON object or array with details."})),
        _evidence_add),
    Operation("exec_step", "Run one action the contract allows (`loopx exec`): its exit code, output tail and sha256 "
              "are recorded as evidence. Name the action, or give a capability step's argv exactly as listed.",
              ("exec",), (
                  Param("run_id", RUN_ID, required=True, cli=_RUN_ENV),
                  Param("action", {"type": "string", "pattern": "^[a-z0-9][a-z0-9_.-]{0,63}$"},
                        cli={"dest": "action_name", "help": "An allowed action of the run's contract."}),
                  Param("argv", {"type": "array", "items": {"type": "string"}, "minItems": 1}, form="argv"),
                  Param("timeout_seconds", {"type": "number", "exclusiveMinimum": 0, "maximum": 86400},
                        flag="--timeout", cli={"dest": "timeout", "default": 600.0, "show_default": True,
                                               "help": "Seconds before the command is killed."})),
              _exec_step, one_of=("action", "argv")),
    Operation("run_finish", "Finish your run: outcome, the tokens and cost used, a hand-off for the next turn.",
              ("run", "finish"), (
                  Param("run_id", RUN_ID, required=True, cli=_RUN_ENV),
                  Param("outcome", {"type": "string", "enum": ["ok", "partial", "failed"]}, required=True,
                        cli={"help": "Default: what the run's evidence supports (failed when a step failed or "
                                     "never ran, else ok)."}),
                  Param("tokens", {"type": "integer", "minimum": 0}, default=0,
                        cli={"default": 0, "help": "Tokens the turn used."}),
                  Param("cost", {"type": "number", "minimum": 0}, default=0.0,
                        cli={"default": 0.0, "help": "What the turn cost, in USD."}),
                  Param("handoff", {"type": "string", "maxLength": 8192},
                        cli={"help": "A note for whoever acts next (default for a failed run: why)."})),
              _run_finish),
    Operation("gate_request", "Ask a human for a decision: a pending gate (a user approves or rejects it).",
              ("gate", "add"), (
                  _GOAL,
                  Param("title", {"type": "string", "minLength": 1, "maxLength": 500}, required=True,
                        cli={"required": True, "help": "What needs approval, e.g. 'Publish the report'."}),
                  Param("scope", {"type": "string", "enum": list(GATE_SCOPES)},
                        default="other", cli={"default": "other", "show_default": True, "help": "What is at stake."}),
                  Param("blocks", {"type": "string", "description": "all (default), action:NAME or todo:ID"},
                        default="all", cli={"default": "all", "show_default": True,
                                            "help": "What waits for the decision: all (the whole goal), action:NAME "
                                                    "or todo:ID."})),
              _gate_request),
)}
