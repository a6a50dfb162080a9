"""The plugin seam: hook specifications, one module per concern, and nothing else.

* :mod:`.state` - storage backends by URL scheme; observers of committed events.
* :mod:`.contracts` - contributions to interaction contracts; vetoes (``repair``).
* :mod:`.executors` - providers that carry out one turn under a contract.
* :mod:`.capabilities` - capability declarations.
* :mod:`.commands` - click commands a plugin adds.
* :mod:`.vocabulary` - a plugin's own event kinds and error codes.
* :mod:`.notify` - telling a person that a goal needs them.

The types that cross the seam: :mod:`loopx.seam.plugin_register` (what the ``register`` of each
register hook is, and the records it makes) and :mod:`.answers` (what contract hooks answer).

A plugin implements hooks with ``@loopx.hookimpl`` and is found through the ``loopx``
entry-point group. See ``docs/plugins.md``.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("loopx")


def spec_names(namespace: dict[str, object]) -> list[str]:
    """The hook specifications among a module's names (``globals()``): what each hookspec module's
    ``__dir__`` (PEP 562) answers. Pluggy's ``add_hookspecs`` looks up every name ``dir()`` gives
    with ``inspect.getattr_static``; for the imports, dunders and helpers of seven modules that
    was ~4 M instructions of every command, ``quota should-run`` included."""
    return sorted(name for name, value in namespace.items() if hasattr(value, "loopx_spec"))

MODULES = (
    "loopx.seam.hookspecs.state",
    "loopx.seam.hookspecs.contracts",
    "loopx.seam.hookspecs.executors",
    "loopx.seam.hookspecs.capabilities",
    "loopx.seam.hookspecs.commands",
    "loopx.seam.hookspecs.vocabulary",
    "loopx.seam.hookspecs.notify",
)
