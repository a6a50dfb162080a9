"""The plugin as users meet it: installed, listed, disabled without breaking the core, packaged."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[1]
REPO = PLUGIN.parents[1]


def run(*args, env_extra=None, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update({"LOOPX_REGISTRY": str(tmp_path / "r.db"), **(env_extra or {})})
    p = subprocess.run([sys.executable, "-m", "loopx", *args], env=env, capture_output=True, text=True, timeout=120)
    return p


def test_installed_plugin_is_listed_with_its_capability(tmp_path):
    assert run("registry", "init", tmp_path=tmp_path).returncode == 0  # creates the registry
    p = run("plugins", "--json", tmp_path=tmp_path)
    assert p.returncode == 0, p.stderr
    listed = {x["name"]: x for x in json.loads(p.stdout)}
    me = listed["self_repair"]
    assert me["distribution"].startswith("loopx-self-repair ")
    assert {"loopx_register_capabilities", "loopx_register_commands", "loopx_contract_veto"} <= set(me["hooks"])
    p = run("capabilities", "show", "self_repair", "--json", tmp_path=tmp_path)
    assert p.returncode == 0, p.stderr
    cap = json.loads(p.stdout)
    assert cap["owns"] == ["self_repair"] and cap["actions"] == ["fix"] and cap["commands"] == ["self-repair"]
    assert cap["doc"] == "docs/capabilities/self_repair.md" and cap["plugin"] == "self_repair"
    assert run("self-repair", "check", "--json", tmp_path=tmp_path).returncode == 0


@pytest.mark.slow
def test_disabled_plugin_removes_its_commands_and_leaves_the_core_working(tmp_path):
    off = {"LOOPX_DISABLE_PLUGINS": "self_repair"}
    p = run("self-repair", "check", env_extra=off, tmp_path=tmp_path)
    assert p.returncode == 2 and "No such command 'self-repair'" in p.stderr
    assert "self-repair" not in run("--help", env_extra=off, tmp_path=tmp_path).stdout
    names = [x["name"] for x in json.loads(run("plugins", "--json", env_extra=off, tmp_path=tmp_path).stdout)]
    assert "self_repair" not in names
    caps = json.loads(run("capabilities", "list", "--json", env_extra=off, tmp_path=tmp_path).stdout)
    assert "self_repair" not in [c["name"] for c in caps]
    # The core keeps working, and so does a registry self-repair once wrote to.
    g = json.loads(run("project_prompt", "create", "--title", "T", "--json", tmp_path=tmp_path).stdout)["id"]
    import sqlite3

    con = sqlite3.connect(tmp_path / "r.db")
    con.execute("UPDATE goals SET revision = 0 WHERE id = ?", (g,))
    con.commit()
    con.close()
    assert run("self-repair", "fix", "--json", tmp_path=tmp_path).returncode == 0
    p = run("quota", "should-run", "--goal-id", g, "--agent", "a", "--json", env_extra=off, tmp_path=tmp_path)
    assert p.returncode == 0 and json.loads(p.stdout)["decision"] == "run", p.stderr
    p = run("history", "--goal-id", g, "--json", env_extra=off, tmp_path=tmp_path)
    # Kept in the ledger and understood: a repair is the core's vocabulary (the core replays it).
    [repaired] = [e for e in json.loads(p.stdout) if e["kind"] == "self_repair.repaired"]
    assert "unknown_kind" not in repaired, repaired
    assert "self-repair" in run("--help", tmp_path=tmp_path).stdout


@pytest.mark.slow
def test_without_the_plugin_its_repairs_still_read_replay_and_copy(tmp_path):
    """A repair is the core's vocabulary: with the plugin disabled, history shows the event as
    understood, and `registry copy` carries it (hash-chained, replayed through the core's repair
    API) instead of refusing the goal."""
    off = {"LOOPX_DISABLE_PLUGINS": "self_repair"}
    later = tmp_path / "clock"
    later.write_text("600")  # ten minutes on: the claim below has expired

    def ok(*args, env_extra=None):
        p = run(*args, "--json", env_extra=env_extra, tmp_path=tmp_path)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
        return json.loads(p.stdout)

    g = ok("project-prompt", "create", "--title", "T")["id"]
    t = ok("todo", "add", "--goal-id", g, "--text", "x")["id"]
    ok("todo", "claim", "--goal-id", g, "--todo-id", t, "--agent", "gone", "--ttl-seconds", "60")
    fixed = ok("self-repair", "fix", "--goal-id", g, env_extra={"LOOPX_CLOCK_OFFSET_FILE": str(later)})
    assert [r["code"] for r in fixed["repaired"]] == ["stale_lease"], fixed
    [repaired] = [e for e in ok("history", "--goal-id", g, env_extra=off) if e["kind"] == "self_repair.repaired"]
    assert repaired["body"]["repair"] == "lease_released" and "unknown_kind" not in repaired, repaired
    target = tmp_path / "copy.db"
    p = run("registry", "copy", "--from", str(tmp_path / "r.db"), "--to", str(target), "--json", env_extra=off,
            tmp_path=tmp_path)
    assert p.returncode == 0, (p.stdout, p.stderr)
    copied = run("history", "--goal-id", g, "--json", env_extra={**off, "LOOPX_REGISTRY": str(target)},
                 tmp_path=tmp_path)
    assert "self_repair.repaired" in [e["kind"] for e in json.loads(copied.stdout)], copied
    todo = json.loads(run("todo", "list", "--goal-id", g, "--json", env_extra={**off, "LOOPX_REGISTRY": str(target)},
                          tmp_path=tmp_path).stdout)[0]
    assert todo["claim"] is None, todo  # the repair's effect, replayed without the plugin


def test_the_shipped_skill_is_the_repository_skill():
    shipped = (PLUGIN / "loopx_self_repair" / "SKILL.md").read_text(encoding="utf-8")
    assert shipped == (REPO / "skills" / "loopx-self-repair" / "SKILL.md").read_text(encoding="utf-8")
    head = shipped.split("---")[1]
    assert "name: loopx-self-repair" in head and "description:" in head


def test_every_detector_is_taught_by_the_skill_and_the_doc():
    from loopx_self_repair import detectors

    skill = (REPO / "skills" / "loopx-self-repair" / "SKILL.md").read_text(encoding="utf-8")
    doc = (REPO / "docs" / "capabilities" / "self_repair.md").read_text(encoding="utf-8")
    for code in detectors.CODES:
        assert f"`{code}`" in skill, code
        assert f"`{code}`" in doc, code


def test_the_doc_matches_the_declaration():
    from loopx.testing import capability_doc_problems

    assert capability_doc_problems("self_repair", REPO) == []


@pytest.mark.slow
def test_the_wheel_ships_the_plugin_and_its_skill(tmp_path):
    # As `pip install ./plugins/self_repair` builds it (in an isolated build environment).
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                        "-w", str(tmp_path), str(PLUGIN)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    wheel = next(tmp_path.glob("loopx_self_repair-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert "loopx_self_repair/SKILL.md" in names and "loopx_self_repair/plugin.py" in names
        ep = next(n for n in names if n.endswith("entry_points.txt"))
        assert "[loopx]" in z.read(ep).decode() and "self_repair = loopx_self_repair.plugin" in z.read(ep).decode()
