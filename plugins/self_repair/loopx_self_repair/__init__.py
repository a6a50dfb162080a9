"""LoopX self-repair: detectors for state that disagrees with the ledger, and their repairs."""

__version__ = "0.1.0"
