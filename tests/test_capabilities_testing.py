"""The pytest plugin LoopX installs for plugin authors (``loopx.testing``, entry point ``pytest11``)."""

import sys

import pytest

pytest_plugins = ["pytester"]

AUTHOR_TESTS = '''
from loopx import hookimpl
from loopx.seam.capabilities import Capability


class Mine:
    @hookimpl
    def loopx_register_capabilities(self, register):
        register(Capability(name="author_cap", version="1", summary="S.", owns=["author_cap"]))

    @hookimpl
    def loopx_register_commands(self, cli):
        import click

        from loopx.cli.output import LoopxCommand, emit

        @click.command("author-hello", cls=LoopxCommand)
        def hello():
            emit({"hello": "author"})

        cli.add_command(hello)


def test_a_registers_and_uses_everything(loopx_registry, loopx_plugin, loopx_cli):
    import os

    assert os.environ["LOOPX_REGISTRY"] == str(loopx_registry.store.url)
    loopx_plugin(Mine())
    assert "author_cap" in [c["name"] for c in loopx_cli("capabilities", "list", "--json").json]
    r = loopx_cli("author-hello", "--json")
    assert r.code == 0 and r.json == {"hello": "author"}
    g = loopx_cli("project_prompt", "create", "--title", "T", "--json").json["id"]
    from loopx.seam import capabilities

    assert capabilities.set_state(loopx_registry, "author_cap", g, {"k": 1}) == {"k": 1}


def test_b_the_plugin_is_gone_after_its_test(loopx_cli):
    assert "author_cap" not in [c["name"] for c in loopx_cli("capabilities", "list", "--json").json]
    r = loopx_cli("author-hello", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"


def test_c_each_test_gets_a_fresh_registry(loopx_cli):
    assert loopx_cli("project_prompt", "list", "--json").json == []
'''


@pytest.mark.slow
def test_plugin_author_fixtures_work_without_any_conftest(pytester):
    pytester.makepyfile(test_author=AUTHOR_TESTS)
    # A subprocess, as a plugin's own suite runs: the fixtures come from the installed entry point.
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_the_entry_point_is_registered():
    from importlib.metadata import entry_points

    assert "loopx.testing" in [ep.value for ep in entry_points(group="pytest11") if ep.name == "loopx"]
    assert sys.modules.get("loopx.testing") is not None  # loaded into this very run


def _commands(loopx_cli, plugins):
    """The plugin commands `loopx --help` lists with LOOPX_PLUGINS=``plugins`` (None: unset, every installed one)."""
    r = loopx_cli("--help", env={"LOOPX_PLUGINS": plugins})
    assert r.code == 0, r
    return {name for name in ("self-repair", "issue-fix", "approvals") if f"\n  {name} " in r.out}


@pytest.mark.parametrize("first, then", [("self_repair", None), (None, "self_repair")])
def test_the_in_process_cli_follows_a_changed_plugin_allow_list(loopx_cli, first, then):
    # One process, two allow-lists: a plugin author's in-process CLI shows the commands of the
    # plugins loaded now, not those of its first call. (CliRunner puts the environment back after
    # each call, and the CLI reloads for whatever manager the next test's environment gives.)
    everything = {"self-repair", "issue-fix", "approvals"}
    expected = {"self_repair": {"self-repair"}, None: everything}
    assert _commands(loopx_cli, first) == expected[first]
    assert _commands(loopx_cli, then) == expected[then]
    assert _commands(loopx_cli, first) == expected[first]
