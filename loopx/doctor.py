"""``loopx doctor``: whether this machine and registry are ready for agents, in one place.

Each check says what it found, whether that is ``ok``, a ``warn`` (worth knowing, nothing to fix
for LoopX to work) or a ``fail`` (something needs fixing), and the command that fixes it:
confinement (what the kernel offers and what LoopX will use), the agent CLIs (installed version,
logged in: :mod:`loopx.views.agent_login`, no model call), the registry's integrity key and its mode,
the registry (schema, the damage detectors' summary), where notifications go (a test delivery
only when asked), the workers' heartbeats, and the plugins with their capabilities. Nothing is
written, except the test notification's delivery record when one is asked for.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

OK, WARN, FAIL = "ok", "warn", "fail"


def _check(name: str, status: str, summary: str, details: dict | None = None, fix: str | None = None) -> dict:
    return {"name": name, "status": status, "summary": summary, "details": details or {}, "fix": fix}


def run(url: str | None, *, notify_test: bool = False) -> dict:
    """Every check, in order; ``ok`` is false when one of them failed."""
    checks = [confinement()]
    opened = _open(url)
    reg, registry_check = opened
    try:
        values = _settings(reg)
        checks.append(agent_clis(values))
        checks += [key(reg), registry_check or registry(reg), notifications(reg, values, notify_test),
                   workers(reg), plugins()]
    finally:
        if reg is not None:
            reg.close()
    return {"ok": all(c["status"] != FAIL for c in checks), "checks": checks}


# -- confinement -----------------------------------------------------------------------------------

_NAMESPACES = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
newns, newuser = 0x20000, 0x10000000
if libc.unshare(newns) == 0:
    print("mount")
elif libc.unshare(newuser | newns) == 0:
    print("user+mount")
else:
    print("none", os.strerror(ctypes.get_errno()))
"""


