"""The core calls plugins through pluggy's own calling (``loopx.seam.plugins.hooks()``), so pluggy's
wrapper hooks and ``firstresult`` work on LoopX's hooks, and a plugin's fault is still contained.

Real ``loopx`` processes with the test plugins of ``tests/plugins/loopx_wrapping`` installed
through real entry points."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.plugin_site import new_goal as _goal, plugin_env, should_run as _should_run

PLUGINS = {"plain": "loopx_wrapping:PLAIN", "late": "loopx_wrapping:LATE", "wrapper": "loopx_wrapping:WRAPPER",
           "oldstyle": "loopx_wrapping:OLDSTYLE"}


@pytest.fixture
def cli(tmp_path, sqlite_url):
    from loopx.ledger.registry import Registry

    Registry.open(sqlite_url).close()
    log = tmp_path / "calls.jsonl"

    def run(*args, plugins=tuple(PLUGINS), **extra):
        env = plugin_env(tmp_path, sqlite_url, **{k: PLUGINS[k] for k in plugins})
        log.write_text("")
        p = subprocess.run([sys.executable, "-m", "loopx", *args], capture_output=True, text=True, timeout=60,
                           env={**env, "WRAPPING_LOG": str(log), "LOOPX_HOOK_TIMEOUT": "60", **extra})
        assert "Traceback" not in p.stderr, p.stderr
        run.calls = [json.loads(line) for line in log.read_text().splitlines()]
        return p

    run.url = sqlite_url
    return run


def _actions(doc) -> list[str]:
    return doc["interaction_contract"]["cli_channel"]["next_cli_actions"]


def _seen(cli, what):
    return [c for c in cli.calls if c["what"] == what]


def test_a_wrapper_hook_sees_and_alters_the_contributed_actions(cli):
    g = _goal(cli)
    doc, err = _should_run(cli, g)
    assert err == "" and doc["decision"] == "run"
    lines = _actions(doc)
    run_id = lines[-1].split("--run-id ")[1].split()[0]  # the run the contract opened
    # The plain implementation's action, and the one the wrapper added after seeing it.
    assert any(line.endswith(f" -- loopx goal show {g}") for line in lines), lines
    assert any(line.endswith(f" -- loopx run show {run_id}") for line in lines), lines
    (saw,) = _seen(cli, "wrapper saw actions")
    assert saw["answers"] == [[{"argv": ["loopx", "goal", "show", g], "note": "from the plain hook"}]]
    # An old-style hookwrapper runs too, and may force the result.
    assert _seen(cli, "old-style wrapper saw actions")
    doc, err = _should_run(cli, _goal(cli), WRAPPING_OLDSTYLE="drop-plain")
    assert err == ""
    assert not any(" -- loopx goal show " in line for line in _actions(doc)), cli.calls
    assert any(" -- loopx run show " in line for line in _actions(doc))


def test_firstresult_stops_at_the_first_veto_and_a_wrapper_sees_it(cli):
    g = _goal(cli)
    doc, err = _should_run(cli, g, WRAPPING_VETO="veto")
    assert err == ""
    assert (doc["decision"], doc["reasons"]) == ("repair", ["wrapping.first"])
    assert "the first veto (seen by the wrapper)" in json.dumps(doc)
    assert _seen(cli, "plain veto asked") and not _seen(cli, "late veto asked")  # firstresult: never asked
    (saw,) = _seen(cli, "wrapper saw veto")
    assert saw["veto"]["reason"] == "wrapping.first"  # one answer, not a list of them
    # No first answer: the later implementation is asked and answers.
    doc, _ = _should_run(cli, g, WRAPPING_VETO="late")
    assert doc["reasons"] == ["wrapping.late"] and _seen(cli, "late veto asked")
    # A wrapper may overrule the implementations.
    doc, _ = _should_run(cli, g, WRAPPING_VETO="veto", WRAPPING_WRAPPER="soften")
    assert doc["decision"] == "run"


@pytest.mark.parametrize("mode", ["raise-before", "raise-after", "wrongtype", "notalist"])
def test_a_failing_wrapper_is_named_and_the_answers_pass_through(cli, mode):
    g = _goal(cli)
    doc, err = _should_run(cli, g, WRAPPING_WRAPPER=mode)
    assert doc["decision"] == "run"
    assert "plugin 'wrapper' loopx_contract_actions" in err and "skipped" in err, err
    assert ("exploded" in err) if mode.startswith("raise") else ("returned the wrong type" in err)
    lines = _actions(doc)
    assert any(line.endswith(f" -- loopx goal show {g}") for line in lines), lines  # the plain answer stands
    assert not any("loopx run show" in line for line in lines)


def test_a_raising_implementation_under_a_wrapper_is_contained(cli):
    g = _goal(cli)
    doc, err = _should_run(cli, g, WRAPPING_PLAIN="raise")
    assert doc["decision"] == "run"
    assert "plugin 'plain' loopx_contract_actions failed: RuntimeError: the plain actions exploded; skipped" in err
    (saw,) = _seen(cli, "wrapper saw actions")
    assert saw["answers"] == []  # the wrapper saw the call go on without it
    assert any(" -- loopx run show " in line for line in _actions(doc))


def test_a_raising_veto_under_a_wrapper_still_fails_closed(cli):
    g = _goal(cli)
    doc, err = _should_run(cli, g, WRAPPING_VETO="raise")
    assert (doc["decision"], doc["reasons"]) == ("repair", ["plugin_failed"])
    assert "'plain'" in err and "the plain veto exploded" in err and "failing closed" in err
    (saw,) = _seen(cli, "wrapper saw a veto fault")
    assert "the plain veto exploded" in saw["error"]
    assert not _seen(cli, "late veto asked")
    quota = json.loads(cli("quota", "show", "--goal-id", g, "--json").stdout)
    assert quota["open_runs"] == []
    # A wrapper that catches the fault and answers "no veto" does not make it a yes.
    doc, err = _should_run(cli, g, WRAPPING_VETO="raise", WRAPPING_WRAPPER="swallow")
    assert (doc["decision"], doc["reasons"]) == ("repair", ["plugin_failed"]) and "'plain'" in err
    assert _seen(cli, "wrapper saw a veto fault")


def test_every_hookspec_has_one_typed_facade_method():
    import importlib
    import inspect

    from loopx.seam import hookspecs
    from loopx.seam.hooks import Hooks

    for module_name in hookspecs.MODULES:
        module = importlib.import_module(module_name)
        for name, spec in inspect.getmembers(module, inspect.isfunction):
            if not name.startswith("loopx_"):
                continue
            method = getattr(Hooks, name.removeprefix("loopx_"), None)
            assert method is not None, f"loopx.seam.hooks.Hooks has no method for {name}"
            params = [p for p in inspect.signature(method).parameters.values()
                      if p.kind is p.POSITIONAL_OR_KEYWORD and p.name != "self"]
            wanted = [p for p in inspect.signature(spec).parameters if p != "register"]
            assert [p.name for p in params] == wanted, name
            assert name in (method.__doc__ or ""), f"Hooks.{method.__name__} does not name its hookspec"
            assert inspect.signature(method).return_annotation != inspect.Signature.empty, name


def test_no_hook_is_called_by_name_outside_the_facade():
    import re

    from tests.conftest import ROOT

    offenders = []
    for path in (ROOT / "loopx").rglob("*.py"):
        if path.name == "hooks.py" and path.parent.name == "seam":
            continue
        text = path.read_text()
        for pattern in (r"\.hook\.loopx_\w+", r"getattr\([^)]*\.hook\b", r"get_hookimpls\(", r"\bpm\.hook\b"):
            offenders += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in re.finditer(pattern, text)]
    assert offenders == []


def test_pluggy_is_used_as_documented():
    # Containment registers a stand-in for each plugin (loopx/seam/hooks.py): nothing assigns to what
    # pluggy hands out (HookImpl is final, its fields Final) or reaches into its private names.
    import ast
    import re

    from tests import source_trees
    from tests.conftest import ROOT

    fields = {"function", "plugin", "plugin_name", "opts", "argnames", "kwargnames", "wrapper", "hookwrapper",
              "tryfirst", "trylast", "optionalhook", "specname"}
    offenders = []
    for path in (ROOT / "loopx").rglob("*.py"):
        text = path.read_text()
        for node in source_trees.nodes(source_trees.parse(text)):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr in fields:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: assigns .{t.attr}")
        private = r"\.(_name2plugin|_hookimpls|_hookexec|_inner_hookexec|_add_hookimpl|_remove_plugin|_multicall)\b"
        offenders += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in re.finditer(private, text)]
        offenders += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in re.finditer(r"\bpluggy\._\w+", text)]
    assert offenders == []


def test_a_registered_plugin_is_the_object_given_and_its_faults_are_contained(capsys):
    from loopx import hookimpl
    from loopx.seam import plugins

    class Broken:
        @hookimpl
        def loopx_register_error_codes(self, register):
            register("broken_probe.half", "registered before the hook raised")
            raise RuntimeError("boom")

    pm = plugins.get_plugin_manager()
    obj = Broken()
    name = pm.register(obj, name="broken-probe")
    try:
        assert pm.get_plugin(name) is obj and pm.is_registered(obj) and pm.get_name(obj) == name
        assert (name, obj) in pm.list_name_plugin() and obj in pm.get_plugins()
        assert [c.name for c in pm.get_hookcallers(obj)] == ["loopx_register_error_codes"]
        with pytest.raises(ValueError):
            pm.register(obj, name="broken-probe-again")
        made = plugins.hooks().register_error_codes()
        assert [r for r in made if r.plugin == name] == []  # half done: nothing of it counts
        assert any(f[:2] == (name, "loopx_register_error_codes") and "boom" in f[2] for f in plugins.faults)
        assert "plugin 'broken-probe' loopx_register_error_codes failed: RuntimeError: boom" in capsys.readouterr().err
        # A caller that leaves the plugin out does not ask it.
        plugins.faults.clear()
        pm.subset_hook_caller("loopx_register_error_codes", [obj])(register=lambda *a: None)
        assert plugins.faults == []
    finally:
        assert pm.unregister(obj) is obj
    assert not pm.is_registered(obj) and pm.get_plugin(name) is None
    assert pm.register(obj, name="broken-probe") == "broken-probe"  # registered again, once gone
    assert pm.unregister(name="broken-probe") is obj
