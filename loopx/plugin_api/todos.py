"""``loopx.api.todos``: a goal's todos, read and changed."""

from __future__ import annotations

from loopx.ledger.todo_ready import changed
from loopx.domain.todos import add, add_in, block_in, done_in, list_todos as list, load_todo as load, ready, reopen_in, settle

__all__ = ["add", "add_in", "block_in", "changed", "done_in", "list", "load", "ready", "reopen_in", "settle"]
