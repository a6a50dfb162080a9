"""Per-step resource limits: memory, process count and CPU time, and a clean end.

Each command a step runs (an action, a capability's child, an agent CLI: whatever
:func:`loopx.sandbox.process.run_command` starts while a step is active) runs in a :class:`Group` of
its own, made from the limits the contract shows (``agent_channel.limits``, from ``loopx config``
keys :data:`SETTING_KEYS`). What enforces each limit depends on the machine, and the contract
says which (:func:`mechanisms`):

* **cgroup v2** where a v2 hierarchy is mounted and our cgroup is writable: a child group with
  ``memory.max`` and ``pids.max`` when those controllers are delegated to it; ``cpu.stat`` counts
  the CPU time of every process in it (LoopX kills the group past the limit) and ``cgroup.kill``
  ends every process in it when the command ends.
* **cgroup v1** (hybrid machines; as root): a group in the ``memory`` hierarchy
  (``memory.limit_in_bytes``), the ``pids`` hierarchy (``pids.max``) and ``cpuacct``
  (``cpuacct.usage``) where those are mounted and writable; at the end every pid listed in the
  group is killed until none is left.
* **rlimits** otherwise, per process (each inherits them): ``RLIMIT_DATA`` for memory (not
  ``RLIMIT_AS``: V8 and the JVM reserve far more address space than they use), ``RLIMIT_CPU``,
  and ``RLIMIT_NPROC`` for a user other than root (it counts all of that user's processes, so it
  is set to those running now plus the limit; the kernel does not apply it to root). The
  watcher's subreaper ends the command's leftovers.

A command that hit a limit is reported with a stable reason (:data:`REASONS`) in its result
(``limit_hit``), which ``loopx exec`` and the agent executors record as evidence on the run.
This module imports nothing of LoopX (it sits beside :mod:`loopx.sandbox.process`).
"""

from __future__ import annotations

import os

#: The defaults (``loopx config set limits.<name> N``, or ``none`` for no limit).
DEFAULTS = {"memory_mb": 4096, "processes": 512, "cpu_seconds": 3600}
SETTING_KEYS = tuple(f"limits.{name}" for name in DEFAULTS)
#: The stable reason a command that hit each limit fails with (also error codes, loopx.values.errors).
REASONS = {"memory_mb": "step_memory_limit", "processes": "step_process_limit", "cpu_seconds": "step_cpu_limit"}
#: The environment variable the watcher reads (and removes) to join the group and set rlimits.
ENV = "LOOPX_STEP_LIMITS"
#: ``LOOPX_STEP_CGROUPS=0``: use no cgroup (rlimits and the watcher's subreaper only), for a
#: machine whose cgroups misbehave.
NO_CGROUPS = "LOOPX_STEP_CGROUPS"
_probed: dict | None = None
_count = 0


def check_setting(key: str, value: str) -> str:
    """A limit's value as ``loopx config set`` keeps it: a positive whole number, or ``none``."""
    if value.strip().lower() == "none":
        return "none"
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1 or number > 10**9:
        raise ValueError(f"{key} is a whole number from 1 to 1000000000, or none")
    return str(number)


def from_settings(values: dict) -> dict:
    """``{"memory_mb", "processes", "cpu_seconds"}`` from the settings (``None``: no limit)."""
    out = {}
    for name, default in DEFAULTS.items():
        raw = values.get(f"limits.{name}")
        if raw is None:
            out[name] = default
        elif str(raw).lower() == "none":
            out[name] = None
        else:
            try:
                out[name] = max(1, int(raw))
            except ValueError:
                out[name] = default
    return out


def contract_entry(values: dict) -> dict:
    """What the contract shows: the limits and, for each, what enforces it here (``null``: nothing)."""
    limits = from_settings(values)
    found = mechanisms()
    return {**limits, "enforced_by": {name: (found[name] if limits[name] is not None else None)
                                      for name in DEFAULTS} | {"clean_end": found["clean_end"]}}


# ------------------------------------------------------------------------------ the machine


def _hierarchies() -> tuple[str | None, dict[str, str]]:
    """``(cgroup v2 mount, {v1 controller: mount})`` from ``/proc/self/mountinfo``."""
    v2, v1 = None, {}
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, {}
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup2" and v2 is None:
            v2 = fields[4]
        elif tail[0] == "cgroup":
            for option in tail[2].split(","):
                if option in ("memory", "pids", "cpuacct"):
                    v1.setdefault(option, fields[4])
    return v2, v1


def _own() -> dict[str, str]:
    """This process's cgroup per hierarchy: ``{"": v2 path, controller: v1 path}``."""
    out = {}
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as f:
            for line in f.read().splitlines():
                _id, names, path = line.split(":", 2)
                for name in names.split(",") if names else [""]:
                    out[name] = path
    except (OSError, ValueError):
        pass
    return out


def _writable(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK)


