"""The governed turn: confinement of a turn's steps (confine, private runs, the broker), the
executors that carry a turn out, and the turn around them.

Layer 'turn' of docs/architecture.md ("The layers").
"""
