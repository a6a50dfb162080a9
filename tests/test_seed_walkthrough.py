"""The seed's "Complete Workflow Example", steps 1-8, run end to end in bash with jq.

The script is the seed's text verbatim (checked against ``shared/seed/loopx-seed.txt`` when that
file is beside the checkout), with exactly these changes, each explained in ADAPTATIONS:

1. Step 1 fetches ``install-from-github.sh`` from the internet; we run ``scripts/install.sh``
   from this checkout instead, which does the same thing (LoopX in a virtualenv of its own under
   ``~/.local/share/loopx``, linked as ``~/.local/bin/loopx``) without a network.
2. The walkthrough's domain commands (``run-model``, ``generate-report``) come from the example
   third-party plugin ``examples/plugins/loopx-seed-domain``; it is installed into LoopX's
   virtualenv right after step 1 (the seed assumes they exist).
3. Step 2's goal enables the plugin's capability (``--capability seed_domain``): a capability
   adds its steps only to the goals that use it, so the seed's goal says it does.
4. Step 5's ``for cmd in $(...)`` splits the contract on every blank, so each *word* of each
   action would be ``eval``-ed on its own. Every contract action is a complete shell-quoted
   command with arguments, so the loop runs with ``IFS`` set to a newline: one line, one
   action, exactly what the loop means.

Everything runs under a temporary ``HOME`` with a clean environment (no LOOPX_* variables), so
the registry, the plugin cache and the install are the walkthrough's own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEED_FILE = ROOT.parent / "shared" / "seed" / "loopx-seed.txt"
JQ = shutil.which("jq") or "/usr/bin/jq"

# Steps 1-8 of the seed's "Complete Workflow Example", verbatim.
SEED_STEPS = r'''# 1. Install and configure

curl -fsSL https://raw.githubusercontent.com/huangruiteng/loopx/main/scripts/install-from-github.sh | bash
export PATH="$HOME/.local/bin:$PATH"

# 2. Create a durable goal

loopx project_prompt create \
    --title "Investigate Quarterly Revenue Spike" \
    --description "Analyze data, run models, and produce a report."

# 3. Capture goal ID

GOAL_ID=$(loopx project_prompt list --json | jq -r '.[0].id')

# 4. Inspect initial state

loopx status --goal-id $GOAL_ID

# 5. Retrieve interaction contract and execute allowed actions

for cmd in $(loopx --format json quota should-run --goal-id $GOAL_ID | \
             jq -r '.interaction_contract.cli_channel.next_cli_actions[]'); do
    echo "Executing: $cmd"
    eval $cmd
done

# 6. Record execution evidence and human feedback

RUN_ID=$(loopx run-model --model revenue-forecast --json | jq -r '.run_id')
loopx summary_all --goal-id $GOAL_ID
loopx reward add --goal-id $GOAL_ID --run-id $RUN_ID --score 1.0 \
    --comment "Forecast accuracy validated against actuals."

# 7. Iterate through additional turns as needed...

# 8. Close the goal when complete

loopx project_prompt close --goal-id $GOAL_ID'''

# (what the seed says, what we run, why)
ADAPTATIONS = [
    ("curl -fsSL https://raw.githubusercontent.com/huangruiteng/loopx/main/scripts/install-from-github.sh | bash",
     'bash "$LOOPX_CHECKOUT/scripts/install.sh"',
     "no internet: the local installer does what install-from-github.sh does"),
    ('export PATH="$HOME/.local/bin:$PATH"\n',
     'export PATH="$HOME/.local/bin:$PATH"\n\n'
     '# (not in the seed) the domain commands of steps 5-6 come from the example plugin\n'
     'bash "$LOOPX_CHECKOUT/scripts/install.sh" --with "$LOOPX_CHECKOUT/examples/plugins/loopx-seed-domain"\n',
     "the seed assumes run-model and generate-report exist; they are a third-party plugin"),
    ("for cmd in $(loopx --format json quota should-run",
     "IFS=$'\\n'  # (adapted) one contract action per line, not one per word\n"
     "for cmd in $(loopx --format json quota should-run",
     "$(...) splits on blanks: each word of each action would be eval-ed alone"),
    ('    eval $cmd\ndone\n', '    eval $cmd\ndone\nunset IFS\n', "restore word splitting after the loop"),
    ('    --description "Analyze data, run models, and produce a report."\n',
     '    --description "Analyze data, run models, and produce a report." \\\n'
     '    --capability seed_domain  # (not in the seed) the goal uses the example plugin\n',
     "a capability serves only the goals that enable it, so the goal names the plugin whose steps it wants"),
]


def seed_script() -> str:
    """The seed's steps with the ADAPTATIONS applied (each must apply exactly once)."""
    script = SEED_STEPS
    for old, new, _why in ADAPTATIONS:
        assert script.count(old) == 1, old
        script = script.replace(old, new)
    return script


def test_the_script_is_the_seed_verbatim():
    """SEED_STEPS is the seed's text; the adaptations are the only differences."""
    if not SEED_FILE.exists():
        pytest.skip(f"{SEED_FILE} is not beside this checkout")
    text = SEED_FILE.read_text()
    start = text.index("# 1. Install and configure")
    end = text.index("loopx project_prompt close --goal-id $GOAL_ID", start) + len("loopx project_prompt close --goal-id $GOAL_ID")
    assert text[start:end] == SEED_STEPS
    script = seed_script()
    for old, new, _why in ADAPTATIONS:
        assert new in script