def _places() -> dict:
    """Where groups are made: ``{"v2": dir, "v2_controllers": set, "v1": {controller: dir}}``."""
    out: dict = {"v2": None, "v2_controllers": set(), "v1": {}}
    if os.environ.get(NO_CGROUPS) == "0":
        return out
    v2_mount, v1_mounts = _hierarchies()
    own = _own()
    if v2_mount and "" in own:
        base = os.path.join(v2_mount, own[""].lstrip("/"))
        if _writable(base) and os.path.exists(os.path.join(base, "cgroup.procs")):
            out["v2"] = base
            try:
                with open(os.path.join(base, "cgroup.subtree_control"), encoding="utf-8") as f:
                    enabled = set(f.read().split())
            except OSError:
                enabled = set()
            try:
                with open(os.path.join(base, "cgroup.controllers"), encoding="utf-8") as f:
                    offered = set(f.read().split())
            except OSError:
                offered = set()
            for want in ("memory", "pids"):
                if want in offered and want not in enabled:
                    try:  # refused (EBUSY) when our own group holds processes and is not the root
                        with open(os.path.join(base, "cgroup.subtree_control"), "w", encoding="utf-8") as f:
                            f.write(f"+{want}")
                        enabled.add(want)
                    except OSError:
                        pass
            out["v2_controllers"] = enabled & {"memory", "pids"}
    for controller, mount in v1_mounts.items():
        base = os.path.join(mount, own.get(controller, "/").lstrip("/"))
        if _writable(base):
            out["v1"][controller] = base
    return out


def _places_cached() -> dict:
    global _probed
    if _probed is None:
        _probed = _places()
    return _probed


def _use_v2(places: dict) -> bool:
    """A v2 group when it enforces something, or when no v1 pids group can end the command's
    processes: joining a v2 group costs ~10 ms a command (a v1 group ~0.1 ms), so on a hybrid
    machine whose v2 hierarchy has no controllers v1 does the work."""
    return bool(places["v2"]) and (bool(places["v2_controllers"]) or "pids" not in places["v1"])


def mechanisms() -> dict:
    """What enforces each limit on this machine: ``{"memory_mb", "processes", "cpu_seconds",
    "clean_end"}``, each ``"cgroup_v2"``, ``"cgroup_v1"``, an rlimit's name, ``"subreaper"``
    (the clean end without cgroups) or ``None`` (not enforced here)."""
    places = _places_cached()
    v2, controllers, v1 = places["v2"], places["v2_controllers"], places["v1"]
    use_v2 = _use_v2(places)
    root = os.geteuid() == 0 if hasattr(os, "geteuid") else False
    return {
        "memory_mb": "cgroup_v2" if "memory" in controllers else "cgroup_v1" if "memory" in v1 else "rlimit_data",
        "processes": ("cgroup_v2" if "pids" in controllers else "cgroup_v1" if "pids" in v1
                      else None if root else "rlimit_nproc"),
        "cpu_seconds": "cgroup_v2" if v2 and use_v2 else "cgroup_v1" if "cpuacct" in v1 else "rlimit_cpu",
        "clean_end": "cgroup_v2" if v2 and use_v2 else "cgroup_v1" if "pids" in v1 else "subreaper",
    }


# ------------------------------------------------------------------------------ one command's group


