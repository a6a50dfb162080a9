"""What each event kind does to the current-state tables, one module per area.

Apply functions take ``(tx, event)``, use only the event's own fields (never the clock, never
randomness), and are the only code that writes current state. :mod:`loopx.ledger.events.table` lists
every core kind with its apply function and writers; :mod:`loopx.ledger.events.applying` applies an
event through it. Nothing here imports :mod:`loopx.ledger.log`, which imports this package.
"""