def test_word_splitting_is_why_step_5_sets_ifs():
    """The verbatim loop would hand `eval` single words; with IFS=newline it gets whole actions."""
    actions = "loopx run-model --model revenue-forecast --run-id r-0123456789ab\n" \
              "loopx generate-report --format pdf --run-id r-0123456789ab"
    probe = 'n=0; for cmd in $(printf "%s" "$ACTIONS"); do n=$((n+1)); done; echo $n'
    words = subprocess.run(["bash", "-c", probe], env={"ACTIONS": actions, "PATH": os.environ["PATH"]},
                           capture_output=True, text=True, check=True).stdout.strip()
    lines = subprocess.run(["bash", "-c", "IFS=$'\\n'; " + probe], env={"ACTIONS": actions, "PATH": os.environ["PATH"]},
                           capture_output=True, text=True, check=True).stdout.strip()
    assert (int(words), int(lines)) == (12, 2)


def _walkthrough_env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPX_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env.update({
        "HOME": str(home),
        "LOOPX_CHECKOUT": str(ROOT),
        "LOOPX_PYTHON": sys.executable,
        # Reuse the machine's pip cache: the walkthrough's HOME is new and empty.
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    })
    env.pop("XDG_DATA_HOME", None)
    env.pop("XDG_CACHE_HOME", None)
    return env


@pytest.mark.skipif(not Path(JQ).exists() or shutil.which("bash") is None, reason="needs bash and jq")
@pytest.mark.slow
def test_seed_complete_workflow_example_end_to_end(tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    script = "set -euo pipefail\n" + seed_script() + '\n\necho "SEED_GOAL_ID=$GOAL_ID"\necho "SEED_RUN_ID=$RUN_ID"\n'
    (tmp_path / "seed.sh").write_text(script)
    env = _walkthrough_env(home)
    p = subprocess.run(["bash", str(tmp_path / "seed.sh")], cwd=work, env=env, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, f"stdout:\n{p.stdout[-6000:]}\nstderr:\n{p.stderr[-6000:]}"
    out = dict(line.split("=", 1) for line in p.stdout.splitlines() if line.startswith("SEED_"))
    goal_id, run_id = out["SEED_GOAL_ID"], out["SEED_RUN_ID"]

    # Step 1: LoopX lives in its own virtualenv, linked from ~/.local/bin.
    link = home / ".local" / "bin" / "loopx"
    venv = home / ".local" / "share" / "loopx" / "venv"
    assert link.is_symlink() and Path(os.readlink(link)) == venv / "bin" / "loopx"

    # Step 5 ran the contract's actions, the plugin's among them, one action per iteration.
    executed = [line[len("Executing: "):] for line in p.stdout.splitlines() if line.startswith("Executing: ")]
    # A capability's command is a do step run through `loopx exec`, which records its result.
    assert any(a.startswith("loopx exec --run-id r-") and "-- loopx run-model --model revenue-forecast --run-id r-" in a
               for a in executed), executed
    assert any("-- loopx generate-report --format pdf --run-id r-" in a for a in executed), executed
    assert executed[-1].startswith("loopx run finish --run-id r-")
    assert "Investigate Quarterly Revenue Spike" in p.stdout  # step 4's status

    # What the registry says afterwards, read by the walkthrough's own LoopX.
    def loopx(*args):
        r = subprocess.run([str(link), *args, "--json"], cwd=work, env={**env, "PATH": f"{link.parent}:{env['PATH']}"},
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    goal = loopx("project_prompt", "show", "--goal-id", goal_id)
    assert goal["status"] == "closed" and goal["title"] == "Investigate Quarterly Revenue Spike"
    runs = {r["id"]: r for r in loopx("run", "list", "--goal-id", goal_id)}
    assert run_id in runs and len(runs) == 2  # step 5's turn, and the turn run-model asked for in step 6
    evidence = loopx("evidence", "list", "--goal-id", goal_id)
    models = [e for e in evidence if e["kind"] == "model"]
    assert len(models) == 2 and {e["run_id"] for e in models} == set(runs)
    assert all(e["data"]["model"] == "revenue-forecast" and e["data"]["spike"] is True for e in models)
    [report] = [e for e in evidence if e["kind"] == "report"]
    pdf = Path(report["file_path"])
    assert pdf.parent == work and pdf.suffix == ".pdf"
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF-1.4") and data.rstrip().endswith(b"%%EOF")
    import hashlib

    assert report["file_sha256"] == "sha256:" + hashlib.sha256(data).hexdigest()
    rewards = loopx("reward", "list", "--goal-id", goal_id)
    assert [(w["run_id"], w["score"], w["comment"]) for w in rewards] == [
        (run_id, 1.0, "Forecast accuracy validated against actuals.")]
    plugins = {p["name"]: p for p in loopx("plugins")}
    assert plugins["seed_domain"]["distribution"] == "loopx-seed-domain 0.1.0"
    assert "seed_domain" in {c["name"] for c in loopx("capabilities", "list")}