class Group:
    """The cgroups (or rlimits) of one command a step runs; :meth:`end` kills what is left in it."""

    def __init__(self, limits: dict):
        global _count
        _count += 1
        self.limits = {name: limits.get(name, DEFAULTS[name]) for name in DEFAULTS}
        self.how = mechanisms()
        self.dirs: dict[str, str] = {}  # "v2" or a v1 controller -> the group's directory
        self.rlimits: list[tuple[int, int, int]] = []
        self.hit: str | None = None
        places = _places_cached()
        name = f"loopx-step-{os.getpid()}-{_count}"
        _remove_dead([places["v2"], *places["v1"].values()])
        if _use_v2(places):
            self._make("v2", os.path.join(places["v2"], name))
        for controller in ("pids", "memory", "cpuacct"):
            if controller == "cpuacct" and "v2" in self.dirs:
                continue  # the v2 group's cpu.stat counts it
            if controller in places["v1"] and (controller != "pids" or "pids" not in places["v2_controllers"]):
                self._make(controller, os.path.join(places["v1"][controller], name))
        mem, procs, cpu = (self.limits[k] for k in DEFAULTS)
        if mem is not None:
            self._limit_memory(mem * 1024 * 1024)
        if procs is not None:
            self._limit_processes(procs)
        if cpu is not None:
            import resource

            # Per process, beside the group's count: a single busy process gets SIGXCPU.
            self.rlimits.append((resource.RLIMIT_CPU, cpu, cpu + 5))

    def _make(self, key: str, path: str) -> None:
        try:
            os.mkdir(path)
            self.dirs[key] = path
        except OSError:
            pass  # not here after all: the limit falls back (mechanisms() said what was probed)

    def _write(self, key: str, name: str, value: str) -> bool:
        if key not in self.dirs:
            return False
        try:
            with open(os.path.join(self.dirs[key], name), "w", encoding="ascii") as f:
                f.write(value)
            return True
        except OSError:
            return False

    def _limit_memory(self, limit: int) -> None:
        import resource

        if self._write("v2", "memory.max", str(limit)):
            self._write("v2", "memory.swap.max", "0")
            self.how["memory_mb"] = "cgroup_v2"
        elif self._write("memory", "memory.limit_in_bytes", str(limit)):
            self._write("memory", "memory.memsw.limit_in_bytes", str(limit))  # no escape into swap
            self.how["memory_mb"] = "cgroup_v1"
        else:
            self.rlimits.append((resource.RLIMIT_DATA, limit, limit))
            self.how["memory_mb"] = "rlimit_data"

    def _limit_processes(self, limit: int) -> None:
        import resource

        if self._write("v2", "pids.max", str(limit)):
            self.how["processes"] = "cgroup_v2"
        elif self._write("pids", "pids.max", str(limit)):
            self.how["processes"] = "cgroup_v1"
        elif os.geteuid() != 0:
            running = _processes_of(os.geteuid())
            self.rlimits.append((resource.RLIMIT_NPROC, running + limit, running + limit))
            self.how["processes"] = "rlimit_nproc"
        else:
            self.how["processes"] = None

    def env(self) -> str:
        """The watcher's instructions (:data:`ENV`), one a line: a ``cgroup.procs`` file to join,
        or ``R resource soft hard`` (plain text: the watcher does not import json for it)."""
        lines = [os.path.join(d, "cgroup.procs") for d in self.dirs.values()]
        lines += [f"R {res} {soft} {hard}" for res, soft, hard in self.rlimits]
        return "\n".join(lines)

    def ends_all(self) -> bool:
        """Whether :meth:`end` finds every process of the command (a v2 group, or a v1 pids group)."""
        return "v2" in self.dirs or "pids" in self.dirs

    def cpu_seconds(self) -> float | None:
        """CPU time every process of the group used so far (``None`` without a group to count it)."""
        if "v2" in self.dirs:
            stat = _read(self.dirs["v2"], "cpu.stat")
            for line in stat.splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
        if "cpuacct" in self.dirs:
            raw = _read(self.dirs["cpuacct"], "cpuacct.usage").strip()
            if raw.isdigit():
                return int(raw) / 1e9
        return None

    def counts_cpu(self) -> bool:
        """Whether :meth:`over_cpu` can see the whole group's CPU time (else only the rlimit acts)."""
        return self.limits["cpu_seconds"] is not None and ("v2" in self.dirs or "cpuacct" in self.dirs)

    def over_cpu(self) -> bool:
        """Whether the group used more CPU time than allowed (then it is the reason)."""
        used = self.cpu_seconds()
        if used is not None and self.limits["cpu_seconds"] is not None and used > self.limits["cpu_seconds"]:
            self.hit = REASONS["cpu_seconds"]
            return True
        return False

    def reason(self, returncode: int | None) -> str | None:
        """The limit the command hit, if one did (read once it ended)."""
        if self.hit:
            return self.hit
        if _counter(self.dirs.get("v2"), "memory.events", "oom_kill") or \
                _counter(self.dirs.get("memory"), "memory.oom_control", "oom_kill"):
            return REASONS["memory_mb"]
        if _counter(self.dirs.get("v2"), "pids.events", "max") or _counter(self.dirs.get("pids"), "pids.events", "max"):
            return REASONS["processes"]
        import signal  # not at the top: every should-run's contract imports this module; signal's enums cost


        if returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
            return REASONS["cpu_seconds"]
        return None

    def end(self) -> None:
        """Kill every process left in the group, then remove it."""
        import signal
        import time

        if "v2" in self.dirs:
            self._write("v2", "cgroup.kill", "1")
        for _ in range(200):
            pids = set()
            for path in self.dirs.values():
                pids |= {int(p) for p in _read(path, "cgroup.procs").split() if p.isdigit()}
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
        for path in self.dirs.values():
            for _ in range(100):  # a killed process leaves its group a moment after it is reaped
                try:
                    os.rmdir(path)
                    break
                except OSError:
                    time.sleep(0.01)


def for_step(step) -> Group | None:
    """The group for a command started under ``step`` (a :class:`loopx.turn.confine.Step`), if the
    step has limits (``step.limits``, set by the turn from its contract)."""
    limits = getattr(step, "limits", None) if step is not None else None
    return Group(limits) if isinstance(limits, dict) else None


def _read(folder: str, name: str) -> str:
    try:
        with open(os.path.join(folder, name), encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _counter(folder: str | None, name: str, key: str) -> int:
    if not folder:
        return 0
    for line in _read(folder, name).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return 0


def _processes_of(uid: int) -> int:
    """How many processes ``uid`` runs now (``RLIMIT_NPROC`` counts them all)."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                count += os.stat(f"/proc/{name}").st_uid == uid
            except OSError:
                pass
    return count


def _remove_dead(bases: list) -> None:
    """Remove the empty groups a killed LoopX left (its pid is in the name)."""
    for base in bases:
        if not base:
            continue
        try:
            names = [n for n in os.listdir(base) if n.startswith("loopx-step-")]
        except OSError:
            continue
        for name in names:
            pid = name.split("-")[2]
            if pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}"):
                try:
                    os.rmdir(os.path.join(base, name))
                except OSError:
                    pass
