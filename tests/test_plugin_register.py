"""The ``register`` callables hooks hand a plugin have the signatures docs/plugins.md shows:
the keyword form registers the right thing, a wrong call is a warning naming the plugin (never a
traceback), and the import check cannot pass on a path it could not read."""

from __future__ import annotations

import inspect
import types

import pytest

from loopx import hookimpl
from loopx.seam import plugins
from tests.conftest import ROOT

DOCUMENTED = {
    "loopx_register_stores": "(scheme, factory)",
    "loopx_register_executors": "(name, provider)",
    "loopx_register_capabilities": "(declaration)",
    "loopx_register_event_kinds": "(name, apply, writers=('capability',), guard=None, formerly=())",
    "loopx_register_error_codes": "(code, description='')",
}


def _plugin(name, **hooks):
    """A plugin object whose hooks are ``hooks`` (functions taking ``register``)."""
    return types.SimpleNamespace(**{k: hookimpl(v) for k, v in hooks.items()}, __name__=name)


def test_every_register_callable_has_the_documented_signature(loopx_plugin):
    seen = {}

    def grab(hook):
        def impl(register):
            seen[hook] = str(inspect.signature(register))
        return impl

    loopx_plugin(_plugin("sig_probe", **{h: grab(h) for h in DOCUMENTED}), name="sig_probe")
    for hook in DOCUMENTED:
        getattr(plugins.hooks(), hook.removeprefix("loopx_"))()
    assert seen == DOCUMENTED
    guide = " ".join((ROOT / "docs" / "plugins.md").read_text().split()).replace("'", '"')
    for hook, sig in DOCUMENTED.items():
        assert f"`register{sig}`".replace("'", '"') in guide, hook


def test_the_keyword_form_registers_what_it_names(loopx_plugin):
    def factory(url, readonly):
        raise AssertionError("not opened")

    def apply(tx, event):
        pass

    def stores(register):
        register(scheme="kwstore", factory=factory)

    def kinds(register):
        register(name="kwprobe.noted", apply=apply, writers=("user",), formerly="kwprobe.seen")

    def codes(register):
        register(description="what it means", code="kwprobe.not_ready")

    loopx_plugin(_plugin("kwprobe", loopx_register_stores=stores, loopx_register_event_kinds=kinds,
                         loopx_register_error_codes=codes), name="kwprobe")
    assert plugins.store_factories()["kwstore"] is factory
    found = plugins.event_kinds()
    assert found["kwprobe.noted"][0] is apply and found["kwprobe.noted"][1] == {"user"}
    assert found["kwprobe.seen"][0] is apply and found["kwprobe.seen"][1] == frozenset()
    assert plugins.error_codes()["kwprobe.not_ready"] == "what it means"


@pytest.mark.parametrize("call", [lambda r: r(), lambda r: r("x"), lambda r: r("a", object(), "extra"),
                                  lambda r: r(scheme="a", factory=None, colour="red")],
                         ids=["no-arguments", "one-short", "one-too-many", "unknown-keyword"])
def test_a_wrong_call_is_a_warning_naming_the_plugin_and_registers_nothing(loopx_plugin, capsys, call):
    def stores(register):
        register("goodscheme", lambda url, readonly: None)
        call(register)

    loopx_plugin(_plugin("clumsy", loopx_register_stores=stores), name="clumsy")
    found = plugins.store_factories()
    err = capsys.readouterr().err
    assert "plugin 'clumsy'" in err and "register(scheme, factory)" in err and "Traceback" not in err, err
    assert "goodscheme" not in found and "a" not in found and {"sqlite", "postgresql"} <= set(found)


def test_a_wrong_register_call_through_the_cli_is_one_warning_not_a_traceback(loopx_plugin, loopx):
    def executors(register):
        register()

    loopx_plugin(_plugin("noargs", loopx_register_executors=executors), name="noargs")
    out = loopx("capabilities", "list")
    assert out.code == 0
    out = loopx("turn", "g-000000000000", "--executor", "shell")
    assert "Traceback" not in out.err and "IndexError" not in out.err
    assert "plugin 'noargs'" in out.err and "register(name, provider)" in out.err, out


def test_the_import_check_fails_on_a_path_it_cannot_read(tmp_path):
    from loopx import api

    assert api.testing.check_plugin_imports(tmp_path / "no_such_package") != []
    (tmp_path / "empty").mkdir()
    assert api.testing.check_plugin_imports(tmp_path / "empty") != []
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "__init__.py").write_text("def (:\n")
    assert api.testing.check_plugin_imports(tmp_path / "broken") != []
    (tmp_path / "fine").mkdir()
    (tmp_path / "fine" / "__init__.py").write_text("from loopx.api import cli\n")
    assert api.testing.check_plugin_imports(tmp_path / "fine") == []
