"""Issue-Fix: drive fixing one issue in a local git repository, red then green, with evidence.

The agent does the edits; LoopX drives the phases (reproduce -> fix -> verify -> hand-off),
records what each step showed, and keeps publishing behind a ``production`` gate. See
``docs/capabilities/issue_fix.md``.
"""

__version__ = "0.1.0"
