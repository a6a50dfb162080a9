"""``loopx demo``: a governed agent loop, end to end, on a fresh registry.

The demo does what a user and an agent harness would do, through the same domain functions
the commands call, and the agent's turns go through the built-in ``shell`` executor, which runs
the contract's own ``loopx`` commands as child processes with ``LOOPX_ACTOR=executor``:

1. a user creates a goal with success criteria, allows three harmless commands, sets a budget
   of two turns, plans three todos, and puts a gate on the whole goal and one on ``publish``;
2. the agent asks ``quota should-run`` and is told to ask the user (the gate);
3. the user approves; the agent loops through the shell executor until the budget is spent
   (pause and ask: the contract names the ``quota grant`` command);
4. the user grants two more turns and approves ``publish``; the loop finishes the plan;
5. the user scores a run (the human_reward overlay) and closes the goal (the agent is told to
   stop), and ``summary_all`` sums it all up.

:func:`steps` yields the transcript as data; the CLI prints it. Nothing here prints.
"""

from __future__ import annotations

import shlex
import sys
from typing import Iterator

AGENT = "demo-agent"
PY = sys.executable

CHECK = [PY, "-c", "import platform; print('python', platform.python_version(), 'on', platform.system())"]
COUNT = [PY, "-c", "brief = 'Check the toolchain, count the brief, publish a note.'; "
         "print(len(brief.split()), 'words in the brief')"]
PUBLISH = [PY, "-c", "print('release note: the toolchain is checked and the brief is counted')"]


def _cmd(*argv) -> list[str]:
    return ["loopx", *[str(a) for a in argv]]


def _command(actor, argv, show, result) -> dict:
    return {"kind": "command", "actor": actor, "argv": argv, "show": show, "result": result}


def _set_up(reg, user: str):
    """Step 1 of the demo (its transcript entries); returns the goal id, its criteria and its two gates."""
    from loopx.domain import actions, gates, goals, todos
    from loopx.views import quota

    command = _command
    title = "Check the toolchain and publish a release note"
    criteria = ["The interpreter is checked", "The brief is counted", "The release note is published after approval"]
    description = "A small, harmless goal to show LoopX at work."
    goal = goals.create(reg, user, title=title, description=description, criteria=criteria)
    g = goal["id"]
    yield command(user, _cmd("project-prompt", "create", "--title", title, "--description", description,
                             *[x for c in criteria for x in ("--criterion", c)]), "goal", goal)
    for name, argv in (("check", CHECK), ("count", COUNT), ("publish", PUBLISH)):
        yield command(user, _cmd("action", "add", "--goal-id", g, "--name", name, "--", *argv), "action",
                      actions.add(reg, user, goal_id=g, name=name, argv=argv))
    yield command(user, _cmd("quota", "set", "--goal-id", g, "--max-turns", 2, "--max-wall-seconds", 600),
                  "quota", quota.set_limits(reg, user, goal_id=g, values={"max_turns": 2, "max_wall_seconds": 600}))
    previous = []
    for text in ("Check the interpreter", "Count the words of the brief", "Publish the release note"):
        deps = previous[-1:]
        todo = todos.add(reg, user, goal_id=g, text=text, depends_on=deps)
        yield command(user, _cmd("todo", "add", "--goal-id", g, "--text", text,
                                 *[x for d in deps for x in ("--depends-on", d)]), "todo", todo)
        previous.append(todo["id"])
    start = gates.add(reg, user, goal_id=g, title="Start work on this goal", scope="other", blocks="all")
    yield command(user, _cmd("gate", "add", "--goal-id", g, "--title", start["title"], "--scope", "other",
                             "--blocks", "all"), "gate", start)
    publish = gates.add(reg, user, goal_id=g, title="Publish the release note", scope="production",
                        blocks="action:publish")
    yield command(user, _cmd("gate", "add", "--goal-id", g, "--title", publish["title"], "--scope", "production",
                             "--blocks", "action:publish"), "gate", publish)
    return g, criteria, start, publish


