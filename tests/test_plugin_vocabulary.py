"""A plugin extends LoopX through hooks, not core edits: its own event kind (replayed like core
events), error code, command, contract action and veto. The plugin (tests/plugins/loopx_probe)
is written only against ``loopx.api`` and installed through a real entry point."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent / "plugins"))

from tests.plugin_site import PLUGINS, plugin_env


@pytest.fixture
def probe(tmp_path, sqlite_url):
    env = plugin_env(tmp_path, sqlite_url, probe="loopx_probe")

    def run(*args, actor=None):
        e = dict(env, **({"LOOPX_ACTOR": actor} if actor else {}))
        p = subprocess.run([sys.executable, "-m", "loopx", *args], env=e, capture_output=True, text=True, timeout=60)
        return p

    run.url = sqlite_url
    run.env = env
    return run


def test_the_probe_plugin_imports_only_the_api():
    from loopx import api

    assert api.testing.check_plugin_imports(PLUGINS / "loopx_probe") == []


@pytest.mark.slow
def test_a_plugin_event_kind_is_written_shown_and_replayed(probe, monkeypatch):
    g = json.loads(probe("project_prompt", "create", "--title", "T", "--json").stdout)["id"]
    p = probe("probe", "note", "--goal-id", g, "--text", "first", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {"notes": ["first"]}
    run = json.loads(probe("quota", "should-run", "--goal-id", g, "--json").stdout)["interaction_contract"]["run_id"]
    assert probe("probe", "note", "--goal-id", g, "--text", "second", actor="executor").returncode == 0
    history = json.loads(probe("history", "--goal-id", g, "--json").stdout)
    noted = [e for e in history if e["kind"] == "probe.noted"]
    assert [(e["actor"], e["body"]["text"]) for e in noted] == [("user", "first"), ("executor", "second")]
    assert run
    # Replayed into an empty registry, the ledger gives the same state, the plugin's rows included.
    from loopx import api

    with api.open_registry(probe.url) as reg, reg.read() as tx:
        live = api.goals.snapshot(tx, g)
        assert api.state.get(tx, g, "probe") == {"notes": ["first", "second"]}
        events = api.goals.events(tx, g)
    # This process has no probe plugin: its events replay as no-ops (history stays readable).
    without, _ = api.goals.replay(events)
    assert [r for r in without["capability_state"] if r["namespace"] == "probe"] == []
    code = ("import json, sys; from loopx import api\n"
            "with api.open_registry() as reg, reg.read() as tx:\n"
            "    ev = api.goals.events(tx, sys.argv[1]); live = api.goals.snapshot(tx, sys.argv[1])\n"
            "print(json.dumps(api.goals.replay(ev)[0] == live))\n")
    p = subprocess.run([sys.executable, "-c", code, g], env=probe.env, capture_output=True, text=True)
    assert p.stdout.strip() == "true", p.stderr
    assert live["capability_state"]


def test_a_plugin_error_code_exits_2_with_the_json_error(probe):
    g = json.loads(probe("project_prompt", "create", "--title", "T", "--json").stdout)["id"]
    before = probe("history", "--goal-id", g, "--json").stdout
    p = probe("probe", "note", "--goal-id", g, "--text", "LOUD", "--json")
    assert p.returncode == 2
    assert json.loads(p.stdout) == {"error": {"code": "probe.too_loud", "message": "'LOUD' is shouted; say it quietly"}}
    p = probe("probe", "note", "--goal-id", g, "--text", "LOUD")
    assert p.returncode == 2 and p.stderr.strip().endswith("[probe.too_loud]") and "Traceback" not in p.stderr
    assert probe("history", "--goal-id", g, "--json").stdout == before


@pytest.mark.slow
def test_a_plugin_contract_action_and_veto(probe):
    # The goal uses the probe capability: only such goals get its action and its veto.
    g = json.loads(probe("project_prompt", "create", "--title", "T", "--capability", "probe", "--json").stdout)["id"]
    other = json.loads(probe("project_prompt", "create", "--title", "U", "--json").stdout)["id"]
    doc = json.loads(probe("quota", "should-run", "--goal-id", g, "--json").stdout)
    assert doc["decision"] == "run"
    lines = doc["interaction_contract"]["cli_channel"]["next_cli_actions"]
    assert f"-- loopx probe note --goal-id {g} --text seen" in lines[0]  # a do step, through loopx exec
    assert "probe: say you saw it" in doc["interaction_contract"]["agent_channel"]["notes"]
    run = doc["interaction_contract"]["run_id"]
    assert probe("run", "finish", "--run-id", run, "--outcome", "partial").returncode == 0
    assert probe("probe", "note", "--goal-id", g, "--text", "halt").returncode == 0
    doc = json.loads(probe("quota", "should-run", "--goal-id", g, "--json").stdout)
    assert (doc["decision"], doc["reasons"]) == ("repair", ["probe.halted"])
    assert doc["interaction_contract"]["cli_channel"]["next_cli_actions"] == [
        f"loopx probe note --goal-id {g} --text go"]
    # A goal that does not use the capability is neither given its action nor vetoed by it.
    assert probe("probe", "note", "--goal-id", other, "--text", "halt").returncode == 0
    doc = json.loads(probe("quota", "should-run", "--goal-id", other, "--json").stdout)
    assert doc["decision"] == "run", doc
    assert not any("loopx probe note" in a for a in doc["interaction_contract"]["cli_channel"]["next_cli_actions"])
    assert probe("probe", "note", "--goal-id", g, "--text", "go").returncode == 0
    assert json.loads(probe("quota", "should-run", "--goal-id", g, "--json").stdout)["decision"] == "run"


def test_a_plugin_kind_refuses_roles_it_did_not_name(probe):
    from loopx import api
    from loopx.seam import plugins
    from loopx.api import LoopxError

    class Probe:
        pass

    import loopx_probe  # noqa: F401  (tests/plugins is on sys.path through PYTHONPATH below)

    assert probe  # registry url
    pm = plugins.get_plugin_manager()
    pm.register(loopx_probe, name="probe-inproc")
    try:
        with api.open_registry(probe.url) as reg:
            g = api.goals.create(reg, "user", title="T")["id"]
            with pytest.raises(LoopxError) as err:
                reg.mutate("capability:other", lambda w: w.emit("probe.noted", {"text": "x"}), goal_id=g)
            assert err.value.code == "actor_forbidden"
    finally:
        pm.unregister(name="probe-inproc")


@pytest.mark.parametrize("how", [[], ["--whole"]])
@pytest.mark.slow
def test_a_plugin_acts_only_as_the_capability_it_registered(tmp_path, sqlite_url, how):
    # Two real plugins installed through entry points: probe (capability "probe") and self_repair.
    env = plugin_env(tmp_path, sqlite_url, probe="loopx_probe", self_repair="loopx_self_repair.plugin")

    def run(*args):
        return subprocess.run([sys.executable, "-m", "loopx", *args], env=env, capture_output=True, text=True,
                              timeout=60)

    g = json.loads(run("project_prompt", "create", "--title", "T", "--json").stdout)["id"]
    p = run("probe", "tag", "--goal-id", g, "--as", "probe", *how, "--json")
    assert p.returncode == 0 and json.loads(p.stdout) == {"tag": "x"}, p.stderr
    history = lambda: json.loads(run("history", "--goal-id", g, "--json").stdout)
    assert history()[-1]["actor"] == "capability:probe"
    before = history()
    # Another plugin's capability (even in the namespace that capability owns), or a name that
    # stands for no capability at all: refused with one stable code, nothing written.
    for name, namespace in (("self_repair", "self_repair"), ("self_repair", "probe"), ("user", "probe"),
                            ("core", "probe")):
        p = run("probe", "tag", "--goal-id", g, "--as", name, "--namespace", namespace, *how, "--json")
        assert p.returncode == 2, (name, p.stdout, p.stderr)
        error = json.loads(p.stdout)["error"]
        assert error["code"] == "actor_forbidden", (name, error)
        assert history() == before
    assert "plugin 'probe' may act only as the capabilities it registered (probe)" in json.loads(
        run("probe", "tag", "--goal-id", g, "--as", "self_repair", *how, "--json").stdout)["error"]["message"]
    # The capability that registered it still writes as itself.
    assert run("self-repair", "check", "--goal-id", g).returncode == 0


def test_a_plugin_gives_its_command_its_own_help_example(probe):
    p = probe("probe", "note", "--help")
    assert p.returncode == 0
    assert p.stdout.rstrip().endswith("Examples:\n  loopx probe note --goal-id g-2ce4 --text seen\n"
                                      "  loopx probe note --goal-id g-2ce4 --text halt")
