"""LoopX approvals: decide gates and score runs from a browser, on a port of its own."""

__version__ = "0.1.0"
