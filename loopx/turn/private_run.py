"""Private runs: a command LoopX runs on a step's behalf under a policy narrower than the agent's.

A capability sometimes runs code the agent wrote while the agent's turn goes on (Issue-Fix runs
the tests when the agent calls ``loopx issue-fix reproduce``: LoopX's process, through the
broker). Under the turn's own policy that run could be written by the agent - its shell runs
concurrently - so its results could not be trusted beyond the turn. Here:

* :func:`private_dir` makes a directory beneath LoopX's **private root**
  (``platformdirs.user_cache_dir("loopx")/private``). Every step's policy hides that root
  (:meth:`loopx.turn.confine.Step.policy`): an agent can neither read nor write beneath it, by any
  path (a symbolic link, ``/proc/PID/cwd``: Landlock checks the file reached, and a process
  cannot look into ``/proc`` of one confined by another domain);
* :func:`run_confined` runs a command under a policy of its own: it reads what a step may read
  (never LoopX's key, the registry or PostgreSQL's password files), writes only beneath the paths
  it is given (and a few devices), reaches no registry port, and gets an environment without the
  broker's address, ``LOOPX_*`` or registry credentials. Its domain is a sibling of the agent's,
  not nested in it: neither can write, signal or trace the other.

It **fails closed** with ``confinement_unavailable``: when Landlock is missing (unless the user
opted out with ``--unconfined`` / ``LOOPX_UNCONFINED=1``, or the turn itself runs unconfined by
the user's choice), when a writable path lies beneath what the active step may write, and when
the watcher cannot enforce the policy. The result says ``"confined"``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from loopx.turn import confine
from loopx.sandbox.confine_policy import Policy, PolicyError, Rule
from loopx.values.errors import LoopxError
from loopx.sandbox.process import SECRET_VARS, active_step, in_step, run_command, run_under_policy


def _remove_dead(root: str) -> None:
    """Remove directories left by a LoopX process that is gone (its pid is in the name)."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        pid = name.split("-", 2)[1] if name.count("-") >= 2 else ""
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            path = os.path.join(root, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        except OSError:
            pass


@contextlib.contextmanager
def private_dir(prefix: str = "run") -> Iterator[str]:
    """A new directory beneath the private root (its real path), removed on exit."""
    root = confine.ensure_root()
    _remove_dead(root)
    path = os.path.realpath(tempfile.mkdtemp(prefix=f"{prefix}-{os.getpid()}-", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _step_policy() -> tuple[bool, Policy | None]:
    """``(in a step, the step's policy or None)``; a policy file this LoopX cannot read refuses."""
    if not in_step():
        return False, None
    policy_file, _env = active_step()
    if policy_file is None:
        return True, None
    try:
        return True, Policy.load(policy_file)
    except PolicyError as exc:
        raise LoopxError("confinement_unavailable", f"cannot read the step's policy ({exc}); refusing to run "
                         "the command") from None


def _reads(step: Policy | None, registry_url: str | None) -> tuple[list[Rule], list[int]]:
    """The read rules and denied ports: the step's when in one (what the agent may read, which
    hides LoopX's secrets and the private root), else LoopX's secrets and the private root (other
    runs) hidden afresh; the run's own directory is added by its ``rw`` rule."""
    if step is not None:
        return list(step.reads()), list(step.deny_tcp)
    home = os.path.expanduser("~")
    hidden = [confine.real_path(confine.config_dir()), confine.real_path(os.path.join(home, ".pgpass")),
              confine.real_path(os.path.join(home, ".pg_service.conf")), confine.ensure_root()]
    if os.environ.get("PGPASSFILE"):
        hidden.append(confine.real_path(os.environ["PGPASSFILE"]))
    ports: list[int] = []
    if registry_url:
        reg_hidden, _ro, ports = confine.registry_paths(registry_url)
        hidden += reg_hidden
    read, _passed = confine.cover("/", hidden)
    return [Rule(p, "r") for p in read], ports


def run_confined(argv: list[str], *, writable: list[str], env: dict[str, str | None], timeout: float,
                 cwd: str | None = None, reap: bool = False, registry_url: str | None = None,
                 pass_fds: tuple[int, ...] = ()) -> dict[str, Any]:
    """Run ``argv`` (see :func:`loopx.sandbox.process.run_command`) under a policy of its own that writes
    only beneath ``writable`` (existing directories; use :func:`private_dir`), see the module
    docstring. ``registry_url`` names the registry to hide outside a step (inside one the step's
    policy already hides it). Returns ``run_command``'s result plus ``"confined"``.

    Raises ``confinement_unavailable`` rather than run the command less confined than asked.
    """
    stepping, step = _step_policy()
    scrub = {k: None for k in os.environ if k.startswith("LOOPX_") or k in SECRET_VARS}
    full_env = {**scrub, **env}
    if (step is None) if stepping else confine.opted_out():
        # The user chose to run unconfined (this turn, or LoopX): nothing to narrow.
        res = run_command(argv, env=full_env, timeout=timeout, cwd=cwd, reap=reap, confine=False, pass_fds=pass_fds)
        return {**res, "confined": False}
    if confine.backend() is None:
        confine.check()  # raises confinement_unavailable (the user did not opt out)
        raise LoopxError("confinement_unavailable", "cannot confine the command: Landlock is not available")
    roots = []
    for path in writable:
        real = os.path.realpath(path)
        if not os.path.isdir(real):
            raise LoopxError("confinement_unavailable", f"a private run's writable path is not a directory: {path}")
        near = step.writes_near(real) if step is not None else None
        if near is not None:
            raise LoopxError("confinement_unavailable", f"{path} is writable by the step itself ({near}): "
                             "not a private place to run in")
        roots.append(real)
    reads, ports = _reads(step, registry_url)
    writes = [Rule(r, "rw") for r in roots] + [Rule(d, "rw") for d in confine.DEVICES if os.path.exists(d)]
    policy = Policy(rules=tuple(reads + writes), deny_tcp=tuple(ports))
    fd, policy_file = tempfile.mkstemp(prefix=f"policy-{os.getpid()}-", suffix=".json", dir=confine.ensure_root())
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(policy.to_json())
        res = run_under_policy(argv, env=full_env, timeout=timeout, cwd=cwd, reap=reap, policy=policy_file,
                               pass_fds=pass_fds)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(policy_file)
    if res["exit_code"] == 126 and "[confinement_unavailable]" in res["output_tail"]:
        raise LoopxError("confinement_unavailable", f"the command was not started: {res['output_tail'].strip()[-300:]}")
    return {**res, "confined": True}
