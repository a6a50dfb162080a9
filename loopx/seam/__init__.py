"""The plugin seam: the plugin manager, the hook specifications, the registrars, and the rules
capabilities are held to. Below the ledger, so no plugin answer reaches back up.

Layer 'seam' of docs/architecture.md ("The layers").
"""
