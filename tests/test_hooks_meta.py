"""The plugin seam is a documented contract: every hook is specified, documented and tested, and
every hook fires through the real CLI with sane arguments (a recording plugin,
tests/plugins/loopx_recorder, installed through a real entry point)."""

import importlib
import inspect
import json
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.plugin_site import PLUGINS, plugin_env

from loopx.seam import hookspecs


def _specs():
    for module_name in hookspecs.MODULES:
        module = importlib.import_module(module_name)
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("loopx_") and fn.__module__ == module_name:
                yield module_name, name, fn


def _implemented_hooks() -> set[str]:
    """Hook names implemented anywhere in the code we ship (core, plugins, examples)."""
    found = set()
    for base in ("loopx", "plugins", "examples"):
        for path in (ROOT / base).rglob("*.py"):
            if "tests" in path.parts or path.parts[-2:-1] == ("hookspecs",):
                continue
            found |= set(re.findall(r"@(?:loopx\.)?hookimpl[^\n]*\n\s*def (loopx_\w+)\(", path.read_text()))
    return found


def test_pluggy_is_shown_every_hookspec_and_nothing_else():
    """Each hookspec module answers ``dir()`` with its specifications (``spec_names``), the names
    pluggy's ``add_hookspecs`` looks at: every ``loopx_*`` function the module defines, so the
    plugin manager specifies each of them."""
    from loopx.seam import plugins

    pm = plugins.get_plugin_manager()
    for module_name in hookspecs.MODULES:
        module = importlib.import_module(module_name)
        defined = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and n.startswith("loopx_"))
        assert defined and dir(module) == defined, module_name
        for name in defined:
            assert getattr(pm.hook, name).spec is not None, name


def test_every_hookspec_has_a_docstring():
    specs = list(_specs())
    assert len(specs) >= 7
    for module_name, name, fn in specs:
        assert (fn.__doc__ or "").strip(), f"{module_name}.{name} has no docstring"


def test_every_hookspec_is_documented_for_plugin_authors():
    guide = (ROOT / "docs" / "plugins.md").read_text()
    missing = [name for _, name, _ in _specs() if name not in guide]
    assert not missing, f"docs/plugins.md does not document: {missing}"


def test_every_implemented_hook_has_a_test():
    spec_names = {name for _, name, _ in _specs()}
    implemented = _implemented_hooks() & spec_names
    test_text = "\n".join(p.read_text() for base in ("tests", "plugins") for p in (ROOT / base).rglob("test_*.py")
                          if p.name != "test_hooks_meta.py")
    untested = sorted(h for h in implemented if h not in test_text)
    assert not untested, f"hooks implemented but named by no test: {untested}"


def test_no_implementation_of_an_unknown_hook():
    spec_names = {name for _, name, _ in _specs()}
    unknown = sorted(_implemented_hooks() - spec_names)
    assert not unknown, f"implementations of hooks that have no spec: {unknown}"


