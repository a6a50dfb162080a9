"""What a goal's new workspace costs: ``python bench/bench_workspace.py [--files 10000] [--repeat 5]``.

Builds a git repository of ``--files`` small files (in a temporary directory, committed once),
then measures, ``--repeat`` times each, the median and p95 of:

* **new workspace**: :func:`loopx.domain.workspace.ensure` for a fresh goal (``git worktree add`` on a
  branch of its own from a snapshot of the checkout, and the event that records it);
* **again**: the same call for a goal whose workspace exists (what every later turn pays);
* **diff**: :func:`loopx.domain.workspace.diff` after the agent changed one file;
* **discard**: :func:`loopx.domain.workspace.discard`;

beside two floors measured in the same run: ``git worktree add`` alone and ``git status`` of
the checkout. Target (issue 35): a new workspace for a 10,000-file repository in at most 1 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _p95(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def _git(repo, *args):
    """git as LoopX runs it (loopx.values.gitcmd's environment), so the floor differs only in the work."""
    from loopx.values import gitcmd

    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=gitcmd.environment())


def _repo(path: Path, files: int) -> Path:
    path.mkdir()
    _git(path, "init", "-q")
    for i in range(files):
        d = path / f"pkg{i // 100:03d}"
        d.mkdir(exist_ok=True)
        (d / f"mod{i:05d}.py").write_text(f"VALUE = {i}\n")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "base")
    return path


CPU: dict = {}


def _timed(fn, name=None):
    """Wall ms of ``fn()``; its CPU ms (this process and the git it started) kept in :data:`CPU`."""
    import resource

    def cpu():
        s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

    t, c = time.perf_counter(), cpu()
    fn()
    if name:
        CPU.setdefault(name, []).append((cpu() - c) * 1000)
    return (time.perf_counter() - t) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-workspace-") as tmp:
        tmp = Path(tmp)
        os.environ["XDG_DATA_HOME"] = str(tmp / "data")
        os.environ["XDG_CONFIG_HOME"] = str(tmp / "config")
        from loopx.domain import goals, workspace
        from loopx.ledger.registry import Registry

        repo = _repo(tmp / "repo", args.files)
        reg = Registry.open(str(tmp / "registry.db"))
        rows = {"new workspace": [], "again (exists)": [], "diff (1 file changed)": [], "discard": [],
                "floor: git worktree add": [], "floor: git status": []}
        for n in range(args.repeat):
            g = goals.create(reg, "user", title=f"bench {n}", project=str(repo))["id"]
            rows["new workspace"].append(_timed(lambda: workspace.ensure(reg, "user", g, default_project=str(repo)),
                                                "new workspace"))
            rows["again (exists)"].append(_timed(lambda: workspace.ensure(reg, "user", g, default_project=str(repo))))
            ws = Path(workspace.show(reg, g)["workspace"])
            (ws / "pkg000" / "mod00000.py").write_text("VALUE = -1\n")
            rows["diff (1 file changed)"].append(_timed(lambda: workspace.diff(reg, g)))
            rows["discard"].append(_timed(lambda: workspace.discard(reg, "user", g)))
            floor = tmp / f"floor{n}"
            rows["floor: git worktree add"].append(_timed(lambda: _git(repo, "worktree", "add", "-q", "-b",
                                                                       f"floor{n}", str(floor)),
                                                          "floor: git worktree add"))
            rows["floor: git status"].append(_timed(lambda: _git(repo, "status", "--porcelain")))
        reg.close()
    print(f"workspace of a {args.files:,}-file git repository, {args.repeat} runs (ms)")
    print(f"{'':<26}{'median':>10}{'p95':>10}{'cpu median':>12}")
    for name, xs in rows.items():
        cpu = f"{statistics.median(CPU[name]):>12.1f}" if name in CPU else ""
        print(f"{name:<26}{statistics.median(xs):>10.1f}{_p95(xs):>10.1f}{cpu}")
    print(f"load average while measured: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
          "(cpu: this process and its git children, a figure load does not inflate)")
    new, floor = statistics.median(rows["new workspace"]), statistics.median(rows["floor: git worktree add"])
    print(f"new workspace / git worktree add: {new / floor:.2f}x; target: new workspace <= 1000 ms "
          f"({'met' if new <= 1000 else 'NOT met'})")


if __name__ == "__main__":
    main()
