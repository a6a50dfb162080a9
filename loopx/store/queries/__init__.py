"""The SQL the rest of LoopX runs, as named operations, one module per area of the ledger.

Domain modules (goals, todos, runs, the status views, the integrity checks...) call these
functions with the open transaction (``tx``) and plain values; they hold no SQL text themselves
(``tests/test_store_sql.py`` checks). The text here is written once for both backends: ``?``
placeholders, translated by the PostgreSQL store; where the engines differ, a function asks
:mod:`loopx.store.dialect` for the named fragment instead of branching on the engine's name.
"""
