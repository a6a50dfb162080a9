"""The store interface every backend implements.

A store hands out transactions. SQL is written once, in the common subset of SQLite and
PostgreSQL, with ``?`` placeholders; a backend translates what it must. What differs between
the engines is named by the dialect (:mod:`loopx.store.dialect`), and what the registry needs
of a store beyond transactions is declared here: the registry never asks which backend it runs
on, and never probes a store for a member this protocol does not declare.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable, Protocol, TypeVar

T = TypeVar("T")


class Tx(Protocol):
    """One open transaction."""

    dialect: str  # "sqlite" or "postgres"

    def execute(self, sql: str, params: tuple | list = ()) -> int:
        """Run a statement; return the number of rows it changed."""

    def query(self, sql: str, params: tuple | list = ()) -> list[dict[str, Any]]:
        """Run a query; return every row as a dict."""

    def one(self, sql: str, params: tuple | list = ()) -> dict[str, Any] | None:
        """Run a query; return its first row as a dict, or None."""

    def lock_goal(self, goal_id: str) -> dict[str, Any] | None:
        """Read a goal's row and hold it against concurrent writers until the transaction ends."""


class Store(Protocol):
    """A registry's storage."""

    url: str
    readonly: bool
    dialect: str
    #: The file the registry lives in (an SQLite file, or ``:memory:``); None for a server database.
    path: Path | None
    #: True while the registry does not exist yet: reads are refused and the first write creates it.
    missing: bool
    #: True when a write transaction holds the whole registry from its first statement (SQLite's
    #: ``BEGIN IMMEDIATE``): reading inside it before any lock costs nothing. False where a
    #: transaction's first read fixes its snapshot before a row lock (PostgreSQL).
    holds_all_on_write: bool

    def read(self) -> AbstractContextManager[Tx]:
        """A consistent read-only snapshot for several queries."""

    def write(self, work: Callable[[Tx], T], *, then: Callable[[], object] | None = None) -> T:
        """Run ``work`` in one write transaction: all of it commits, or none of it.

        Backends serialise writers (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: row locks) and
        retry transient conflicts themselves, so ``work`` must be safe to run again. ``then()``,
        when given, runs once after the commit - on SQLite while this writer still holds the
        writers' queue (see :meth:`loopx.store.sqlite.SqliteStore.write`).
        """

    def checkpoints_by_ticket(self) -> bool:
        """Whether the SQLite files ``then`` writes are checkpointed by this store's writers
        (their own automatic checkpoint is then held back); False where nothing is."""

    def schema_version(self) -> int:
        """The schema version the stored data is at."""

    def integrity_check(self, loss_kinds: tuple[str, ...] = ()) -> list[str]:
        """Problems the engine itself finds in the stored data; empty when healthy.
        ``loss_kinds``: the event kinds whose body's ``"lost"`` list records a gap in a goal's
        ledger as known loss (a store that checks for gaps leaves those out)."""

    def close(self) -> None:
        """Release connections."""