def test_plugin_implementing_unknown_hook_is_reported_by_name(tmp_path, monkeypatch):
    import subprocess
    import sys

    pkg = tmp_path / "site"
    (pkg / "bad_plugin").mkdir(parents=True)
    (pkg / "bad_plugin" / "__init__.py").write_text(
        "from loopx import hookimpl\n\n@hookimpl\ndef loopx_no_such_hook():\n    pass\n")
    (pkg / "broken_plugin").mkdir()
    (pkg / "broken_plugin" / "__init__.py").write_text("raise RuntimeError('boom at import')\n")
    dist = pkg / "bad_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: bad-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[loopx]\nbad = bad_plugin\nbroken = broken_plugin\n")
    env = {"PYTHONPATH": str(pkg), "LOOPX_REGISTRY": str(tmp_path / "r.db"), "LOOPX_PLUGIN_CACHE": "0",
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "loopx", "plugins", "--json"], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    assert "plugin 'bad'" in p.stderr and "loopx_no_such_hook" in p.stderr
    assert "plugin 'broken'" in p.stderr and "boom at import" in p.stderr
    import json

    listed = {x["name"]: x for x in json.loads(p.stdout)}
    assert "error" in listed["bad"] and "error" in listed["broken"]
    # The core keeps working with the broken plugins installed, and the block-list silences them.
    from loopx.ledger.registry import Registry

    Registry.open(str(tmp_path / "r.db")).close()  # read commands need an existing registry
    env["LOOPX_DISABLE_PLUGINS"] = "bad,broken"
    p = subprocess.run([sys.executable, "-m", "loopx", "project_prompt", "list"], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == ""
    env.pop("LOOPX_DISABLE_PLUGINS")
    env["LOOPX_PLUGINS"] = "none-of-them"
    p = subprocess.run([sys.executable, "-m", "loopx", "project_prompt", "list"], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == ""


# --- every hook fires through the CLI -------------------------------------------------------------


class World:
    """What the scenario did: the registry, its goals, each command's output, the calls recorded."""

    def __init__(self, tmp):
        self.url = str(tmp / "registry.db")
        self.env = plugin_env(tmp, self.url, recorder="loopx_recorder")
        self.env["RECORDER_LOG"] = str(tmp / "calls.jsonl")
        self.env["LOOPX_HOOK_TIMEOUT"] = "60"  # a loaded machine must not turn a slow hook into a fault
        self.log = tmp / "calls.jsonl"
        self.out: dict[str, subprocess.CompletedProcess] = {}

    def run(self, label, *args, code=0):
        p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", *args], env=self.env,
                           capture_output=True, text=True, timeout=120, cwd=self.log.parent)
        assert "Traceback" not in p.stderr and "warning: plugin 'recorder'" not in p.stderr, p.stderr
        assert p.returncode == code, (args, p.returncode, p.stdout, p.stderr)
        self.out[label] = p
        return json.loads(p.stdout) if p.stdout.strip() else None

    def calls(self, hook):
        return [c for c in map(json.loads, self.log.read_text().splitlines()) if c["hook"] == hook]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One scenario through the CLI that gives every hook a reason to fire."""
    w = World(tmp_path_factory.mktemp("hooks"))
    w.goal = w.run("create", "project-prompt", "create", "--title", "Meta", "--description", "d", "--capability", "recorder")["id"]
    w.run("todo", "todo", "add", w.goal, "--text", "work")
    w.turn = w.run("turn", "turn", "--goal-id", w.goal, "--executor", "recorder", code=3)  # partial
    w.capabilities = w.run("capabilities", "capabilities", "list")
    w.ping = w.run("ping", "recorder-ping", "--goal-id", w.goal)
    w.run("refuse", "recorder-ping", "--goal-id", w.goal, "--refuse", code=2)
    w.other = w.run("create other", "project-prompt", "create", "--title", "Needs you", "--description", "d")["id"]
    w.gate = w.run("gate", "gate", "add", w.other, "--title", "Deploy?", "--scope", "production")
    w.run("notify", "notify", "check")
    # Decided after the notifications: the recorder's goal's gate, and one on a goal it does not serve.
    w.own_gate = w.run("own gate", "gate", "add", w.goal, "--title", "Ship?", "--blocks", "all")
    w.run("approve", "gate", "approve", "--goal-id", w.goal, "--gate-id", w.own_gate["id"])
    w.run("reject other", "gate", "reject", "--goal-id", w.other, "--gate-id", w.gate["id"])
    return w


def _registered(w, hook, signature):
    calls = w.calls(hook)
    assert calls and {c["signature"] for c in calls} == {signature}, calls
    return calls


def check_stores(w):
    calls = _registered(w, "loopx_register_stores", "(scheme, factory)")
    assert len({c["pid"] for c in calls}) >= 5  # each process that opened the registry asked once


def check_event_committed(w):
    calls = w.calls("loopx_event_committed")
    assert all(c["registry"].endswith("registry.db") for c in calls), calls
    events = [e for c in calls for e in c["events"]]
    assert any(e["kind"] == "goal.created" and e["goal_id"] == w.goal for e in events), events
    assert any(e["kind"] == "recorder.noted" and e["goal_id"] == w.goal and e["actor"] == "user" for e in events)
    assert any(e["kind"].startswith("run.") and e["goal_id"] == w.goal for e in events)
    mine = [e["seq"] for e in events if e["goal_id"] == w.goal]
    assert mine == sorted(mine) and len(set(mine)) == len(mine)  # each committed event told once, in order


def check_contract_veto(w):
    calls = w.calls("loopx_contract_veto")
    assert [(c["goal_id"], c["status"], c["title_read"]) for c in calls] == [(w.goal, "open", "Meta")]


def check_contract_actions(w):
    (call,) = w.calls("loopx_contract_actions")
    assert call["goal_id"] == w.goal and call["run_id"] == w.turn["run_id"]
    assert call["remaining"] is None or isinstance(call["remaining"], dict)
    steps = w.turn["contract"]["interaction_contract"]["cli_channel"]["next_cli_actions"]
    assert any(s.endswith(f" -- loopx recorder-ping --goal-id {w.goal}") for s in steps), steps


def check_register_executors(w):
    _registered(w, "loopx_register_executors", "(name, provider)")
    (ran,) = w.calls("run_turn")
    assert (ran["run_id"], ran["decision"]) == (w.turn["run_id"], "run")
    assert ran["steps"][-1] == "finish" and "do" in ran["steps"]
    assert w.turn["outcome"] == "partial" and "recorded the contract" in w.turn["handoff"]


def check_register_capabilities(w):
    _registered(w, "loopx_register_capabilities", "(declaration)")
    listed = {c["name"]: c for c in w.capabilities}
    assert listed["recorder"]["plugin"] == "recorder", listed["recorder"]


def check_register_commands(w):
    calls = w.calls("loopx_register_commands")
    assert len(calls) >= 2 and all(c["builtin_quota"] for c in calls), calls  # the root group, built-ins loaded
    assert w.ping == {"pinged": w.goal}


def check_register_event_kinds(w):
    _registered(w, "loopx_register_event_kinds",
                "(name, apply, writers=('capability',), guard=None, formerly=())")
    history = w.run("history", "history", "--goal-id", w.goal)
    assert [e["actor"] for e in history if e["kind"] == "recorder.noted"] == ["user"]


def check_register_error_codes(w):
    _registered(w, "loopx_register_error_codes", "(code, description='')")
    p = w.out["refuse"]
    assert p.returncode == 2
    assert json.loads(p.stdout) == {"error": {"code": "recorder.refused", "message": "the recorder refuses, as asked"}}


def check_notify(w):
    (call,) = w.calls("loopx_notify")
    n = call["notification"]
    assert (n["schema"], n["goal_id"], n["reason"]) == ("loopx.notification/1", w.other, "gate_pending"), n
    assert n["command"] == f"loopx gate approve --goal-id {w.other} --gate-id {w.gate['id']}"
    assert n["registry"].endswith("registry.db")


def check_gate_decided(w):
    # Only for the goal the recorder serves, in the decision's transaction, with the gate as decided.
    (call,) = w.calls("loopx_gate_decided")
    assert (call["goal_id"], call["gate_id"], call["status"], call["decision"], call["actor"]) == (
        w.goal, w.own_gate["id"], "approved", "approve", "user"), call
    events = w.run("history", "history", w.goal)
    kinds = [e["kind"] for e in (events.get("events") if isinstance(events, dict) else events)]
    assert kinds.index("capability.state_set", kinds.index("gate.approved")) > kinds.index("gate.approved"), kinds


CHECKS = {
    "loopx_register_stores": check_stores,
    "loopx_event_committed": check_event_committed,
    "loopx_contract_veto": check_contract_veto,
    "loopx_contract_actions": check_contract_actions,
    "loopx_register_executors": check_register_executors,
    "loopx_register_capabilities": check_register_capabilities,
    "loopx_register_commands": check_register_commands,
    "loopx_register_event_kinds": check_register_event_kinds,
    "loopx_register_error_codes": check_register_error_codes,
    "loopx_notify": check_notify,
    "loopx_gate_decided": check_gate_decided,
}

SPECS = sorted(name for _, name, _ in _specs())


def test_the_recorder_implements_every_hook_and_imports_only_the_api():
    from loopx import api

    source = (PLUGINS / "loopx_recorder" / "__init__.py").read_text()
    missing = [name for name in SPECS if not re.search(rf"@hookimpl\ndef {name}\(", source)]
    assert not missing, f"tests/plugins/loopx_recorder implements no {missing}"
    assert api.testing.check_plugin_imports(PLUGINS / "loopx_recorder") == []


@pytest.mark.parametrize("hook", SPECS)
def test_every_hook_fires_through_the_cli_with_sane_arguments(world, hook):
    # The hooks come from the code: a new hookspec fails here until the recorder implements it and
    # the scenario above fires it.
    assert hook in CHECKS, f"{hook} is not exercised: add it to tests/plugins/loopx_recorder and CHECKS"
    assert world.calls(hook), f"{hook} never fired in the scenario"
    CHECKS[hook](world)
