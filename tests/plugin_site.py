"""Install test plugins into a throwaway site directory, through real entry points."""

from __future__ import annotations

import os
from pathlib import Path

PLUGINS = Path(__file__).resolve().parent / "plugins"


def plugin_env(tmp_path: Path, registry_url: str, **entry_points: str) -> dict:
    """Environment for a real ``loopx`` process with ``entry_points`` (name -> module) installed.

    Only those plugins load (``LOOPX_PLUGINS``), so installed capabilities change nothing.
    """
    site = tmp_path / "site"
    dist = site / "loopx_test_plugins-1.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: loopx-test-plugins\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[loopx]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPX_", "FAULTY_"))}
    env.update({"PYTHONPATH": os.pathsep.join([str(site), str(PLUGINS)]), "LOOPX_REGISTRY": registry_url,
                "LOOPX_PLUGIN_CACHE": "0", "LOOPX_PLUGINS": ",".join(entry_points)})
    return env


def new_goal(cli) -> str:
    """A goal in the registry of ``cli`` (a fixture calling ``loopx`` with a plugin's environment,
    its registry's URL as ``cli.url``); its id. Made in this process, by the user: what the tests
    check is what the plugins do with it (a ``loopx`` process to make it cost 0.25 s of CPU)."""
    from loopx.domain import goals
    from loopx.ledger.registry import Registry

    with Registry.open(cli.url) as reg:
        return goals.create(reg, "user", title="T")["id"]


def should_run(cli, goal_id: str, **env) -> tuple[dict, str]:
    """``quota should-run`` of ``goal_id`` through ``cli`` with ``env`` added: (the answer, stderr)."""
    import json

    p = cli("quota", "should-run", "--goal-id", goal_id, "--json", **env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), p.stderr
