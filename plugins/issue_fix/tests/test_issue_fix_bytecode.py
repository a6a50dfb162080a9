"""Issue-Fix's bytecode cache: the base run's bytecode speeds up verify, and nothing an agent
writes - bytecode committed next to the tests, a tampered cache, a fix that writes into the
cache while it runs - decides what verify executes."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import marshal
import sys
from pathlib import Path

import pytest

from issue_fix_helpers import FIXED, TEST, WRONG, git
from test_issue_fix import start, state, step

PYTEST_PYC = f"test_calc.{sys.implementation.cache_tag}-pytest-{pytest.__version__}.pyc"


def fake_test_pyc(path: str) -> bytes:
    """pytest's rewritten bytecode for ``test_calc.py`` (the header names its real source's hash)
    whose tests pass whatever ``calc`` does."""
    code = compile("def test_add():\n    pass\n\n\ndef test_sub():\n    pass\n", path, "exec")
    return (importlib.util.MAGIC_NUMBER + b"\x03\x00\x00\x00" + importlib.util.source_hash(TEST.encode())[:8]
            + marshal.dumps(code))


def reproduced(cli, repo):
    out = start(cli, repo)
    r, _ = step(cli, out["goal_id"])
    assert r.json["reproduced"] is True, r
    return out["goal_id"], Path(out["worktree"])


def base_cache(cli, g) -> dict:
    """The bytecode list the base run's results file holds."""
    s = state(cli, g)
    results = Path(s["goal_dir"], "results", f"{s['reproduction']['evidence_id']}.json")
    return json.loads(results.read_text())["bytecode"]


@pytest.mark.slow
def test_verify_reads_the_base_runs_bytecode_for_unchanged_files_only(cli, project):
    g, wt = reproduced(cli, project)
    cache = base_cache(cli, g)
    assert {e["source"] for k, e in cache["files"].items() if k.startswith("tree/")} >= {"calc.py", "test_calc.py"}
    assert any(k.endswith(PYTEST_PYC) for k in cache["files"]), cache  # pytest's rewritten test module
    (wt / "calc.py").write_text(FIXED)
    r, _ = step(cli, g)
    assert r.json["verified"] is True, r
    used = r.json["test"]["bytecode"]
    # test_calc.py's rewritten bytecode is copied; calc.py changed (installed plugins keep their own bytecode)
    assert used["copied"] >= 1 and used["changed"] == 1 and used["refused"] == 0, used


@pytest.mark.slow
def test_bytecode_committed_next_to_an_unchanged_test_does_not_run(cli, project):
    g, wt = reproduced(cli, project)
    # The wrong fix, and beside the untouched test module bytecode whose header matches its source.
    (wt / "calc.py").write_text(WRONG)
    (wt / "__pycache__").mkdir(exist_ok=True)
    (wt / "__pycache__" / PYTEST_PYC).write_bytes(fake_test_pyc(str(wt / "test_calc.py")))
    # Committed, past the goal's exclude (which keeps untracked __pycache__ out of the tree).
    git(wt, "add", "-f", "calc.py", f"__pycache__/{PYTEST_PYC}")
    git(wt, "commit", "-qm", "fix")
    assert f"__pycache__/{PYTEST_PYC}" in git(wt, "ls-tree", "-r", "--name-only", "HEAD")
    r, _ = step(cli, g, expect=1)
    assert r.json["verified"] is False and r.json["reason"] == "test_failed", r


@pytest.mark.slow
def test_a_tampered_cache_is_refused_file_by_file(cli, project):
    g, wt = reproduced(cli, project)
    cache = base_cache(cli, g)
    key = next(k for k in cache["files"] if k.endswith(PYTEST_PYC))
    stored = Path(cache["store"], cache["files"][key]["file"])
    stored.write_bytes(fake_test_pyc(str(stored)))  # the goal's directory is in .git: an agent can write it
    (wt / "calc.py").write_text(WRONG)
    r, _ = step(cli, g, expect=1)
    assert r.json["reason"] == "test_failed", r
    assert r.json["test"]["bytecode"]["refused"] == 1, r.json["test"]["bytecode"]


@pytest.mark.slow
def test_a_fix_that_writes_into_its_bytecode_cache_cannot_reach_a_later_run(cli, project):
    g, wt = reproduced(cli, project)
    cache = base_cache(cli, g)
    before = {k: hashlib.sha256(Path(cache["store"], e["file"]).read_bytes()).hexdigest()
              for k, e in cache["files"].items()}
    # A "fix" that, when imported, plants passing test bytecode everywhere in the cache it runs with.
    poison = fake_test_pyc("test_calc.py")
    (wt / "calc.py").write_text(
        "import os\nimport sys\n\n"
        f"_POISON = {poison!r}\n"
        "for d, _, names in os.walk(sys.pycache_prefix or '/nonexistent'):\n"
        "    for n in names:\n"
        "        if n.startswith('test_calc.'):\n"
        "            try:\n"
        "                open(os.path.join(d, n), 'wb').write(_POISON)\n"
        "            except OSError:\n"
        "                pass\n\n\n" + WRONG)
    r, _ = step(cli, g, expect=1)
    assert r.json["reason"] == "test_failed", r
    after = {k: hashlib.sha256(Path(cache["store"], e["file"]).read_bytes()).hexdigest()
             for k, e in cache["files"].items()}
    assert after == before
    # The next run still gets every unchanged file's bytecode, untouched, and really runs the tests.
    (wt / "calc.py").write_text(WRONG)
    r, _ = step(cli, g, expect=1)
    assert r.json["reason"] == "test_failed" and r.json["test"]["bytecode"]["refused"] == 0, r
    (wt / "calc.py").write_text(FIXED)
    r, _ = step(cli, g)
    assert r.json["verified"] is True, r
