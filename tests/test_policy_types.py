"""The confinement code type-checks: ``mypy --strict`` passes on the policy (loopx/sandbox/confine_policy.py),
the Landlock enforcer and its file checks (loopx/sandbox/landlock.py), the step's confinement
(loopx/turn/confine.py), its world (loopx/sandbox/world.py) and private runs (loopx/turn/private_run.py); and the
types have teeth: a rule with an access Landlock does not know, or a policy changed in place, is
an error before it runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # a cold mypy run takes seconds

MODULES = ["loopx/sandbox/confine_policy.py", "loopx/sandbox/landlock.py", "loopx/turn/confine.py", "loopx/sandbox/world.py",
           "loopx/turn/private_run.py"]


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    # No cache written (nothing left in the checkout); pyproject.toml's settings, these files.
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", "/dev/null", "--strict", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_the_confinement_modules_pass_mypy_strict():
    r = _mypy(*MODULES)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Success: no issues found in 5 source files" in r.stdout, r.stdout


def test_a_wrong_rule_or_a_policy_changed_in_place_fails_the_check(tmp_path):
    bad = tmp_path / "bad_policy.py"
    bad.write_text('''\
from __future__ import annotations

from loopx.sandbox.confine_policy import Policy, Rule
from loopx.sandbox.world import Mount

policy = Policy(rules=(Rule("/", "rwx"),))
policy.deny_tcp = (5432,)
mount = Mount("bind", "/", "/")
allowed: bool = policy.denies_tcp("5432")
''')
    r = _mypy("--follow-imports", "silent", str(bad))
    out = r.stdout
    assert r.returncode == 1, out
    assert 'bad_policy.py:6: error: Argument 2 to "Rule" has incompatible type "Literal[\'rwx\']"' in out, out
    assert 'bad_policy.py:7: error: Property "deny_tcp" defined in "Policy" is read-only' in out, out
    assert 'bad_policy.py:8: error: Argument 1 to "Mount" has incompatible type "Literal[\'bind\']"' in out, out
    assert 'bad_policy.py:9: error: Argument 1 to "denies_tcp" of "Policy" has incompatible type "str"' in out, out
