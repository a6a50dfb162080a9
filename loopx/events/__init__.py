"""What each event kind does to the current-state tables, one module per area.

Apply functions take ``(tx, event)``, use only the event's own fields (never the clock, never
randomness), and are the only code that writes current state.
"""
