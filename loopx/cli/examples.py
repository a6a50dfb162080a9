"""One example per core command, printed at the end of its ``--help``.

Kept in one table rather than in each docstring so that every example can be checked against
the command list in one place (tests/test_cli_forgiving.py fails for a command without one).
Ids are written as the short prefixes users type; any unique prefix of an id works.

Only the core's commands are here: a plugin gives its own commands their examples with click's
``epilog="Example:\n  loopx my-command ..."`` (docs/plugins.md), as the shipped capabilities do.
"""

from __future__ import annotations

EXAMPLES: dict[str, list[str]] = {
    "": ["loopx project-prompt create --title 'Fix the flaky test'",
         "loopx quota should-run g-2ce4 --json"],
    "agent-prompt": ["loopx agent-prompt g-2ce4 --host claude-code > TURN.md",
                     "loopx agent-prompt g-2ce4 --host codex --managed   # exactly what --executor codex sends"],
    "action": ["loopx action add --goal-id g-2ce4 --name test -- python -m pytest -q"],
    "action add": ["loopx action add --goal-id g-2ce4 --name test -- python -m pytest -q"],
    "action list": ["loopx action list g-2ce4"],
    "action remove": ["loopx action remove g-2ce4 --name test"],
    "capabilities": ["loopx capabilities list"],
    "capabilities list": ["loopx capabilities list --json"],
    "capabilities show": ["loopx capabilities show seed_domain"],
    "demo": ["loopx demo", "loopx --registry /tmp/demo.db demo   # keep the demo's registry"],
    "evidence": ["loopx evidence add --run-id r-91ab --kind note --summary 'the fit converged'"],
    "evidence add": ["loopx evidence add --run-id r-91ab --kind metric --summary 'MAPE 4.1%' --data '{\"mape\": 0.041}'"],
    "evidence list": ["loopx evidence list --goal-id g-2ce4 --kind command"],
    "exec": ["loopx exec --run-id r-91ab --agent a1 --action test", "loopx exec --run-id r-91ab -- python -m pytest -q"],
    "gate": ["loopx gate add g-2ce4 --title 'Publish the report' --scope production --blocks action:publish"],
    "gate add": ["loopx gate add g-2ce4 --title 'Publish the report' --scope production --blocks action:publish"],
    "gate approve": ["loopx gate approve g-2ce4 --gate-id x-7f3 --comment go"],
    "gate reject": ["loopx gate reject g-2ce4 --gate-id x-7f3 --comment 'not before the review'"],
    "gate reopen": ["loopx gate reopen g-2ce4 --gate-id x-7f3 --comment 'reviewed: decide again'"],
    "gate list": ["loopx gate list g-2ce4 --pending"],
    "gate show": ["loopx gate show g-2ce4 --gate-id x-9b1f"],
    "handoff": ["loopx handoff show g-2ce4"],
    "workspace": ["loopx workspace diff g-2ce4", "loopx workspace apply g-2ce4"],
    "workspace show": ["loopx workspace show g-2ce4"],
    "workspace diff": ["loopx workspace diff g-2ce4", "loopx --format json workspace diff g-2ce4 --stat"],
    "workspace apply": ["loopx workspace apply g-2ce4"],
    "workspace discard": ["loopx workspace discard g-2ce4"],
    "handoff show": ["loopx handoff show g-2ce4"],
    "history": ["loopx history g-2ce4 --after 10 --limit 20"],
    "loop": ["loopx loop g-2ce4 --executor shell --max-turns 5",
             "loopx loop g-2ce4 --executor codex --max-turns 3"],
    "mcp": ["loopx mcp                       # an MCP host starts it; see docs/agents.md",
            "claude mcp add loopx -- loopx mcp"],
    "plugins": ["loopx plugins", "loopx plugins install ./examples/plugins/loopx-seed-domain"],
    "plugins list": ["loopx plugins list --json"],
    "plugins install": ["loopx plugins install ./examples/plugins/loopx-seed-domain",
                        "loopx plugins install PACKAGE   # a name on the package index"],
    "plugins uninstall": ["loopx plugins uninstall loopx-seed-domain"],
    "project-prompt": ["loopx project-prompt create --title 'Investigate the revenue spike' --criterion 'names three drivers'"],
    "project-prompt create": ["loopx project-prompt create --title 'Investigate the revenue spike' "
                              "--criterion 'names three drivers'"],
    "project-prompt list": ["loopx project-prompt list --status all --json"],
    "project-prompt show": ["loopx project-prompt show g-2ce4"],
    "project-prompt criterion": ["loopx project-prompt criterion g-2ce4 --number 1"],
    "project-prompt pause": ["loopx project-prompt pause g-2ce4 --reason 'waiting for data'"],
    "project-prompt resume": ["loopx project-prompt resume g-2ce4"],
    "project-prompt close": ["loopx project-prompt close g-2ce4 --reason done"],
    "project-prompt retry": ["loopx project-prompt retry g-2ce4 --reason 'fixed the flaky fixture'"],
    "project-prompt capabilities": ["loopx project-prompt capabilities g-2ce4 --enable seed_domain"],
    "quota": ["loopx quota should-run g-2ce4 --json"],
    "quota should-run": ["loopx quota should-run g-2ce4 --json       # opens a run and charges a turn on `run`",
                         "loopx quota should-run g-2ce4 --dry-run    # preview; writes nothing"],
    "quota set": ["loopx quota set g-2ce4 --max-turns 20 --max-cost 15 --cadence-seconds 60",
                  "loopx quota set g-2ce4 --stuck-after 5"],
    "quota grant": ["loopx quota grant g-2ce4 --turns 5"],
    "quota show": ["loopx quota show g-2ce4"],
    "registry": ["loopx registry info"],
    "registry info": ["loopx registry info --json", "loopx --registry postgresql://loopx@db/loopx registry info"],
    "registry init": ["loopx --registry ~/work/registry.db registry init"],
    "registry copy": ["loopx registry copy --from ~/.local/share/loopx/registry.db --to postgresql://loopx@db/loopx"],
    # rekey/reanchor came with keyed integrity; every --help shows an example (test_cli_forgiving).
    "registry rekey": ["loopx registry rekey            # the key was exposed: new key, every chain re-sealed",
                       "loopx registry rekey --adopt    # the key is lost: trust the registry as it stands"],
    "registry reanchor": ["loopx registry reanchor    # after restoring an older backup on purpose"],
    "doctor": ["loopx doctor", "loopx doctor --json --notify-test"],
    "registry keys": ["loopx registry keys", "loopx registry keys --prune   # remove keys of registries that are gone"],
    "registry caps": ["loopx registry caps --evidence-bytes 131072 --goal-state-bytes 8388608"],
    "reward": ["loopx reward add g-2ce4 --run-id r-91ab --score 1 --comment 'Keep this approach.'"],
    "reward add": ["loopx reward add g-2ce4 --run-id r-91ab --score 1 --comment 'Keep this approach.'"],
    "reward list": ["loopx reward list g-2ce4"],
    "reward export": ["loopx reward export > rewards.jsonl"],
    "run": ["loopx run finish --run-id r-91ab --tokens 1200 --handoff 'next: the report'"],
    "run finish": ["loopx run finish --run-id r-91ab --tokens 1200 --handoff 'next: the report'",
                   "loopx run finish --run-id r-91ab --outcome ok --force-outcome 'flaky fixture, see #12'"],
    "run show": ["loopx run show --run-id r-91ab"],
    "run list": ["loopx run list g-2ce4 --limit 5"],
    "schema": ["loopx schema contract > contract.schema.json"],
    "status": ["loopx status", "loopx status g-2ce4", "loopx status --watch"],
    "worker": ["loopx worker --concurrency 4",
               "loopx worker --print-unit > ~/.config/systemd/user/loopx-worker.service"],
    "worker list": ["loopx worker list", "loopx --format json worker list --all"],
    "worker stop": ["loopx worker stop", "loopx worker stop w-3f2a --no-wait"],
    "config": ["loopx config set notify.command 'jq -c . >> ~/loopx-notifications.jsonl'"],
    "config set": ["loopx config set notify.webhook https://hooks.example.org/loopx",
                   "loopx config set executor.g-2ce4 codex"],
    "config unset": ["loopx config unset notify.webhook"],
    "config list": ["loopx config list --json"],
    "notify": ["loopx notify check"],
    "notify check": ["loopx notify check --goal-id g-2ce4 --json"],
    "notify list": ["loopx notify list --json"],
    "status-server": ["loopx status-server --port 8765"],
    "summary-all": ["loopx summary-all g-2ce4"],
    "todo": ["loopx todo add g-2ce4 --text 'Fit the forecast' --priority P1"],
    "todo add": ["loopx todo add g-2ce4 --text 'Fit the forecast' --priority P1 --depends-on t-51c",
                 "loopx todo add g-2ce4 --text 'Publish the report' --action publish"],
    "todo depend": ["loopx todo depend g-2ce4 --todo-id t-8d0 --on t-51c"],
    "todo list": ["loopx todo list g-2ce4 --ready"],
    "todo claim": ["loopx todo claim g-2ce4 --todo-id t-8d0 --agent a1 --ttl-seconds 2700"],
    "todo done": ["loopx todo done g-2ce4 --todo-id t-8d0 --note 'fitted; MAPE 4.1%'"],
    "todo block": ["loopx todo block g-2ce4 --todo-id t-8d0 --note 'needs the Q3 data'"],
    "todo reopen": ["loopx todo reopen g-2ce4 --todo-id t-8d0"],
    "turn": ["loopx turn g-2ce4 --executor shell", "loopx turn g-2ce4 --executor claude-code"],
}

# The seed's spellings, and the old underscore one of the status server.
_ALIASES = {"project_prompt": "project-prompt", "summary_all": "summary-all", "status_server": "status-server"}


def example_for(command_path: str) -> list[str]:
    """The example lines for ``command_path`` (``"loopx quota should-run"``), or []."""
    words = command_path.split()[1:]
    if words:
        words[0] = _ALIASES.get(words[0], words[0])
    return EXAMPLES.get(" ".join(words), [])