def steps(reg, run_cli=None) -> Iterator[dict]:
    """The demo as a stream of transcript entries.

    Each entry is ``{"kind": "heading"|"note", "text"}`` or ``{"kind": "command", "actor",
    "argv", "show", "result"}``; ``show`` says how to render ``result`` (``goal``, ``action``,
    ``quota``, ``todo``, ``gate``, ``contract``, ``loop``, ``reward``, ``summary``).
    ``run_cli``: the CLI in this process, for the turns' broker (see :func:`loopx.turn.governed.turn`).
    """
    from loopx.turn import governed as turns
    from loopx.domain import gates, goals, rewards
    from loopx.views import quota, summary_all
    from loopx.views.should_run import should_run

    user, command = "user", _command
    yield {"kind": "heading", "text": "1. A user sets up a goal: criteria, allowed commands, a budget, a plan, gates"}
    g, criteria, start, publish = yield from _set_up(reg, user)

    yield {"kind": "heading", "text": "2. The agent asks before its turn, and is told to ask the user"}
    yield command(AGENT, _cmd("quota", "should-run", "--goal-id", g, "--agent", AGENT), "contract",
                  should_run(reg, user, goal_id=g, agent=AGENT))

    yield {"kind": "heading", "text": "3. The user approves; the agent loops through the shell executor"}
    note = _world_or_landlock()
    if note:
        yield {"kind": "note", "text": note}
    yield command(user, _cmd("gate", "approve", "--goal-id", g, "--gate-id", start["id"], "--comment", "Go ahead."), "gate",
                  gates.decide(reg, user, "approve", goal_id=g, gate_id=start["id"], comment="Go ahead."))
    yield {"kind": "note", "text": "Each turn: should-run opens a run and its contract; the shell executor runs the "
                                   "contract's commands (claim, exec, done) as LOOPX_ACTOR=executor; run finish closes it."}
    first = turns.loop(reg, user, goal_id=g, executor="shell", agent=AGENT, max_turns=5, run_cli=run_cli)
    yield command(user, _cmd("loop", "--goal-id", g, "--executor", "shell", "--agent", AGENT, "--max-turns", 5),
                  "loop", first)

    yield {"kind": "heading", "text": "4. The budget ran out: the user grants more and approves publishing"}
    yield command(user, _cmd("quota", "grant", "--goal-id", g, "--turns", 2), "quota",
                  quota.grant(reg, user, goal_id=g, amounts={"turns": 2}))
    yield command(user, _cmd("gate", "approve", "--goal-id", g, "--gate-id", publish["id"], "--comment", "Publish it."),
                  "gate",
                  gates.decide(reg, user, "approve", goal_id=g, gate_id=publish["id"], comment="Publish it."))
    second = turns.loop(reg, user, goal_id=g, executor="shell", agent=AGENT, max_turns=5, run_cli=run_cli)
    yield command(user, _cmd("loop", "--goal-id", g, "--executor", "shell", "--agent", AGENT, "--max-turns", 5),
                  "loop", second)

    yield {"kind": "heading", "text": "5. The user scores a run (human_reward overlay), closes the goal, reads the summary"}
    runs_done = [t for t in first["turns"] + second["turns"] if t["run_id"]]
    if runs_done:
        target = runs_done[-1]["run_id"]
        comment = "Clean run: every command recorded with its output hash. Keep this approach."
        yield command(user, _cmd("reward", "add", "--goal-id", g, "--run-id", target, "--score", "1.0",
                                 "--comment", comment), "reward",
                      rewards.add(reg, user, goal_id=g, run_id=target, score=1.0, comment=comment))
    for number in range(1, len(criteria) + 1):
        yield command(user, _cmd("project-prompt", "criterion", "--goal-id", g, "--number", number), "goal",
                      goals.mark_criterion(reg, user, g, number))
    yield command(user, _cmd("project-prompt", "close", "--goal-id", g, "--reason", "all criteria met"), "goal",
                  goals.transition(reg, user, "close", g, reason="all criteria met"))
    yield command(AGENT, _cmd("quota", "should-run", "--goal-id", g, "--agent", AGENT), "contract",
                  should_run(reg, user, goal_id=g, agent=AGENT))
    yield command(user, _cmd("summary-all", "--goal-id", g), "summary", summary_all.summarize(reg, g))


def check_fresh_target(url: str) -> None:
    """Refuse to run the demo on a registry that already holds goals (``target_not_empty``)."""
    import os

    from loopx.values.errors import LoopxError
    from loopx.ledger.registry import Registry
    from loopx.store.queries.status import goal_count

    if "://" not in url and not os.path.exists(url):
        return
    with Registry.open(url) as reg, reg.read() as tx:
        n = goal_count(tx)
    if n:
        raise LoopxError("target_not_empty", f"{url} already holds {n} goals; the demo needs a fresh registry")


def shown(argv: list[str]) -> str:
    """A command line as a user would type it."""
    return shlex.join(argv)


def _world_or_landlock() -> str | None:
    """Without bubblewrap, the demo's steps (LoopX's own scripted commands, no model) run under
    Landlock alone, saying so, so that the README's first command works on a fresh machine; real
    agents still get the world or nothing (:func:`loopx.turn.confine.check`)."""
    import os

    from loopx.turn import confine
    from loopx.sandbox import landlock

    if os.environ.get(confine.ENV_BACKEND) or not sys.platform.startswith("linux") or landlock.abi() < 1:
        return None
    if confine.backend() is not None:
        return None
    os.environ[confine.ENV_BACKEND] = "landlock"  # this process only: the demo's own turns
    return ("bubblewrap is not installed, so the demo's steps (LoopX's own scripted commands) run under "
            "Landlock alone (LOOPX_CONFINE_BACKEND=landlock). Install bubblewrap (apt-get install bubblewrap) "
            "before you run a real agent: without it LoopX refuses the turn (docs/security.md).")
