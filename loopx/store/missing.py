"""A registry file that does not exist yet (what the CLI opens with ``create=False``)."""

from __future__ import annotations

import sys

from loopx.values.errors import LoopxError


def not_found(path) -> str:
    """The message of ``registry_not_found`` for the file ``path``."""
    return (f"no registry at {path} (check --registry / LOOPX_REGISTRY; creating a goal with"
            " `loopx project-prompt create` makes one)")


class MissingStore:
    """A registry file that does not exist yet: reads are refused, the first write creates it."""

    dialect = "sqlite"
    readonly = False
    holds_all_on_write = True  # what it becomes: an SQLite store

    def __init__(self, url: str, path, factory):
        self.url, self.path, self._factory, self._store = url, path, factory, None

    @property
    def missing(self) -> bool:
        """True until the first write created the file."""
        return self._store is None

    def write(self, work, *, then=None):
        """The first write creates the file (saying where on stderr); every write then goes to it."""
        if self._store is None:
            self._store = self._factory(self.url, False)
            print(f"loopx: created a new registry at {self.path}", file=sys.stderr)
        return self._store.write(work, then=then)

    def checkpoints_by_ticket(self) -> bool:
        """The created store's answer (False before it exists: nothing checkpoints yet)."""
        return self._store is not None and self._store.checkpoints_by_ticket()

    def close(self) -> None:
        """Close the created store, if any."""
        if self._store is not None:
            self._store.close()

    def __getattr__(self, name):
        store = self.__dict__.get("_store")
        if store is not None:
            return getattr(store, name)
        if name.startswith("__"):
            raise AttributeError(name)
        raise LoopxError("registry_not_found", not_found(self.__dict__.get("path")))
