"""What confines a step's process: starting it under a policy (Landlock, a world, limits), the
watcher that enforces them, the in-turn broker client. Cheap to import: the watcher and the
client load little else.

Layer 'sandbox' of docs/architecture.md ("The layers").
"""
