"""The one way a test makes a goal: :func:`make_goal`, through the Python API or the CLI.

``via`` says which path, and so what the goal is made through:

* a :class:`loopx.ledger.registry.Registry`: the domain functions (``goals.create``, ``todos.add``...);
* a CLI caller (the ``loopx`` / ``loopx_proc`` fixtures, ``loopx_cli`` of :mod:`loopx.testing`):
  ``loopx project-prompt create``, ``todo add``, ``action add``, ``quota set``, ``gate add``;
* a registry URL (``str``): the same commands, each a real ``loopx`` process.

Every option is the same on both paths, so a test can make its goal the way it tests it and
nothing else differs. What was made comes back as ``{"goal": id, "todos": [ids], "gates": [ids]}``.
"""

from __future__ import annotations

import subprocess
import sys


def make_goal(via, *, title: str = "a goal", description: str | None = None, criteria=(), todo_texts=(),
              todo_priority: str = "P2", acts: dict | None = None, gates=(), limits: dict | None = None,
              parallel: bool = False, capabilities=(), env: dict | None = None) -> dict:
    """Make a goal with what a test needs, through ``via`` (see the module docstring).

    ``criteria``: success criteria; ``todo_texts``: a todo per text, in order, each of
    ``todo_priority``; ``acts``:
    ``{name: argv}`` allowed actions; ``gates``: a pending gate per ``{"title", "scope",
    "blocks"}`` (each optional: "Needs a look", ``other``, ``all``); ``limits``: quota limits
    (``{"max_wall_seconds": 3, "cadence_seconds": 3600}``); ``parallel``: parallel runs allowed;
    ``capabilities``: the installed capabilities the goal uses. ``env``: extra environment for the CLI path (e.g. an actor).
    """
    gates = [{"title": "Needs a look", "scope": "other", "blocks": "all", **g} for g in gates]
    if _is_registry(via):
        return _through_api(via, title=title, description=description, criteria=list(criteria),
                            todo_texts=list(todo_texts), todo_priority=todo_priority, acts=acts or {}, gates=gates,
                            limits=limits or {}, parallel=parallel,
                            capabilities=list(capabilities))
    call = _caller(via, env)
    create = ["project-prompt", "create", "--title", title, *(["--description", description] if description else []),
              *[a for c in criteria for a in ("--criterion", c)], *(["--parallel-runs"] if parallel else []),
              *[a for c in capabilities for a in ("--capability", c)], "--json"]
    g = _ok(call(*create))["id"]
    if limits:
        _ok(call("quota", "set", "--goal-id", g,
                 *[a for k, v in limits.items() for a in (f"--{k.replace('_', '-')}", str(v))], "--json"))
    made = [_ok(call("todo", "add", "--goal-id", g, "--text", t, "--priority", todo_priority, "--json"))["id"]
            for t in todo_texts]
    for name, argv in (acts or {}).items():
        _ok(call("action", "add", "--goal-id", g, "--name", name, "--json", "--", *argv))
    held = [_ok(call("gate", "add", "--goal-id", g, "--title", x["title"], "--scope", x["scope"],
                     "--blocks", x["blocks"], "--json"))["id"] for x in gates]
    return {"goal": g, "todos": made, "gates": held}


def _is_registry(via) -> bool:
    from loopx.ledger.registry import Registry

    return isinstance(via, Registry)


def _through_api(reg, *, title, description, criteria, todo_texts, todo_priority, acts, gates, limits,
                 parallel, capabilities) -> dict:
    from loopx.domain import actions, todos
    from loopx.views import quota
    from loopx.domain import gates as gate_api
    from loopx.domain import goals

    extra = {"description": description} if description else {}
    g = goals.create(reg, "user", title=title, criteria=criteria, parallel_runs=parallel, capabilities=capabilities,
                     **extra)["id"]
    if limits:
        quota.set_limits(reg, "user", goal_id=g, values=limits)
    made = [todos.add(reg, "user", goal_id=g, text=t, priority=todo_priority)["id"] for t in todo_texts]
    for name, argv in acts.items():
        actions.add(reg, "user", goal_id=g, name=name, argv=argv)
    held = [gate_api.add(reg, "user", goal_id=g, title=x["title"], scope=x["scope"], blocks=x["blocks"])["id"]
            for x in gates]
    return {"goal": g, "todos": made, "gates": held}


def _caller(via, env):
    """``call(*args)`` -> a result with ``code``, ``out``, ``err`` and ``json``."""
    if isinstance(via, str):
        from loopx.testing import CliResult
        from tests.conftest import loopx_env

        def call(*args):
            p = subprocess.run([sys.executable, "-m", "loopx", *map(str, args)], env=loopx_env(via, **(env or {})),
                               capture_output=True, text=True, timeout=120)
            return CliResult(p.returncode, p.stdout, p.stderr)

        return call
    return (lambda *args: via(*args, env=env)) if env else via


def _ok(result) -> dict:
    assert result.code == 0, result
    return result.json


def workspace_of(url: str, goal_id: str):
    """The goal's workspace (where its steps run and write, loopx/domain/workspace.py), by ``loopx
    workspace show`` in this process (tests/cli_helpers.py): a test polls it while real workers run."""
    from pathlib import Path

    from tests.cli_helpers import in_process

    r = in_process(url)("--format", "json", "workspace", "show", goal_id)
    assert r.code == 0, r
    return Path(r.json["workspace"])
