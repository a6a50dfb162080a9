"""The plugin API (``loopx.api``): documented name by name, the only thing shipped plugins import,
usable outside a command, and unable to write as another actor."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, loopx_env

PLUGIN_PACKAGES = [
    ROOT / "plugins" / "issue_fix" / "loopx_issue_fix",
    ROOT / "plugins" / "self_repair" / "loopx_self_repair",
    ROOT / "plugins" / "approvals" / "loopx_approvals",
    ROOT / "examples" / "plugins" / "loopx-seed-domain" / "loopx_seed_domain",
]


@pytest.mark.parametrize("package", PLUGIN_PACKAGES, ids=lambda p: p.name)
def test_shipped_plugins_import_only_the_plugin_api(package):
    from loopx import api

    assert package.is_dir()
    assert api.testing.check_plugin_imports(package) == []


#: Parameters that hold a value of the seam, each with the API's type for it (docs/plugins.md,
#: "Type-checking a plugin"): annotated ``Any``, mypy checks nothing a plugin does with them.
SEAM_PARAMETERS = {"tx": "ReadTx", "goal": "goals.Goal", "w": "Writer", "writer": "Writer", "cw": "Writer",
                   "gate": "gates.Gate", "run": "runs.Run", "reg": "Registry", "registry": "Registry"}


def _seam_values_typed_any(package) -> list[str]:
    """``file:line: parameter: annotation`` for every parameter of ``SEAM_PARAMETERS`` a module of
    ``package`` annotates as ``Any`` (alone, in a union or in quotes), attributes of a class included."""
    import ast

    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                named = [(p.arg, p.annotation) for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                named = [(node.target.id, node.annotation)]
            else:
                continue
            for name, annotation in named:
                if name in SEAM_PARAMETERS and annotation is not None:
                    text = ast.unparse(annotation).strip("'\"")
                    if {part.strip() for part in text.replace("Optional[", "").rstrip("]").split("|")} & \
                            {"Any", "typing.Any"}:
                        found.append(f"{path.relative_to(package.parent)}:{node.lineno}: {name}: {text}")
    return found


@pytest.mark.parametrize("package", PLUGIN_PACKAGES, ids=lambda p: p.name)
def test_no_plugin_types_a_seam_value_as_any(package):
    """A plugin annotates the seam's values with the API's types (``tx: ReadTx``, ``goal:
    goals.Goal``, ``w: Writer``, ``gate: gates.Gate``, ``run: runs.Run``, ``reg: Registry``), never
    ``Any``: free JSON may be ``dict[str, Any]``, a transaction or a goal may not."""
    assert _seam_values_typed_any(package) == []


def test_the_any_check_finds_a_seam_value_typed_any(tmp_path):
    pkg = tmp_path / "loopx_loose"
    pkg.mkdir()
    (pkg / "plugin.py").write_text("from typing import Any\n\n\ndef veto(tx: Any, goal: 'Any', data: Any) -> None: ...\n"
                                   "def decided(writer: Any | None, *, gate: Any, run: dict[str, Any]) -> None: ...\n"
                                   "class Step:\n    run: Any\n")
    assert _seam_values_typed_any(pkg) == ["loopx_loose/plugin.py:4: tx: Any", "loopx_loose/plugin.py:4: goal: Any",
                                           "loopx_loose/plugin.py:5: writer: Any | None",
                                           "loopx_loose/plugin.py:5: gate: Any", "loopx_loose/plugin.py:7: run: Any"]


def test_the_import_check_names_every_other_loopx_import(tmp_path):
    from loopx import api

    pkg = tmp_path / "loopx_bad"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from loopx import hookimpl\nimport loopx.api\nfrom loopx.api import cli\n")
    (pkg / "deep.py").write_text("def f():\n    from loopx.store import schema\n    import loopx.ledger.log\n"
                                 "    from loopx.values import clock\n")
    problems = api.testing.check_plugin_imports(pkg)
    assert problems == ["loopx_bad/deep.py:2: from loopx.store import schema",
                        "loopx_bad/deep.py:3: import loopx.ledger.log",
                        "loopx_bad/deep.py:4: from loopx.values import clock"]


def test_every_api_name_resolves_and_is_documented():
    import loopx.api as api

    guide = (ROOT / "docs" / "plugins.md").read_text()
    section = guide[guide.index("## The plugin API"):guide.index("## Every hook")]
    missing = [n for n in api.__all__ if not re.search(rf"`{re.escape(n)}[`(.]", section)]
    assert not missing, f"docs/plugins.md does not document loopx.api names: {missing}"
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    assert api.hookimpl is __import__("loopx").hookimpl


def _type_checking_imports(path) -> dict[str, str]:
    """The names the ``if TYPE_CHECKING:`` block of ``path`` imports, as ``{name: "module:attr"}``
    (``"module"`` for a module imported from its package)."""
    import ast
    import importlib.util

    tree = ast.parse(path.read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    out = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom), ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name, f"{ast.unparse(node)}: a re-export is written `import X as X`"
            submodule = f"{node.module}.{alias.name}"
            is_module = importlib.util.find_spec(node.module).submodule_search_locations is not None and \
                importlib.util.find_spec(submodule) is not None
            out[alias.name] = submodule if is_module else f"{node.module}:{alias.name}"
    return out


def test_a_type_checker_sees_every_name_the_api_serves_and_no_more_than_40():
    """What mypy and an IDE read (the ``TYPE_CHECKING`` imports of loopx/api.py) is the table names
    resolve from at run time, name for name and target for target; and the API stays narrow."""
    import loopx.api as api

    assert _type_checking_imports(ROOT / "loopx" / "api.py") == api._LAZY
    assert len(api.__all__) <= 40, len(api.__all__)
    assert sorted(api.__all__) == sorted([*api._LAZY, "hookimpl"]) == sorted(dir(api))


def test_a_type_checker_sees_the_model_classes_the_seam_names():
    """``loopx.model`` resolves its classes lazily (``_WHERE``); its ``TYPE_CHECKING`` block imports
    the same classes from the same modules, so that ``from loopx.model import Goal`` (a hookspec's
    ``goal``, ``api.goals.load``'s answer) is the class for mypy, not ``Any``."""
    import loopx.model as model

    seen = _type_checking_imports(ROOT / "loopx" / "model" / "__init__.py")
    assert seen == {name: f"loopx.model.{module}:{name}" for name, module in model._WHERE.items()}
    for name, target in seen.items():
        assert getattr(model, name).__module__ == target.partition(":")[0], name


#: Modules whose ``__getattr__`` (PEP 562) resolves names lazily and is hidden from type checkers,
#: with the table of those names: their ``TYPE_CHECKING`` imports must be exactly that table.
LAZY_TABLES = {"loopx/api.py": "_LAZY", "loopx/model/__init__.py": "_WHERE", "loopx/seam/capabilities.py": "_DOCS"}


def _lazy_name_holes(path, source: str) -> list[str]:
    """What a type checker cannot see of the module ``path`` (relative): a module ``__getattr__``
    it reads with no return type (every unknown attribute is then ``Any`` to mypy: a typo, or a
    class named in an annotation, passes unseen), or one hidden from it (``if not TYPE_CHECKING:``,
    or the ``else`` of ``if TYPE_CHECKING:``) whose ``TYPE_CHECKING`` imports are not its table."""
    import ast
    import importlib

    tree = ast.parse(source)
    seen: set[str] = set()
    hidden = visible = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            visible = node
        elif isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "not TYPE_CHECKING"):
            checked, other = (node.body, node.orelse) if ast.unparse(node.test) == "TYPE_CHECKING" else \
                (node.orelse, node.body)
            seen |= {a.asname or a.name for n in checked if isinstance(n, ast.ImportFrom) for a in n.names}
            hidden = hidden or next((n for n in other if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"),
                                    None)
    if visible is not None and (visible.returns is None or ast.unparse(visible.returns) in ("Any", "typing.Any")):
        return [f"{path}:{visible.lineno}: __getattr__ answers Any to a type checker"]
    if hidden is not None:
        if path not in LAZY_TABLES:
            return [f"{path}:{hidden.lineno}: a hidden __getattr__ with no table in LAZY_TABLES"]
        module = importlib.import_module(path.removesuffix(".py").removesuffix("/__init__").replace("/", "."))
        table = set(getattr(module, LAZY_TABLES[path]))
        if not table <= seen:
            return [f"{path}: a type checker does not see {sorted(table - seen)}"]
    return []


def test_a_type_checker_sees_every_lazily_resolved_name():
    """No module of the core or of a plugin answers an unknown attribute with ``Any`` for mypy: a
    module ``__getattr__`` has a return type, or is hidden from the checker, which then imports its
    names for real under ``TYPE_CHECKING`` (``loopx.model``'s was neither, so a hookspec's ``goal:
    Goal`` was ``Any``)."""
    holes = []
    for base in (ROOT / "loopx", *PLUGIN_PACKAGES):
        for path in sorted(base.rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            if "__getattr__" in source:
                holes += _lazy_name_holes(path.relative_to(ROOT).as_posix(), source)
    assert holes == []
    assert _lazy_name_holes("m.py", "def __getattr__(name):\n    return 1\n") == [
        "m.py:1: __getattr__ answers Any to a type checker"]


def test_each_namespace_lists_exactly_what_it_imports():
    """A namespace's ``__all__`` (what a type checker treats as re-exported) is every name it
    imports, so a member is never importable yet invisible, or listed yet missing."""
    import ast

    import loopx.api as api

    for name, target in api._LAZY.items():
        if ":" in target:
            continue
        path = ROOT / (target.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                    and node.module != "__future__" for alias in node.names}
        assert sorted(imported) == getattr(api, name).__all__, name


def test_importing_the_api_loads_nothing_heavy():
    code = "import sys, loopx.api; print(sorted(m for m in sys.modules if m.startswith('loopx')))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(p.stdout.replace("'", '"')) == ["loopx", "loopx.api"]


def test_open_registry_works_outside_a_command(sqlite_url, tmp_path):
    # A script, not a click command: no "no active click context" RuntimeError.
    code = ("from loopx.api import goals, open_registry\n"
            "with open_registry() as reg:\n"
            "    g = goals.create(reg, 'user', title='from a script')['id']\n"
            "    with reg.read() as tx:\n"
            "        print(goals.load(tx, g).title)\n")
    p = subprocess.run([sys.executable, "-c", code], env=loopx_env(sqlite_url), capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "from a script"
    out = subprocess.run([sys.executable, "-m", "loopx", "project_prompt", "list", "--json"],
                         env=loopx_env(sqlite_url), capture_output=True, text=True)
    assert [g["title"] for g in json.loads(out.stdout)] == ["from a script"]


def test_the_actor_of_a_writer_is_fixed(reg):
    from loopx import api
    from loopx.api import LoopxError

    g = api.goals.create(reg, "user", title="t")["id"]
    gate = api.gates.request(reg, "executor", goal_id=g, title="ship it", scope="production")["id"]

    def approve_as_user(w):
        w.actor = "user"

    with pytest.raises(AttributeError):
        reg.mutate("executor", approve_as_user, goal_id=g)

    def through_acting(w):
        with api.state.acting(w, "user") as cw:
            cw.emit("gate.approved", {"gate_id": gate})

    # acting() only ever narrows to a capability: "user" names none, so it is refused outright.
    with pytest.raises(LoopxError) as err:
        reg.mutate("capability:alpha", through_acting, goal_id=g)
    assert err.value.code == "actor_forbidden" and "'user' is not a capability" in err.value.message

    def capability_writer_cannot_be_widened(w):
        cw = w.as_capability("alpha")
        cw.actor = "user"

    with pytest.raises(AttributeError):
        reg.mutate("capability:alpha", capability_writer_cannot_be_widened, goal_id=g)

    with pytest.raises(LoopxError) as err:
        reg.mutate("capability:alpha", lambda w: w.emit("gate.approved", {"gate_id": gate}), goal_id=g)
    assert err.value.code == "actor_forbidden"
    with reg.read() as tx:
        assert api.gates.load(tx, g, gate).status == "pending"
        assert "gate.approved" not in [e.kind for e in api.goals.events(tx, g)]


def test_a_capability_may_abandon_only_an_expired_run(reg):
    from loopx import api
    from loopx.api import LoopxError

    g = api.goals.create(reg, "user", title="t")["id"]
    run = api.runs.should_run(reg, "executor", goal_id=g)["interaction_contract"]["run_id"]
    with pytest.raises(LoopxError) as err:
        reg.mutate("capability:alpha", lambda w: api.RepairSession("alpha", kind="alpha.repaired")
                   .abandon_expired_run(w, run), goal_id=g)
    assert err.value.code == "actor_forbidden"
    with reg.read() as tx:
        assert api.runs.load(tx, run).status == "open"


def test_run_command_takes_no_policy_of_the_callers_run_confined_builds_one(tmp_path):
    """A plugin confines a child by a policy of its own through ``run_confined`` only: ``run_command``
    has no ``policy=`` that would swap the turn's confinement for a file the plugin names."""
    import sys

    import loopx.api as api

    marker = tmp_path / "ran"
    argv = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    with pytest.raises(TypeError):
        api.process.run(argv, env={}, timeout=30, policy=str(tmp_path / "my-policy.json"))
    assert not marker.exists()
    assert api.process.run(argv, env={}, timeout=30)["exit_code"] == 0 and marker.exists()


def test_run_command_keeps_every_byte_of_a_trickle_and_of_a_flood():
    """The output a command writes a character at a time (a test runner's progress) and 20 MB at
    once both arrive whole: the byte count, the sha256 of everything and the tail."""
    import hashlib

    import loopx.api as api

    trickle = "import sys, time\nfor i in range(300):\n    sys.stdout.write(str(i % 10)); sys.stdout.flush()\n" \
              "    time.sleep(0.001)\nsys.stdout.write('end')"
    flood = "import sys\nfor i in range(200000):\n    sys.stdout.write('%098d\\n' % i)"
    for code, expected in ((trickle, "".join(str(i % 10) for i in range(300)) + "end"),
                           (flood, "".join("%098d\n" % i for i in range(200000)))):
        res = api.process.run([sys.executable, "-c", code], env={}, timeout=60)
        assert res["exit_code"] == 0 and res["output_bytes"] == len(expected)
        assert res["output_sha256"] == "sha256:" + hashlib.sha256(expected.encode()).hexdigest()
        assert expected.endswith(res["output_tail"]) and len(res["output_tail"]) == min(len(expected), 4096)
