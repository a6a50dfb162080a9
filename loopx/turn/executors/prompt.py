"""The prompt an agent gets for one turn, built from its interaction contract and nothing else.

It states the objective and criteria, the hand-off, the ready todo, the exact commands the
agent may run (a ```sh block, one command a line, copied from the contract), how to record
evidence, and how the turn ends. ``managed`` prompts are the ones an executor provider
(``claude-code``, ``codex``, ``command``) sends: the provider finishes the run, so its finish
step is left out. Unmanaged prompts are for hosts that drive LoopX by hand
(``loopx agent-prompt``): they run the finish step themselves.
"""

from __future__ import annotations

import shlex

from loopx.turn import broker as _broker

HOSTS = ("claude-code", "codex", "generic")
_TOOL = {"claude-code": "your Bash tool", "codex": "your shell tool", "generic": "a shell"}
#: What the broker refuses as a user's (one list: :data:`loopx.turn.broker.USER_ONLY`), as the agent reads it.
USER_ONLY = tuple(sorted(f"{command} {sub}" for command, sub in _broker.USER_ONLY))


def steps(contract: dict) -> list[dict]:
    """The contract's steps as ``{"kind", "line"}`` (claim / do / record / finish / other).

    Uses ``cli_channel.steps`` (argv lists) when the contract has them, else classifies the
    shell-quoted ``next_cli_actions``.
    """
    cli = contract["interaction_contract"]["cli_channel"]
    if cli.get("steps"):
        return [{"kind": s.get("kind") or "do", "line": shlex.join(s["argv"])} for s in cli["steps"]]
    out = []
    for line in cli.get("next_cli_actions") or []:
        words = shlex.split(line)[1:3]
        if words == ["todo", "claim"]:
            kind = "claim"
        elif words == ["run", "finish"]:
            kind = "finish"
        elif words in (["evidence", "add"], ["todo", "done"], ["todo", "add"]):
            kind = "record"
        else:
            kind = "do"
        out.append({"kind": kind, "line": line})
    return out


def commands(contract: dict, *, managed: bool) -> list[str]:
    """The command lines the agent may run, in order (a managed turn leaves out the finish step)."""
    return [s["line"] for s in steps(contract) if not (managed and s["kind"] == "finish")]


def build(contract: dict, *, host: str = "generic", managed: bool = True) -> str:
    """The prompt for the turn ``contract`` (a should-run answer) allows, for ``host``."""
    if host not in HOSTS:
        from loopx.values.errors import LoopxError

        raise LoopxError("invalid_argument", f"--host must be one of {', '.join(HOSTS)}")
    doc = contract["interaction_contract"]
    agent = doc["agent_channel"]
    objective = agent.get("objective") or {}
    run_id = doc.get("run_id")
    lines = [f"You are the executor of one turn on LoopX goal {contract['goal_id']}. LoopX decided this "
             f"turn may run ({', '.join(contract['reasons'])}); do exactly what it allows and nothing else."]
    if contract["decision"] != "run":
        lines += ["", f"Decision: {contract['decision']} ({', '.join(contract['reasons'])}). Do not work on this goal now.",
                  agent.get("primary_action") or ""]
        lines[0] = f"LoopX goal {contract['goal_id']}: no turn may run now."
        return "\n".join(lines).rstrip() + "\n"
    lines += ["", f"Goal: {objective.get('title') or ''}"]
    if objective.get("description"):
        lines.append(f"Objective: {objective['description']}")
    criteria = objective.get("criteria") or []
    if criteria:
        lines.append("Success criteria:")
        lines += [f"- [{'x' if c.get('met') else ' '}] {c['text']}" for c in criteria]
    lines.append(f"Hand-off from the last turn: {agent.get('handoff') or 'none'}")
    ready = agent.get("ready_todos") or []
    if ready:
        top = ready[0]
        lines.append(f"Todo for this turn: {top['id']} ({top['priority']}) {top['text']}")
    else:
        lines.append("The goal has no todos yet: this turn plans it (add one todo per step).")
    if agent.get("workdir"):
        lines.append(f"Working directory: {agent['workdir']} (work on the files there, and only there)")
    for note in agent.get("notes") or []:
        lines.append(f"Note: {note}")
    for f in agent.get("feedback") or []:
        lines.append(f"Reviewer feedback on {f['run_id']} ({f['score']:+g}): {f.get('comment') or ''}")
    lines += ["", f"Run these commands with {_TOOL[host]}, one at a time, in this order, exactly as written:",
              "", "```sh", *commands(contract, managed=managed), "```", "",
              "Rules:",
              "- Run nothing else. Every command not listed is outside the contract; LoopX refuses what the "
              "contract does not allow (`loopx exec` runs only the goal's allowed actions).",
              "- Each `loopx exec` step records its own evidence. To add a note, use `loopx evidence add --run-id "
              f"{run_id} --kind note --summary TEXT` with TEXT in your own words.",
              "- If a command fails (non-zero exit, or `loopx: error: ... [code]`), do not retry it or work around "
              "it: skip `loopx todo done` and end the turn, saying what failed.",
              f"- User-only commands ({', '.join(USER_ONLY)}) refuse you; a human decides those. If you need a "
              "decision, say so in your reply."]
    if managed:
        lines += ["- Your `loopx` already reaches LoopX as this run's executor (LOOPX_BROKER and LOOPX_RUN_ID are "
                  "set); you work confined to your working directory.",
                  "",
                  "How the turn ends: when the commands have run (or one failed), stop and reply with a short "
                  "hand-off: what you did, what you saw, what the next turn should do. Do not run `loopx run "
                  f"finish`: LoopX finishes run {run_id} itself, with the usage your CLI reports and your reply as "
                  "the hand-off."]
    else:
        lines += [f"- Run them with LOOPX_ACTOR=executor and LOOPX_RUN_ID={run_id} in the environment.",
                  "",
                  "How the turn ends: the last command (`loopx run finish`) closes the run with the outcome its "
                  "steps' evidence supports (add --outcome partial or failed if you know better; ok is refused "
                  "when a step failed); add the tokens and cost you used (--tokens, --cost) and a short "
                  "--handoff for the next turn. Then stop."]
    return "\n".join(lines) + "\n"
