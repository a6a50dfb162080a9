"""``loopx turn`` and ``loopx loop``: governed turns through an executor provider."""

from __future__ import annotations

import click

from loopx.cli.ids import goal_option
from loopx.cli.output import LoopxCommand, actor, emit, open_registry


def turn_text(t: dict) -> str:
    """One turn for people."""
    if t["run_id"] is None:
        from loopx.cli.quota import contract_text

        return contract_text(t["contract"])
    lines = [f"turn {t['run_id']}: {t['outcome']}  ({', '.join(t['reasons'])})"]
    lines += [f"  evidence {e['id']} [{e['kind']}] {e['summary']}" for e in t["evidence"]]
    if t.get("handoff"):
        lines.append(f"  hand-off: {t['handoff']}")
    return "\n".join(lines)


def loop_text(out: dict) -> str:
    """A loop for people."""
    lines = [turn_text(t) for t in out["turns"]]
    if out["stopped"] == "interrupted":
        lines.append(f"stopped after {len(out['turns'])} turns: interrupted by {out['interrupted']['signal']}")
    elif out["stopped"] == "max_turns":
        lines.append(f"stopped after {len(out['turns'])} turns (--max-turns)")
    else:
        from loopx.cli.quota import contract_text

        lines.append(f"stopped after {len(out['turns'])} turns; the decision is now:")
        lines.append(contract_text(out["contract"]))
    return "\n".join(lines)


def _options(fn):
    fn = click.option("--unconfined", is_flag=True, default=False,
                      help="Run the agent without OS confinement (only if you trust it; docs/security.md). "
                           "Env LOOPX_UNCONFINED=1.")(fn)
    fn = click.option("--grace-seconds", type=float, default=30.0, show_default=True,
                      help="On SIGTERM / Ctrl-C: how long the running step may go on before it is stopped.")(fn)
    fn = click.option("--ttl-seconds", type=float, default=None, help="Lease of each run (default 3600).")(fn)
    fn = click.option("--agent", default=None, help="Agent name (default: env LOOPX_AGENT, else 'agent').")(fn)
    fn = click.option("--executor", default="shell", show_default=True, help="Executor provider: shell, claude-code, codex, command or a plugin's (docs/agents.md).")(fn)
    return goal_option()(fn)


@click.command(cls=LoopxCommand)
@_options
@click.option("--worker-lease", default=None, hidden=True,
              help="WORKER:TOKEN - set by loopx worker: open the run only under this goal lease.")
def turn(goal_id, executor, agent, ttl_seconds, unconfined, grace_seconds, worker_lease):
    """One governed turn: should-run, the executor under the contract, evidence, run finish.

    SIGTERM or Ctrl-C lets the running step finish (up to --grace-seconds), starts no other,
    and closes the run `interrupted` with the interruption as evidence.
    """
    from loopx import claims, interrupt, turn as turns
    from loopx.cli import run_inprocess

    owner = None
    if worker_lease is not None:
        from loopx.errors import LoopxError

        wid, _, token = worker_lease.rpartition(":")
        if not wid or not token.isdigit():
            raise LoopxError("invalid_argument", "--worker-lease is WORKER:TOKEN")
        owner = claims.owner_here(worker=wid, lease_token=int(token))
    with interrupt.handling(grace_seconds), open_registry() as reg:
        out = turns.turn(reg, actor(), goal_id=goal_id, executor=executor, agent=agent, ttl_seconds=ttl_seconds,
                             owner=owner, unconfined=unconfined, run_cli=run_inprocess)
        emit(out, turn_text)
        code = interrupt.exit_code()
    if not code and out["run_id"] is not None and out["outcome"] != "ok":
        # A harness (`while loopx turn ...`) must see a turn that did not succeed (docs/agents.md).
        code = TURN_EXIT.get(out["outcome"], 1)
    if code:
        raise SystemExit(code)


#: ``loopx turn``'s exit status when a turn ran but its outcome is not ``ok`` (an interrupted turn
#: exits 130 / 143, as a process stopped by that signal would).
TURN_EXIT = {"failed": 1, "partial": 3}


@click.command(cls=LoopxCommand)
@_options
@click.option("--max-turns", type=int, default=10, show_default=True, help="Stop after this many turns.")
def loop(goal_id, executor, agent, ttl_seconds, unconfined, grace_seconds, max_turns):
    """Governed turns until the decision is not `run` (or --max-turns).

    SIGTERM or Ctrl-C starts no new turn; the running one ends as `loopx turn` describes.
    """
    from loopx import interrupt, turn as turns
    from loopx.cli import run_inprocess

    with interrupt.handling(grace_seconds), open_registry() as reg:
        out = turns.loop(reg, actor(), goal_id=goal_id, executor=executor, agent=agent, max_turns=max_turns,
                             ttl_seconds=ttl_seconds, unconfined=unconfined, run_cli=run_inprocess)
        if out["stopped"] != "interrupted" and interrupt.requested():
            out.update(stopped="interrupted", interrupted=interrupt.describe())
        emit(out, loop_text)
        code = interrupt.exit_code()
    if code:
        raise SystemExit(code)
