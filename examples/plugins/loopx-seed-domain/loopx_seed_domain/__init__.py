"""loopx-seed-domain: the revenue-analysis commands of the LoopX seed's walkthrough.

A third-party LoopX plugin: ``loopx run-model --model NAME`` and ``loopx generate-report
--format pdf``, offered to agents through interaction contracts. See README.md.
"""

__version__ = "0.1.0"
