"""Bad input is refused with one clear line, a stable code, exit 2, and no change."""

import os
import subprocess
import sys

import pytest

from tests.conftest import loopx_env
from tests.factories import make_goal


def _ledger_size(loopx, goal_id):
    return len(loopx("history", "--goal-id", goal_id, "--json").json)


@pytest.mark.parametrize("bad_id", [
    "g-../../etc", "g-abc/def00000", "../g-0123456789ab", "g-0123456789AB", "g-0123", "x-0123456789ab",
    "", "g-0123456789ab\x00",
])
def test_malformed_goal_ids(loopx, bad_id):
    r = loopx("project_prompt", "show", "--goal-id", bad_id, "--json")
    assert r.code == 2
    assert r.json["error"]["code"] == "invalid_argument"


def test_unknown_goal_id_text_and_json(loopx):
    r = loopx("project_prompt", "pause", "--goal-id", "g-0123456789ab")
    assert r.code == 2 and r.out == ""
    assert r.err.strip().splitlines()[-1] == "loopx: error: no goal g-0123456789ab [goal_not_found]"
    r = loopx("project_prompt", "pause", "--goal-id", "g-0123456789ab", "--json")
    assert r.code == 2 and r.json == {"error": {"code": "goal_not_found", "message": "no goal g-0123456789ab"}}


@pytest.mark.parametrize("title", ["", "   ", "x" * 201])
def test_bad_titles_write_nothing(loopx, title):
    r = loopx("project_prompt", "create", "--title", title, "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"
    assert loopx("project_prompt", "list", "--status", "all", "--json").json == []


def test_description_limit_is_64_kib(loopx, tmp_path):
    big = tmp_path / "big.txt"
    big.write_bytes(b"a" * (10 * 1024 * 1024))
    r = loopx("project_prompt", "create", "--title", "t", "--description-file", str(big), "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument" and "limit" in r.json["error"]["message"]
    fits = tmp_path / "fits.txt"
    fits.write_bytes(b"a" * (64 * 1024))
    r = loopx("project_prompt", "create", "--title", "t", "--description-file", str(fits), "--json")
    assert r.code == 0 and len(r.json["description"]) == 64 * 1024
    assert len(loopx("project_prompt", "list", "--json").json) == 1


def test_description_limit_through_the_api(reg):
    from loopx.domain import goals as project_prompt
    from loopx.values.errors import LoopxError

    with pytest.raises(LoopxError) as err:
        project_prompt.create(reg, "user", title="t", description="x" * (10 * 1024 * 1024))
    assert err.value.code == "invalid_argument"
    assert project_prompt.list_goals(reg, status="all") == []


def test_invalid_utf8_from_a_real_process(registry_url):
    # argv bytes that are not UTF-8 reach Python as lone surrogates (surrogateescape).
    p = subprocess.run([sys.executable.encode(), b"-m", b"loopx", b"project_prompt", b"create",
                        b"--title", b"bad \xff\xfe title", b"--json"],
                       env=loopx_env(registry_url), capture_output=True)
    assert p.returncode == 2, p
    assert b'"invalid_argument"' in p.stdout and b"UTF-8" in p.stdout
    listed = subprocess.run([sys.executable, "-m", "loopx", "project_prompt", "list", "--json"],
                            env=loopx_env(registry_url), capture_output=True, text=True)
    assert listed.stdout.strip() == "[]"


def test_invalid_utf8_description_file(loopx, tmp_path):
    f = tmp_path / "d.txt"
    f.write_bytes(b"caf\xe9")
    r = loopx("project_prompt", "create", "--title", "t", "--description-file", str(f), "--json")
    assert r.code == 2 and "UTF-8" in r.json["error"]["message"]


def test_nul_in_text_is_refused(reg):
    from loopx.domain import goals as project_prompt
    from loopx.values.errors import LoopxError

    with pytest.raises(LoopxError) as err:
        project_prompt.create(reg, "user", title="a\x00b")
    assert err.value.code == "invalid_argument"


def test_writes_to_a_closed_goal_are_refused(loopx):
    goal = make_goal(loopx, title="ok")["goal"]
    assert loopx("project_prompt", "close", "--goal-id", goal).code == 0
    before = _ledger_size(loopx, goal)
    for verb in ("pause", "resume", "close"):
        r = loopx("project_prompt", verb, "--goal-id", goal, "--json")
        assert r.code == 2 and r.json["error"]["code"] == "goal_closed", (verb, r)
    assert _ledger_size(loopx, goal) == before


def test_wrong_lifecycle_transition(loopx):
    goal = make_goal(loopx, title="ok")["goal"]
    r = loopx("project_prompt", "resume", "--goal-id", goal, "--json")
    assert r.code == 2 and r.json["error"]["code"] == "goal_not_open"


def test_usage_errors_are_one_line_exit_2(loopx):
    r = loopx("project_prompt", "create", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument" and "--title" in r.json["error"]["message"]
    r = loopx("project_prompt", "list", "--status", "bogus")
    assert r.code == 2 and "[invalid_argument]" in r.err
    r = loopx("project_prompt", "list", "--limit", "0", "--json")
    assert r.code == 2 and r.json["error"]["code"] == "invalid_argument"


def test_unknown_actor_is_refused(loopx):
    r = loopx("project_prompt", "create", "--title", "t", "--json", env={"LOOPX_ACTOR": "root"})
    assert r.code == 2 and r.json["error"]["code"] == "invalid_actor"


def test_executor_cannot_create_or_close_goals(loopx):
    r = loopx("project_prompt", "create", "--title", "t", "--json", env={"LOOPX_ACTOR": "executor"})
    assert r.code == 2 and r.json["error"]["code"] == "actor_forbidden"
    goal = make_goal(loopx, title="ok")["goal"]
    r = loopx("project_prompt", "close", "--goal-id", goal, "--json", env={"LOOPX_ACTOR": "executor"})
    assert r.code == 2 and r.json["error"]["code"] == "actor_forbidden"
    assert loopx("project_prompt", "show", "--goal-id", goal, "--json").json["status"] == "open"


def test_default_registry_lives_in_the_user_data_dir(tmp_path):
    home = tmp_path / "home"
    work = tmp_path / "cwd"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPX_", "XDG_"))}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"), XDG_CACHE_HOME=str(home / "cache"))
    p = subprocess.run([sys.executable, "-m", "loopx", "project_prompt", "create", "--title", "t"],
                       env=env, cwd=work, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert (home / "data" / "loopx" / "registry.db").exists()
    assert list(work.iterdir()) == []
    written = {q.relative_to(home).parts[:2] for q in home.rglob("*") if q.is_file()}
    # The integrity key (loopx/ledger/keys.py) lives in the user's config dir, ~/.config/loopx with
    # XDG_CONFIG_HOME unset, apart from the registry it keys.
    assert written <= {("data", "loopx"), ("cache", "loopx"), (".config", "loopx")}
