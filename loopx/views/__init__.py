"""Decisions and projections: the turn decision (should-run and its contract) and everything that
only reads to show or decide (status, summaries, notifications, inputs).

Layer 'views' of docs/architecture.md ("The layers").
"""
