"""The ledger and the registry: the one way to change state (Registry.mutate), the event kinds and
how they apply, the hash chain, the keys and the anchor, the state digest.

Layer 'ledger' of docs/architecture.md ("The layers").
"""
