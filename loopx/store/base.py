"""The store interface every backend implements.

A store hands out transactions. SQL is written once, in the common subset of SQLite and
PostgreSQL, with ``?`` placeholders; a backend translates what it must. The registry never
knows which backend it runs on.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
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

    def read(self) -> AbstractContextManager[Tx]:
        """A consistent read-only snapshot for several queries."""

    def write(self, work: Callable[[Tx], T]) -> T:
        """Run ``work`` in one write transaction: all of it commits, or none of it.

        Backends serialise writers (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: row locks) and
        retry transient conflicts themselves, so ``work`` must be safe to run again.
        """

    def schema_version(self) -> int:
        """The schema version the stored data is at."""

    def integrity_check(self) -> list[str]:
        """Problems the engine itself finds in the stored data; empty when healthy."""

    def close(self) -> None:
        """Release connections."""
