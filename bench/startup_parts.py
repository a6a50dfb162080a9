"""Where should-run's instructions go, part by part: ``python bench/startup_parts.py GOAL_ID [--min 1.0]``.

Not a test; a tool for finding what to cut (bench/bench_instructions.py gives the totals). It
runs ``quota should-run --format json --goal-id GOAL_ID`` once under callgrind with
``--dump-before=sys_getallocatedblocks``: this script's child half (``--child``) calls
``sys.getallocatedblocks()`` as a marker at the start and end of every module import, every
attrs class built, and a few named LoopX functions, so callgrind writes one count per stretch
between two markers. The parent then prints the tree of parts (inclusive and own instructions)
down to ``--min`` million. The markers add ~4 % (more with many imports); a part's own count
is exact to a few thousand instructions. Run it with the registry environment the command needs
(``LOOPX_REGISTRY``, ``XDG_CONFIG_HOME``, ``XDG_CACHE_HOME``) and ``LOOPX_HOOK_TIMEOUT=600``
(under valgrind the contract hooks would run past their 2 s deadline and fail closed). The
import markers wrap ``_frozen_importlib._find_and_load``: a measuring tool only, never LoopX.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

#: Functions marked as parts of their own: ``{module: [function, ...]}``.
FUNCS = {
    "loopx.seam.plugins": ["hooks", "get_plugin_manager", "event_kinds"],
    "loopx.seam.capabilities": ["load"],
    "loopx.views.should_run": ["_plugin_answers", "_turn", "should_run"],
    "loopx.views.contract": ["veto", "contributions", "document", "decide"],
    "loopx.views.inputs": ["gather"],
    "loopx.domain.claims": ["stop_leftovers"],
    "loopx.cli.output": ["emit", "open_registry"],
}


def child(log: str, args: list[str]) -> None:
    """Run the command with markers; write the marker events to ``log`` at exit."""
    import atexit
    import runpy

    import _frozen_importlib as fi

    mark = sys.getallocatedblocks
    events: list[tuple[str, str]] = []
    mark()
    events.append(("push", "<start>"))
    find_and_load = fi._find_and_load

    def wrapfn(mod, name):
        fn = getattr(mod, name, None)
        if fn is None:
            return
        label = f"fn:{mod.__name__}.{name}"

        def wrapped(*a, **k):
            mark()
            events.append(("push", label))
            try:
                return fn(*a, **k)
            finally:
                mark()
                events.append(("pop", label))
        setattr(mod, name, wrapped)

    def load(name, import_):
        mark()
        events.append(("push", "import:" + name))
        try:
            module = find_and_load(name, import_)
        finally:
            mark()
            events.append(("pop", "import:" + name))
        for fn in FUNCS.get(name, ()):
            wrapfn(module, fn)
        if name == "attr._make":
            builder = module._ClassBuilder
            init, build = builder.__init__, builder.build_class

            def new_init(self, cls, *a, **k):
                mark()
                events.append(("push", f"attrs:{cls.__module__}.{cls.__qualname__}"))
                return init(self, cls, *a, **k)

            def new_build(self):
                try:
                    return build(self)
                finally:
                    mark()
                    events.append(("pop", "attrs"))
            builder.__init__, builder.build_class = new_init, new_build
        return module

    fi._find_and_load = load

    def dump():
        mark()
        events.append(("end", ""))
        with open(log, "w") as f:
            f.writelines(f"{e}\t{n}\n" for e, n in events)

    atexit.register(dump)
    sys.argv = ["loopx", *args]
    runpy.run_module("loopx", run_name="__main__", alter_sys=True)


def _count(path: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith("summary:"):
                return int(line.split()[1])
    return 0


class Part:
    """One stretch of the run: its own instructions and the parts inside it."""

    def __init__(self, name: str):
        self.name, self.own, self.parts = name, 0, []

    def total(self) -> int:
        return self.own + sum(p.total() for p in self.parts)

    def show(self, depth: int, least: float) -> None:
        if self.total() / 1e6 < least:
            return
        print(f"{'  ' * depth}{self.total() / 1e6:7.2f} M (own {self.own / 1e6:6.2f}) {self.name}")
        for p in self.parts:
            p.show(depth + 1, least)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        return child(sys.argv[2], sys.argv[3:])
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("goal_id")
    parser.add_argument("--min", type=float, default=1.0, help="smallest part shown, in million instructions")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loopx-bench-parts-") as d:
        log = os.path.join(d, "log")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=no",
                        "--dump-before=sys_getallocatedblocks", f"--callgrind-out-file={d}/cg",
                        sys.executable, os.path.abspath(__file__), "--child", log,
                        "--format", "json", "quota", "should-run", "--goal-id", args.goal_id],
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        root = Part("<interpreter start-up>")
        stack = [root]
        with open(log) as f:
            events = [line.rstrip("\n").split("\t") for line in f]
        for i, (event, name) in enumerate(events):
            stack[-1].own += _count(os.path.join(d, f"cg.{i + 1}"))
            if event == "push":
                stack[-1].parts.append(Part(name))
                stack.append(stack[-1].parts[-1])
            elif event == "pop":
                stack.pop()
        end = Part("<interpreter shut-down>")
        end.own = _count(os.path.join(d, "cg"))
        print(f"total {(root.total() + end.own) / 1e6:.1f} M instructions (markers included)")
        root.show(0, args.min)
        end.show(0, args.min)


if __name__ == "__main__":
    main()