def _namespaces() -> str:
    """``mount`` (root: a private mount namespace), ``user+mount`` (an unprivileged user namespace
    with one), or ``none ...``: asked of a throwaway child, as the turn's watcher would."""
    try:
        p = subprocess.run([sys.executable, "-I", "-S", "-c", _NAMESPACES], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"none {exc}"
    return p.stdout.strip() or f"none (exit {p.returncode})"


def _cgroup() -> dict:
    """cgroup v2 and whether this user's own cgroup is delegated (writable, with controllers)."""
    if not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return {"v2": False, "delegated": False}
    own = ""
    try:
        with open("/proc/self/cgroup") as f:
            own = next((ln.split("::", 1)[1].strip() for ln in f if ln.startswith("0::")), "")
    except OSError:
        pass
    where = os.path.join("/sys/fs/cgroup", own.lstrip("/"))
    try:
        with open(os.path.join(where, "cgroup.controllers")) as f:
            controllers = f.read().split()
    except OSError:
        controllers = []
    return {"v2": True, "cgroup": own, "controllers": controllers,
            "delegated": bool(controllers) and os.access(where, os.W_OK)}


def confinement() -> dict:
    """What this kernel offers (Landlock ABI, namespaces, bubblewrap, cgroup v2) and what LoopX uses."""
    from loopx.turn import confine
    from loopx.sandbox import landlock

    abi = landlock.abi() if sys.platform.startswith("linux") else 0
    backend = confine.backend()
    ns = _namespaces() if sys.platform.startswith("linux") else "none"
    bwrap = shutil.which("bwrap")
    cg = _cgroup() if sys.platform.startswith("linux") else {"v2": False, "delegated": False}
    uses = []
    if backend:
        uses.append(f"Landlock ABI {abi}" + (" (TCP rules: a PostgreSQL registry's port is denied)" if abi >= 4 else
                                              " (no TCP rules before ABI 4: a PostgreSQL port stays reachable)"))
        if backend == "bwrap":
            uses.append(f"each step in a world built by bubblewrap ({bwrap}: private /tmp, /dev/shm, /run, "
                        "$HOME but declared paths, its own PID namespace; docs/security.md)")
        else:
            uses.append("read-only paths pinned in a private mount namespace" if not ns.startswith("none") else
                        "no mount namespace: read-only paths kept out by listing their siblings")
            uses.append("NO world (LOOPX_CONFINE_BACKEND=landlock): your sockets, /proc and $HOME are reachable")
    details = {"landlock_abi": abi, "backend": backend, "namespaces": ns, "bubblewrap": bwrap,
               "cgroup_v2": cg["v2"], "cgroup_delegated": cg["delegated"], "loopx_uses": uses,
               "unconfined_opt_in": confine.opted_out(),
               "not_used": "LoopX does not use cgroups"}
    if backend is None:
        if confine.opted_out():
            return _check("confinement", WARN, "no Landlock here; steps run UNCONFINED (LOOPX_UNCONFINED is set)",
                          details, "a kernel with Landlock (5.13+, `lsm=landlock` on its command line)")
        if abi >= 1 and os.environ.get(confine.ENV_BACKEND) != "none":
            return _check("confinement", FAIL,
                          "bubblewrap cannot build a step's world here: every turn is refused "
                          "(confinement_unavailable)",
                          details, "install bubblewrap (`apt-get install bubblewrap`), or accept Landlock alone: "
                                   "export LOOPX_CONFINE_BACKEND=landlock (docs/security.md)")
        return _check("confinement", FAIL,
                      "no Landlock in this kernel: every turn is refused (confinement_unavailable)",
                      details, "boot a kernel with Landlock (5.13+, `lsm=...,landlock`), or accept unconfined steps: "
                               "export LOOPX_UNCONFINED=1 (docs/security.md)")
    kernel = (f"this kernel: Landlock ABI {abi}, namespaces {ns.split(' ', 1)[0]}, "
              f"bubblewrap {'at ' + bwrap if bwrap else 'not installed'}, cgroup v2 "
              f"{('delegated' if cg['delegated'] else 'not delegated') if cg['v2'] else 'absent'}")
    return _check("confinement", OK, f"{kernel}; LoopX uses {'; '.join(uses)}", details)


# -- agent CLIs ------------------------------------------------------------------------------------


def agent_clis(values: dict) -> dict:
    """Each agent CLI: installed (version), logged in. A failure only for an executor in use."""
    from loopx.views import agent_login

    wanted = {v for k, v in values.items() if k == "executor" or k.startswith("executor.")}
    found, status, fixes, parts = [], OK, [], []
    for host in agent_login.HOSTS:
        p = agent_login.probe(host)
        found.append(p)
        bad = not p["installed"] or p["logged_in"] is False
        if bad:
            status = FAIL if host in wanted else (WARN if status == OK else status)
            fixes.append(f"{host}: {p['fix']}")
        state = ("not installed" if not p["installed"] else
                 f"{p['version'] or 'version unknown'}, {p['how']}")
        parts.append(f"{host}: {state}")
    return _check("agent CLIs", status, "; ".join(parts), {"clis": found, "executors_configured": sorted(wanted)},
                  "; ".join(fixes) or None)


# -- the registry and its key ----------------------------------------------------------------------


def _open(url: str | None):
    """(the registry opened read-only, or None; the registry check when it cannot be opened)."""
    from loopx.values.errors import LoopxError
    from loopx.ledger.registry import Registry, display_url, resolve_url

    resolved = resolve_url(url)
    if "://" not in resolved and not os.path.exists(resolved):
        return None, _check("registry", WARN, f"no registry at {resolved} yet (the first command that writes makes it)",
                            {"url": resolved}, f"loopx --registry {resolved} registry init")
    try:
        return Registry.open(resolved, readonly=True), None
    except LoopxError as err:
        return None, _check("registry", FAIL, f"{display_url(resolved)}: {err.message}", {"code": err.code},
                            "loopx registry info")


def _settings(reg) -> dict:
    if reg is None:
        return {}
    from loopx.domain.supervision import settings

    with reg.read() as tx:
        try:
            return settings(tx)
        except Exception:  # noqa: BLE001 - a registry from before settings: none set
            return {}


def key(reg) -> dict:
    """The registry's integrity key: present, mode 0600 in a 0700 directory."""
    from loopx.ledger import keys

    if reg is None:
        return _check("integrity key", WARN, "no registry open: no key to check")
    with reg.read() as tx:
        rid = keys.stored_id(tx)
    if rid is None:
        return _check("integrity key", WARN, "the registry is not keyed yet (the first write keys it)")
    path = keys.key_path(rid)
    details = {"registry_id": rid, "path": str(path)}
    if not path.exists():
        return _check("integrity key", FAIL, f"missing: {path} (writes are refused: integrity_key_missing)", details,
                      f"copy {path.name} from the machine and user that made the registry into {path.parent}, "
                      "or, if it is lost: loopx registry rekey --adopt")
    mode, dir_mode = stat.S_IMODE(path.stat().st_mode), stat.S_IMODE(path.parent.stat().st_mode)
    details.update(mode=f"{mode:04o}", dir_mode=f"{dir_mode:04o}")
    loose = [f"chmod 600 {path}"] if mode & 0o077 else []
    loose += [f"chmod 700 {path.parent}"] if dir_mode & 0o077 else []
    if loose:
        return _check("integrity key", FAIL, f"{path} is mode {mode:04o} in a directory of mode {dir_mode:04o}: "
                                             "others may read it", details, " && ".join(loose))
    if keys.load(rid) is None:
        return _check("integrity key", FAIL, f"{path} is not a key (32 bytes, hex)", details,
                      "loopx registry rekey --adopt")
    return _check("integrity key", OK, f"{path} (mode 0600)", details)


def registry(reg) -> dict:
    """Schema version against this LoopX's, and the damage detectors' findings by code."""
    from loopx.domain import damage
    from loopx.ledger.registry import display_url
    from loopx.store import schema

    version = reg.store.schema_version()
    details = {"url": display_url(reg.store.url), "schema_version": version, "schema_supported": schema.CURRENT_VERSION}
    report = damage.check(reg)
    by_code: dict[str, int] = {}
    for f in report["findings"]:
        by_code[f["code"]] = by_code.get(f["code"], 0) + 1
    details.update(findings=by_code, goals_checked=report["checked"]["goals"])
    where = f"{details['url']}: schema {version} (this LoopX: {schema.CURRENT_VERSION}), " \
            f"{report['checked']['goals']} goals checked"
    if version < schema.CURRENT_VERSION:
        return _check("registry", FAIL, f"{where}; behind this LoopX", details,
                      "any command that writes migrates it (e.g. loopx registry init)")
    if report["findings"]:
        damaged = [f for f in report["findings"] if f.get("severity") != damage.HOUSEKEEPING]
        counts = ", ".join(f"{c} {n}" for c, n in sorted(by_code.items()))
        return _check("registry", FAIL if damaged else WARN, f"{where}; found {counts}", details,
                      "the installed repair capability's check, then its fix (loopx capabilities list names it)")
    return _check("registry", OK, f"{where}; no damage found", details)


# -- notifications, workers, plugins ----------------------------------------------------------------


def notifications(reg, values: dict, send_test: bool) -> dict:
    """Where a "needs you" goes; with ``send_test``, one test delivery through each target."""
    from loopx.seam import plugins as plugin_manager

    hooks = plugin_manager.hooks()
    targets = {k: values[k] for k in ("notify.command", "notify.webhook") if values.get(k)}
    hooked = bool(hooks.implemented(hooks.notify))
    details = {"targets": targets, "plugin_hook": hooked}
    if not targets and not hooked:
        return _check("notifications", WARN, "no target: nobody is told when a goal needs a person", details,
                      "loopx config set notify.command 'CMD' (or notify.webhook https://...)")
    names = ", ".join([*(k.split(".")[1] for k in targets), *(["a plugin's hook"] if hooked else [])])
    if not send_test or reg is None:
        return _check("notifications", OK, f"sent by {names} (`loopx doctor --notify-test` sends a test)", details)
    from loopx.values import clock
    from loopx.views import notify
    from loopx.ledger.registry import display_url

    now = clock.now()
    payload = {"schema": notify.SCHEMA, "id": f"doctor:{now}", "goal_id": "-", "title": "", "decision": "ask_user",
               "reason": "doctor_test", "message": "loopx doctor: a test notification; nothing needs you",
               "commands": [], "command": "", "at": now, "registry": display_url(reg.store.url)}
    from loopx.ledger.registry import Registry

    with Registry.open(reg.store.url, create=False) as writable:  # the delivery is recorded (notify list)
        results = notify.deliver(writable, payload, values)
    details["test"] = results
    failed = sorted(k for k, v in results.items() if v == "failed")
    if failed:
        return _check("notifications", FAIL, f"the test delivery failed through {', '.join(failed)}", details,
                      "loopx notify list (what each attempt answered), then fix or replace the target")
    return _check("notifications", OK, f"test delivered through {', '.join(sorted(results))}", details)


def workers(reg) -> dict:
    """Workers seen lately by their heartbeats: running, stopped, died."""
    if reg is None:
        return _check("workers", WARN, "no registry open")
    from loopx.domain.supervision import workers as seen

    with reg.read() as tx:
        rows = seen(tx)
    running = [w for w in rows if w["state"] == "running"]
    died = [w for w in rows if w["state"] == "died"]
    details = {"workers": rows}
    if died and not running:
        w = died[0]
        return _check("workers", FAIL, f"worker {w['id']} (pid {w['pid']} on {w['host']}) stopped beating at "
                                       f"{w['last_beat_at']}; none running", details,
                      "systemctl --user restart loopx-worker (or start `loopx worker`)")
    if not running:
        return _check("workers", WARN, "no worker running: turns run only when someone asks", details,
                      "loopx worker (docs/worker.md)")
    text = ", ".join(f"{w['id']} (pid {w['pid']} on {w['host']}, {len(w['goals'])} turns)" for w in running)
    return _check("workers", OK, f"{len(running)} running: {text}", details)


def plugins() -> dict:
    """Installed plugins with the capabilities they declare; a plugin that failed to load fails."""
    from loopx.seam import capabilities
    from loopx.seam import plugins as plugin_manager

    found = plugin_manager.describe()
    caps = capabilities.load()
    by_plugin: dict[str, list[str]] = {}
    for name, cap in caps.items():
        by_plugin.setdefault(getattr(cap, "plugin", None) or "?", []).append(name)
    listed = [{**p, "capabilities": sorted(by_plugin.get(p["name"], []))} for p in found]
    broken = [p for p in listed if p.get("error")]
    text = ", ".join(p["name"] + (f" [{', '.join(p['capabilities'])}]" if p["capabilities"] else "")
                     for p in listed if not p.get("error"))
    if broken:
        return _check("plugins", FAIL, f"{broken[0]['name']} failed to load: {broken[0]['error']}", {"plugins": listed},
                      f"loopx plugins uninstall {broken[0]['name']} (or LOOPX_DISABLE_PLUGINS={broken[0]['name']})")
    return _check("plugins", OK, text or "none", {"plugins": listed})
