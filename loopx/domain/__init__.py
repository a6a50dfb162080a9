"""One module per thing a user manages (goals, todos, gates, actions, runs, evidence, rewards,
...): each function validates, then changes state in one mutate.

Layer 'domain' of docs/architecture.md ("The layers").
"""
