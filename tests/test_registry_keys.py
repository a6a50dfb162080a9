"""One key per registry, nowhere else (issue 37): no command writes a key for a registry it did
not open, `loopx registry keys` says which registry each key belongs to and prunes orphans
(the user only), and a test run never touches the user's own config directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, loopx_env

PY = sys.executable


def _loopx(url, *argv, env=None):
    p = subprocess.run([PY, "-m", "loopx", *argv], env=loopx_env(url, **(env or {})), capture_output=True,
                       text=True, timeout=180)
    return p


def _ok(p):
    assert p.returncode == 0, p
    return json.loads(p.stdout) if p.stdout.lstrip().startswith(("{", "[")) else p.stdout


def _keys(key_dir):
    return sorted(f.name for f in key_dir.glob("*.key")) if key_dir.is_dir() else []


@pytest.mark.slow
def test_copy_and_self_repair_write_no_key_but_their_registries(tmp_path, private_key_dir):
    src, dst = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    for i in range(3):
        _ok(_loopx(src, "project-prompt", "create", "--title", f"goal {i}", "--json"))
    assert len(_keys(private_key_dir)) == 1
    _ok(_loopx(src, "registry", "copy", "--from", src, "--to", dst))
    assert len(_keys(private_key_dir)) == 2  # the source's and the copy's: no key per goal replayed
    check = _loopx(src, "self-repair", "check", "--json", env={"LOOPX_PLUGINS": "self_repair"})
    assert check.returncode == 0 and json.loads(check.stdout)["ok"], check
    assert len(_keys(private_key_dir)) == 2
    listed = _ok(_loopx(src, "registry", "keys", "--json"))
    assert listed["orphans"] == 0
    by_place = {p["location"]: k for k in listed["keys"] for p in k["registries"]}
    assert set(by_place) == {f"sqlite:{os.path.realpath(src)}", f"sqlite:{os.path.realpath(dst)}"}
    assert all(k["mode"] == "0600" for k in listed["keys"])
    assert [k["in_force"] for k in listed["keys"]].count(True) == 1


def _goal_with_action(url, name, argv):
    g = _ok(_loopx(url, "project-prompt", "create", "--title", "keys", "--json"))["id"]
    _ok(_loopx(url, "action", "add", g, "--name", name, "--json", "--", *argv))
    _ok(_loopx(url, "todo", "add", g, "--text", "work", "--json"))
    run = _ok(_loopx(url, "quota", "should-run", g, "--agent", "a1", "--json", env={"LOOPX_ACTOR": "executor"}))
    return g, run["interaction_contract"]["run_id"]


@pytest.mark.slow
def test_orphans_are_listed_and_pruned_by_the_user_only(tmp_path, private_key_dir):
    keep, gone = str(tmp_path / "keep.db"), str(tmp_path / "gone.db")
    _ok(_loopx(gone, "project-prompt", "create", "--title", "soon gone", "--json"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "loopx").write_text(f"#!/bin/sh\nexec {PY} -m loopx \"$@\"\n")
    (bin_dir / "loopx").chmod(0o755)
    shim = {"PATH": str(bin_dir) + os.pathsep + os.environ["PATH"]}
    g, run = _goal_with_action(keep, "prune", ["loopx", "registry", "keys", "--prune"])
    os.remove(gone)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(gone + suffix):
            os.remove(gone + suffix)

    listed = _ok(_loopx(keep, "registry", "keys", "--json"))
    [orphan] = [k for k in listed["keys"] if k["orphan"]]
    assert orphan["registries"] == [{"location": f"sqlite:{os.path.realpath(gone)}", "state": "gone"}]
    assert "[orphan]" in _ok(_loopx(keep, "registry", "keys"))

    # An agent cannot prune, neither by saying it is an executor nor from inside its step (the broker).
    r = _loopx(keep, "registry", "keys", "--prune", "--json", env={"LOOPX_ACTOR": "executor"})
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["code"] == "actor_forbidden", r
    step = _loopx(keep, "exec", "--run-id", run, "--agent", "a1", "--action", "prune", "--json",
                  env={"LOOPX_ACTOR": "executor", **shim})
    assert "[actor_forbidden]" in json.loads(step.stdout)["data"]["output_tail"], step
    assert (private_key_dir / f"{orphan['registry_id']}.key").exists()

    pruned = _ok(_loopx(keep, "registry", "keys", "--prune", "--json"))
    assert pruned["pruned"] == [orphan["registry_id"]] and pruned["orphans"] == 0
    assert not list(private_key_dir.glob(f"{orphan['registry_id']}*"))
    assert len(_keys(private_key_dir)) == 1
    # The registry still in use keeps its key: it writes and verifies.
    _ok(_loopx(keep, "todo", "add", g, "--text", "more", "--json"))
    assert _ok(_loopx(keep, "registry", "keys", "--prune", "--json"))["pruned"] == []


@pytest.mark.slow
def test_a_test_run_never_touches_the_users_own_config_directory(tmp_path):
    """A pytest session of key-writing work (a module fixture that makes a registry before any
    test's fixtures run, `registry copy`, a command on the default registry), run as a user whose
    home is a fresh directory: nothing appears under that home's config or data directory."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "LOOPX_"))}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT))
    p = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                        str(ROOT / "tests" / "keys_probe.py")], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "1 passed" in p.stdout
    assert not (home / ".config").exists() and not (home / ".local").exists(), sorted(
        str(x.relative_to(home)) for x in home.rglob("*"))
