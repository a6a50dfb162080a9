"""What ``loopx turn`` and ``loopx loop`` share: their options and how a turn reads for people."""

from __future__ import annotations

import click

from loopx.cli.ids import goal_option


def turn_text(t: dict) -> str:
    """One turn for people."""
    if "contract" in t and t["contract"] is None:  # (a loop's turns carry no contract)
        return "interrupted before should-run: no run opened, nothing charged"
    if t["run_id"] is None:
        from loopx.cli.quota import contract_text

        return contract_text(t["contract"])
    lines = [f"turn {t['run_id']}: {t['outcome']}  ({', '.join(t['reasons'])})"]
    lines += [f"  evidence {e['id']} [{e['kind']}] {e['summary']}" for e in t["evidence"]]
    if t.get("handoff"):
        lines.append(f"  hand-off: {t['handoff']}")
    return "\n".join(lines)


def turn_options(fn):
    """The options of `loopx turn` and `loopx loop`: the goal, the executor, the agent, leases, confinement."""
    fn = click.option("--unconfined", is_flag=True, default=False,
                      help="Run the agent without OS confinement (only if you trust it; docs/security.md). "
                           "Env LOOPX_UNCONFINED=1.")(fn)
    fn = click.option("--grace-seconds", type=float, default=30.0, show_default=True,
                      help="On SIGTERM / Ctrl-C: how long the running step may go on before it is stopped.")(fn)
    fn = click.option("--ttl-seconds", type=float, default=None, help="Lease of each run (default 3600).")(fn)
    fn = click.option("--agent", default=None, help="Agent name (default: env LOOPX_AGENT, else 'agent').")(fn)
    fn = click.option("--executor", default="shell", show_default=True, help="Executor provider: shell, claude-code, codex, command or a plugin's (docs/agents.md).")(fn)
    return goal_option()(fn)
