"""The LoopX plugin API: the one module a plugin imports (besides ``loopx.hookimpl``).

Everything a plugin needs is here, documented section by section in ``docs/plugins.md``: a few
names (the registry, errors, capability declarations, the repair session) and a few namespaces,
each a module of :mod:`loopx.plugin_api` that re-exports the core's functions under short names
(``todos.load``, ``gates.request_in``, ``cli.emit``, ...), so the API and the CLI run the same
rules. Every other module of the core may change without notice.

Type checkers and IDEs see every name through the ``TYPE_CHECKING`` imports below; at run time
the same names resolve lazily from :data:`GROUPS` on first use (PEP 562), so a plugin module
that imports ``loopx.api`` at the top adds nothing measurable to ``quota should-run``.
``tests/test_plugin_api.py`` keeps the two tables equal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopx import hookimpl as hookimpl  # re-exported: `from loopx.api import hookimpl` type-checks

if TYPE_CHECKING:
    from loopx.seam.capabilities import Capability as Capability
    from loopx.cli.output import open_registry as open_registry
    from loopx.values.clock import now as now
    from loopx.values.errors import LoopxError as LoopxError
    from loopx.seam.hookspecs.answers import ContributedAction as ContributedAction
    from loopx.seam.hookspecs.answers import ReadTx as ReadTx
    from loopx.seam.hookspecs.answers import Veto as Veto
    from loopx.model import to_json as to_json
    from loopx.plugin_api import cli as cli
    from loopx.plugin_api import evidence as evidence
    from loopx.plugin_api import executors as executors
    from loopx.plugin_api import files as files
    from loopx.plugin_api import gates as gates
    from loopx.plugin_api import goals as goals
    from loopx.plugin_api import ids as ids
    from loopx.plugin_api import pages as pages
    from loopx.plugin_api import process as process
    from loopx.plugin_api import registrars as registrars
    from loopx.plugin_api import runs as runs
    from loopx.plugin_api import state as state
    from loopx.plugin_api import testing as testing
    from loopx.plugin_api import todos as todos
    from loopx.ledger.registry import Registry as Registry
    from loopx.domain.repair_session import RepairSession as RepairSession
    from loopx.ledger.writer import Writer as Writer

# Every name, under the heading of docs/plugins.md that documents it: "module:attribute" for a
# value, "module" for a namespace (tests/test_plugin_api.py checks each member is documented).
GROUPS = {
    "Errors": {
        "LoopxError": "loopx.values.errors:LoopxError",
    },
    "The registry": {
        "open_registry": "loopx.cli.output:open_registry",
        "Registry": "loopx.ledger.registry:Registry",
        "ReadTx": "loopx.seam.hookspecs.answers:ReadTx",
        "Writer": "loopx.ledger.writer:Writer",
        "now": "loopx.values.clock:now",
        "to_json": "loopx.model:to_json",
    },
    "Goals and their ledger": {"goals": "loopx.plugin_api.goals"},
    "Todos": {"todos": "loopx.plugin_api.todos"},
    "Gates": {"gates": "loopx.plugin_api.gates"},
    "Evidence": {"evidence": "loopx.plugin_api.evidence"},
    "Runs, actions and rewards": {"runs": "loopx.plugin_api.runs"},
    "Capabilities and their state": {
        "Capability": "loopx.seam.capabilities:Capability",
        "state": "loopx.plugin_api.state",
        "Veto": "loopx.seam.hookspecs.answers:Veto",
        "ContributedAction": "loopx.seam.hookspecs.answers:ContributedAction",
    },
    "Pages a capability serves": {"pages": "loopx.plugin_api.pages"},
    "The repair API: one RepairSession": {"RepairSession": "loopx.domain.repair_session:RepairSession"},
    "Ids and validation": {"ids": "loopx.plugin_api.ids"},
    "Commands and output": {"cli": "loopx.plugin_api.cli"},
    "Running a child process": {"process": "loopx.plugin_api.process"},
    "Files a step names, and what a human reviews": {"files": "loopx.plugin_api.files"},
    "Executors": {"executors": "loopx.plugin_api.executors"},
    "Register hooks": {"registrars": "loopx.plugin_api.registrars"},
    "Testing": {"testing": "loopx.plugin_api.testing"},
}

_LAZY = {name: target for names in GROUPS.values() for name, target in names.items()}

#: Names defined in this module itself.
_OWN = ("hookimpl",)

__all__ = sorted([*_LAZY, *_OWN])


if not TYPE_CHECKING:  # a type checker sees the imports above, and no catch-all

    def __getattr__(name: str) -> Any:
        target = _LAZY.get(name)
        if target is None:
            raise AttributeError(f"module 'loopx.api' has no attribute {name!r}")
        import importlib

        module, _, attr = target.partition(":")
        if name == "LoopxError":
            importlib.import_module("loopx.seam.plugins")  # so that plugin-registered codes are known
        value = importlib.import_module(module)
        if attr:
            value = getattr(value, attr)
        globals()[name] = value  # resolve once
        return value

    def __dir__() -> list[str]:
        return __all__
