"""Values every layer uses: checks, error codes, the clock, JSON and terminal helpers, the log
lines. They know nothing of storage or processes.

Layer 'values' of docs/architecture.md ("The layers").
"""
