"""A hostile agent against the git LoopX runs for it (issue 34): git metadata is read-only to a
step, LoopX's git follows only the links it made, takes no program or replace ref from the
repository, and publishes exactly the tree verify tested.

Each attack is made for real in a real git repository by a script the ``command`` executor runs
in a real ``loopx turn`` of an Issue-Fix goal, in the goal's worktree: confined (the attack is
refused), and - for LoopX's own checks behind confinement - in a turn the user ran
``--unconfined``, where the write lands and LoopX's git must still not be steered. Programs the
attacks plant (a filter, an fsmonitor) would touch a marker file if they ran; the markers stay
absent.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from issue_fix_helpers import BUGGY, FIXED, git, make_project, origin_of
from test_issue_fix import start, state, step

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock is Linux's")

# The agent: runs the attack script (each attempt prints ``ATTACK <name> ok|refused``), writes what
# happened where the test reads it (an ignored directory of the worktree), then, when asked, runs
# the contract's commands (the goal's Issue-Fix step).
AGENT = r'''
import json, os, re, subprocess, sys
out = subprocess.run(["sh", os.environ["ATTACKS"]], capture_output=True, text=True)
tried = {}
for line in out.stdout.splitlines():
    if line.startswith("ATTACK "):
        parts = line.split(" ", 3)
        tried[parts[1]] = parts[2]
steps = []
if os.environ.get("RUN_STEP"):
    block = re.search(r"```sh\n(.*?)\n```", open(os.environ["LOOPX_PROMPT_FILE"]).read(), re.S).group(1)
    for line in block.splitlines():
        p = subprocess.run(line, shell=True, capture_output=True, text=True)
        steps.append({"command": line, "exit": p.returncode, "out": p.stdout[-4000:], "err": p.stderr[-2000:]})
os.makedirs(".pytest_cache", exist_ok=True)
with open(".pytest_cache/agent-report.json", "w") as f:
    json.dump({"tried": tried, "steps": steps, "stderr": out.stderr[-3000:]}, f)
'''

TRY = '''set +e
try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "ATTACK $name ok"; else echo "ATTACK $name refused"; fi; }
'''


def _turn(cli, tmp_path, goal_id, attacks: str, *, unconfined=False, run_step=False):
    """One ``loopx turn --executor command`` of ``goal_id`` whose agent runs ``attacks``; the report."""
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "attacks.sh").write_text(TRY + attacks)
    # The step's world shows the test's directory (the user's checkout, the attack's files)
    # read-only, as a user grants it (`world.grant`): the attacks then meet the same read-only
    # git metadata they would under Landlock alone, not merely an absent checkout.
    cli("config", "set", "world.grant", str(tmp_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_") or k == "LOOPX_ISSUE_FIX_WORKTREES"}
    env.update({"LOOPX_REGISTRY": cli.url, "ATTACKS": str(tmp_path / "attacks.sh"),
                "LOOPX_EXECUTOR_COMMAND": json.dumps([sys.executable, str(tmp_path / "agent.py")]),
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"})
    if run_step:
        env["RUN_STEP"] = "1"
    p = subprocess.run([sys.executable, "-m", "loopx", "--format", "json", "turn", "--goal-id", goal_id,
                        *(["--unconfined"] if unconfined else []), "--executor", "command"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    # A turn whose agent did not run the contract's step is "partial" (exit 3).
    assert p.returncode == (0 if run_step else 3), (p.stdout[:1500], p.stderr[-3000:])
    turn = json.loads(p.stdout)
    assert ("[unconfined]" in turn["handoff"]) == unconfined, turn["handoff"]
    report = Path(state(cli, goal_id)["worktree"], ".pytest_cache", "agent-report.json")
    return json.loads(report.read_text())


def _layout(cli, g):
    s = state(cli, g)
    wt = Path(s["worktree"])
    common = Path(git(s["repo"], "rev-parse", "--path-format=absolute", "--git-common-dir"))
    gitdir = Path(git(wt, "rev-parse", "--path-format=absolute", "--git-dir"))
    return s, wt, common, gitdir


def _snapshot(repo: Path, common: Path, gitdir: Path, wt: Path) -> dict:
    """Every file of git's metadata (the common directory, the worktree's git directory and
    ``.git`` file) with its bytes, and every ref."""
    files = {}
    for root in (common, gitdir):
        for path in sorted(root.rglob("*")):
            if path.is_file() and "loopx-issue-fix" not in path.parts and path.name not in ("index", "ORIG_HEAD"):
                files[str(path)] = path.read_bytes()
    files[str(wt / ".git")] = (wt / ".git").read_bytes()
    return {"files": files, "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)")}


def _evil_git(where: Path, marker: Path) -> str:
    """Shell lines that make ``where``: a copy of the repository's common directory whose config
    runs programs (a ``clean`` filter for every file, an fsmonitor) that touch ``marker``."""
    return f'''
cp -a "$COMMON" {where}
cat > {where}/run.sh <<'EOF'
#!/bin/sh
echo ran >> {marker}
cat
EOF
chmod +x {where}/run.sh
printf '[filter "evil"]\\n\\tclean = {where}/run.sh\\n\\trequired = true\\n[core]\\n\\tfsmonitor = {where}/run.sh\\n' >> {where}/config
printf '* filter=evil\\n' > .gitattributes
'''


@pytest.mark.slow
def test_a_confined_agent_cannot_write_git_metadata_and_loopx_commits_its_fix(cli, tmp_path):
    repo = make_project(tmp_path)
    git(repo, "checkout", "-qb", "other")
    (repo / "NOTES.md").write_text("another branch\n")
    git(repo, "add", "NOTES.md")
    git(repo, "commit", "-qm", "other")
    git(repo, "checkout", "-q", "main")
    out = start(cli, repo)
    g = out["goal_id"]
    step(cli, g)  # red
    s, wt, common, gitdir = _layout(cli, g)
    main = git(repo, "rev-parse", "refs/heads/main")
    marker = tmp_path / "program-ran"
    before = _snapshot(repo, common, gitdir, wt)
    evil = wt / ".evil-git"
    attacks = f'''export COMMON={shlex.quote(str(common))} GITDIR={shlex.quote(str(gitdir))}
{_evil_git(evil, marker)}
try worktree_commondir sh -c 'echo {evil} > "$GITDIR/commondir"'
try user_commondir sh -c 'echo {evil} > "$COMMON/commondir"'
try config_include sh -c 'printf "[include]\\n\\tpath = {evil}/config\\n" >> "$COMMON/config"'
try config_fsmonitor git config core.fsmonitor {evil}/run.sh
try worktree_config sh -c 'printf "[core]\\n\\tfsmonitor = {evil}/run.sh\\n" > "$GITDIR/config.worktree"'
try move_main git update-ref refs/heads/main refs/heads/other
try branch_force git branch -f main other
try delete_main git update-ref -d refs/heads/main
try replace sh -c 'git replace $(git rev-parse HEAD:calc.py) $(git rev-parse HEAD:test_calc.py)'
try new_object sh -c 'echo planted | git hash-object -w --stdin'
try git_file sh -c 'echo "gitdir: {evil}" > .git'
try git_file_swap sh -c 'mv .git .git-old && echo "gitdir: {evil}" > .git'
try hooks sh -c 'echo "#!/bin/sh" > "$COMMON/hooks/post-checkout"'
try packed_refs sh -c 'echo "0000000000000000000000000000000000000000 refs/heads/main" >> "$COMMON/packed-refs"'
try commit git -c user.name=a -c user.email=a@b commit -qam mine
rm -rf .gitattributes {evil}
cp {shlex.quote(str(tmp_path / "fixed.py"))} calc.py
'''
    (tmp_path / "fixed.py").write_text(FIXED)
    report = _turn(cli, tmp_path, g, attacks, run_step=True)
    tried = report["tried"]
    assert len(tried) == 15 and all(r == "refused" for r in tried.values()), report
    # Nothing of git's changed but what LoopX wrote itself (its commit's objects, its branch):
    # no ref, config, link or hook; the user's main did not move.
    after = _snapshot(repo, common, gitdir, wt)["files"]
    ours = (str(common / "objects"), str(gitdir / "logs" / "HEAD"))  # LoopX's commit moved its branch
    changed = sorted(k for k in set(before["files"]) | set(after)
                     if before["files"].get(k) != after.get(k) and not k.startswith(ours) and "issue-fix" not in k)
    assert changed == [], changed
    assert git(repo, "rev-parse", "refs/heads/main") == main
    assert git(repo, "for-each-ref", "refs/replace") == ""
    # The agent's edit of the worktree's files went through, and LoopX committed it: verify ran in
    # the same turn (through the broker), green, and no planted program ran.
    verify = [x for x in report["steps"] if "issue-fix verify" in x["command"]]
    assert verify and verify[0]["exit"] == 0, report["steps"]
    s = state(cli, g)
    assert s["phase"] == "handoff", s["log"][-1]
    commit = s["verification"]["commit"]
    assert git(repo, "show", f"{commit}:calc.py") + "\n" == FIXED
    assert git(repo, "diff", "--name-only", s["branch"]["base_commit"], commit) == "calc.py"
    assert git(repo, "log", "-1", "--format=%an", commit) == "LoopX Issue-Fix"
    assert s["verification"]["tested_tree"] == git(repo, "rev-parse", f"{commit}^{{tree}}")
    # The user's next `git status` runs nothing of the agent's either.
    subprocess.run(["git", "-C", str(repo), "status"], check=True, capture_output=True)
    assert not marker.exists()


# Behind confinement: a turn the user ran unconfined (or a machine where a link file stays
# writable, see docs/security.md) lets the write land; LoopX's git must still not follow it.
LINKS = {
    "worktree_git_file": 'echo "gitdir: {evil}" > .git',
    "worktree_commondir": 'echo {evil} > "$GITDIR/commondir"',
    "user_commondir": 'echo {evil} > "$COMMON/commondir"',
}


@pytest.mark.parametrize("link", sorted(LINKS))
@pytest.mark.slow
def test_loopx_follows_only_the_git_links_it_made(cli, tmp_path, link):
    repo = make_project(tmp_path)
    g = start(cli, repo)["goal_id"]
    step(cli, g)
    s, wt, common, gitdir = _layout(cli, g)
    marker, evil = tmp_path / "program-ran", wt / ".evil-git"
    (tmp_path / "fixed.py").write_text(FIXED)
    attacks = f'''export COMMON={shlex.quote(str(common))} GITDIR={shlex.quote(str(gitdir))}
{_evil_git(evil, marker)}
cp {shlex.quote(str(tmp_path / "fixed.py"))} calc.py
try {link} sh -c '{LINKS[link].format(evil=evil)}'
'''
    report = _turn(cli, tmp_path, g, attacks, unconfined=True)
    assert report["tried"] == {link: "ok"}, report
    # verify (through the contract, as the agent runs it) refuses before any git runs there.
    r, _ = step(cli, g, expect=2)
    assert r.json["error"]["code"] == "issue_fix.git_tampered", r
    assert not marker.exists()
    assert state(cli, g)["phase"] == "fix"
    if link == "user_commondir":
        # A new goal on the planted checkout is refused too (nothing created).
        r = cli("issue-fix", "start", "--repo", repo, "--title", "t", "--issue-text", "x",
                "--test-command", "true", "--report", "r.xml", "--json")
        assert r.code == 2 and r.json["error"]["code"] == "issue_fix.git_tampered", r
        assert not marker.exists()


@pytest.mark.slow
def test_programs_and_includes_in_the_repository_config_do_not_run_in_loopxs_git(cli, tmp_path):
    repo = make_project(tmp_path)
    g = start(cli, repo)["goal_id"]
    step(cli, g)
    s, wt, common, gitdir = _layout(cli, g)
    marker, evil = tmp_path / "program-ran", tmp_path / "evil"
    evil.mkdir()
    run = evil / "run.sh"
    run.write_text(f"#!/bin/sh\necho ran >> {marker}\ncat\n")
    run.chmod(0o755)
    # Every program git could start from its configuration, in a file the repository config includes.
    programs = (f'[filter "evil"]\n\tclean = {run}\n\tsmudge = {run}\n\trequired = true\n'
                f'[diff "evil"]\n\ttextconv = {run}\n\tcommand = {run}\n'
                f'[core]\n\tfsmonitor = {run}\n\thooksPath = {evil}\n\tpager = {run}\n\tsshCommand = {run}\n'
                f'[remote "origin"]\n\treceivepack = {run}\n\tuploadpack = {run}\n'
                f'[credential]\n\thelper = !{run}\n[alias]\n\tpush = !{run}\n')
    (evil / "programs.cfg").write_text(programs)
    for hook in ("pre-push", "post-checkout", "reference-transaction", "post-index-change", "pre-commit"):
        (evil / hook).write_text(f"#!/bin/sh\necho ran >> {marker}\n")
        (evil / hook).chmod(0o755)
    (tmp_path / "fixed.py").write_text(FIXED)
    attacks = f'''export COMMON={shlex.quote(str(common))}
try include sh -c 'printf "[include]\\n\\tpath = {evil}/programs.cfg\\n" >> "$COMMON/config"'
printf '*.py filter=evil diff=evil\\n' > .gitattributes
cp {shlex.quote(str(tmp_path / "fixed.py"))} calc.py
'''
    report = _turn(cli, tmp_path, g, attacks, unconfined=True)
    assert report["tried"] == {"include": "ok"}, report
    # The include is there for git, and git would run its filter...
    assert git(repo, "config", "filter.evil.clean") == str(run)
    # ...but LoopX's verify, hand-off and publish start none of these programs.
    r, _ = step(cli, g)
    assert r.json["verified"] is True, r
    commit = r.json["commit"]
    assert git(repo, "cat-file", "blob", f"{commit}:calc.py") + "\n" == FIXED
    r, _ = step(cli, g, "--root-cause", "add subtracted")
    assert FIXED.splitlines()[1].strip() in r.json["packet"]
    gate = state(cli, g)["publish_gate"]
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", gate).code == 0
    r, _ = step(cli, g)
    assert r.json["remote_sha"] == commit
    assert git(origin_of(repo), "rev-parse", f"refs/heads/{r.json['branch']}") == commit
    assert not marker.exists()


BACKDOOR = BUGGY + "\n\nimport os  # backdoor\n"


@pytest.mark.slow
def test_a_replace_ref_does_not_change_what_verify_tests(cli, tmp_path):
    repo = make_project(tmp_path)
    g = start(cli, repo)["goal_id"]
    step(cli, g)
    s, wt, common, gitdir = _layout(cli, g)
    (tmp_path / "fixed.py").write_text(FIXED)
    (tmp_path / "backdoor.py").write_text(BACKDOOR)
    # The worktree holds M (the bug and a backdoor); a replace ref tells git that M's blob is G (the fix).
    attacks = f'''
cp {shlex.quote(str(tmp_path / "backdoor.py"))} calc.py
try replace sh -c 'git replace $(git hash-object -w calc.py) $(git hash-object -w {shlex.quote(str(tmp_path / "fixed.py"))})'
'''
    report = _turn(cli, tmp_path, g, attacks, unconfined=True)
    assert report["tried"] == {"replace": "ok"}, report
    backdoor_blob = git(repo, "hash-object", str(tmp_path / "backdoor.py"))
    assert git(repo, "cat-file", "blob", backdoor_blob) + "\n" == FIXED  # git honours it by default
    # verify tests M, the code that would be committed: the failing test still fails.
    r, _ = step(cli, g, expect=1)
    assert r.json["verified"] is False and r.json["reason"] == "test_failed", r
    s = state(cli, g)
    assert s["phase"] == "fix" and s["verification"] is None
    assert git(repo, "rev-parse", f"refs/heads/{s['branch']['name']}") == s["branch"]["base_commit"]


def _loose(common: Path, sha: str) -> Path:
    return common / "objects" / sha[:2] / sha[2:]


@pytest.mark.slow
def test_publish_refuses_a_commit_whose_object_does_not_hold_the_tested_tree(cli, tmp_path):
    repo = make_project(tmp_path)
    g = start(cli, repo)["goal_id"]
    step(cli, g)
    s, wt, common, gitdir = _layout(cli, g)
    (wt / "calc.py").write_text(FIXED)
    step(cli, g)
    step(cli, g, "--root-cause", "add subtracted")
    s = state(cli, g)
    commit, tested = s["verification"]["commit"], s["verification"]["tested_tree"]
    assert cli("gate", "approve", "--goal-id", g, "--gate-id", s["publish_gate"]).code == 0
    # After the approval, the verified commit's object file is rewritten to name the base's tree
    # (the bug) instead: the same name, other content.
    body = git(repo, "cat-file", "commit", commit).replace(f"tree {tested}", f"tree {s['branch']['base_tree']}") + "\n"
    forged = tmp_path / "forged"
    forged.write_bytes(zlib.compress(b"commit %d\0" % len(body.encode()) + body.encode()))
    target = _loose(common, commit)
    assert target.is_file()
    attacks = f'''try rewrite_object sh -c 'rm -f {target} && cp {forged} {target}'
'''
    report = _turn(cli, tmp_path, g, attacks, unconfined=True)
    assert report["tried"] == {"rewrite_object": "ok"}, report
    r, _ = step(cli, g, expect=2)
    assert r.json["error"]["code"] == "issue_fix.tree_mismatch", r
    assert subprocess.run(["git", "-C", str(origin_of(repo)), "for-each-ref"], capture_output=True,
                          text=True).stdout == ""
    s = state(cli, g)
    assert s["phase"] == "fix" and s["log"][-1]["outcome"] == "tree_mismatch"


FALLBACK = r'''
import json, os, sys
import attrs
from loopx.sandbox.confine_policy import Policy
# The step's policy as enforced where no mount namespace can be had (nothing pinned or mounted),
# connections left alone: the file rules alone are under test.
policy, tries = Policy.load(sys.argv[1]).unpinned(), json.loads(sys.argv[2])
attrs.evolve(policy, deny_tcp=()).enforce()
out = {}
for name, path in tries.items():
    try:
        with open(path, "a") as f:
            f.write("")
        out[name] = "ok"
    except OSError as exc:
        out[name] = "refused"
print(json.dumps(out))
'''


def test_without_a_mount_namespace_git_metadata_stays_read_only(cli, tmp_path):
    """The policy a step gets where no mount namespace can be had (an unprivileged user on a
    kernel that forbids user namespaces): enforced for real with Landlock alone."""
    from loopx.testing import landlock_step

    repo = make_project(tmp_path)
    g = start(cli, repo)["goal_id"]
    s, wt, common, gitdir = _layout(cli, g)
    cases = {
        # An Issue-Fix worktree: git's metadata is outside it; its files and new files are the agent's.
        wt: {"common_config": common / "config", "common_commondir": common / "commondir",
             "main_ref": common / "refs" / "heads" / "main", "worktree_commondir": gitdir / "commondir",
             "worktree_index": gitdir / "index", "edit": wt / "calc.py", "new_file": wt / "new.py",
             "git_file": wt / ".git"},
        # A checkout as the workdir: its .git is left out (and so is creating at its top).
        repo: {"common_config": common / "config", "common_commondir": common / "commondir",
               "main_ref": common / "refs" / "heads" / "main", "hook": common / "hooks" / "pre-push",
               "edit": repo / "calc.py"},
    }
    expected = {"edit": "ok", "new_file": "ok", "git_file": "ok"}  # the .git file: LoopX checks it instead
    for workdir, tries in cases.items():
        step_ = landlock_step(cli.url, str(workdir))
        try:
            text = Path(step_.policy_file).read_text()
        finally:
            step_.close()
        # By file: the rules list every sibling of a hidden path, past one argument's 128 KiB
        # when /tmp is full of other sessions' directories.
        policy_path = tmp_path / f"policy-{len(list(tmp_path.iterdir()))}.json"
        policy_path.write_text(text)
        p = subprocess.run([sys.executable, "-c", FALLBACK, str(policy_path),
                            json.dumps({k: str(v) for k, v in tries.items()})], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        got = json.loads(p.stdout)
        assert got == {k: expected.get(k, "refused") for k in tries}, (workdir, got)
    assert not (common / "commondir").exists() and not (common / "hooks" / "pre-push").exists()
