"""A capability's document, ``docs/capabilities/<name>.md``, checked against its declaration.

Also importable from :mod:`loopx.seam.capabilities` (``capabilities.check_doc``). Knows a declaration
only by its attributes, so it imports nothing of LoopX.
"""

from __future__ import annotations

import re

#: The sections every ``docs/capabilities/<name>.md`` has, in this order.
DOC_SECTIONS = ("State owned", "Interaction protocol", "Quota needs", "Actions", "Failure modes")
#: The section a capability on for every goal adds, saying why it must serve goals that never enabled it.
DEFAULT_ON_SECTION = "On for every goal"
_BULLET_NAME = re.compile(r"^\s*[-*]\s+`([^`]+)`")
_QUOTA_LINE = re.compile(r"^\s*[-*]\s+`?(turns|tokens|wall_seconds)`?\s*:\s*([0-9.]+)")


def doc_sections(text: str) -> dict[str, str]:
    """``{section title: body}`` of a capability document's ``##`` sections."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return {k: "\n".join(v) for k, v in sections.items()}


def check_doc(cap: Capability, text: str) -> list[str]:
    """Problems with a capability document against its declaration; empty when they agree.

    The document starts with ``# <name>``, has the :data:`DOC_SECTIONS` in order, lists each
    owned namespace as a bullet ``- `ns` ...`` under *State owned*, each action as a bullet
    ``- `name` ...`` under *Actions*, and each quota need as ``- turns: N`` under *Quota needs*.
    A capability on for every goal (``default_on``) says why under ``## On for every goal``, in
    words that include its declared ``why``; one that is not has no such section.
    """
    problems = []
    first = next((line for line in text.splitlines() if line.strip()), "")
    if not re.match(rf"#\s+`?{re.escape(cap.name)}`?(\s|$)", first):
        problems.append(f"the title line should be '# {cap.name} ...', not {first!r}")
    sections = doc_sections(text)
    present = [s for s in sections if s in DOC_SECTIONS]
    missing = [s for s in DOC_SECTIONS if s not in sections]
    if missing:
        problems.append(f"missing section(s): {', '.join(missing)}")
    elif present != list(DOC_SECTIONS):
        problems.append(f"sections out of order: {present}")

    def names(section):
        return {m.group(1) for line in sections.get(section, "").splitlines() if (m := _BULLET_NAME.match(line))}

    if "State owned" in sections and names("State owned") != set(cap.owns):
        problems.append(f"State owned lists {sorted(names('State owned'))}; the declaration owns {sorted(cap.owns)}")
    if "Actions" in sections and names("Actions") != set(cap.actions):
        problems.append(f"Actions lists {sorted(names('Actions'))}; the declaration has {sorted(cap.actions)}")
    if "Quota needs" in sections:
        listed = {m.group(1): float(m.group(2)) for line in sections["Quota needs"].splitlines()
                  if (m := _QUOTA_LINE.match(line))}
        declared = {k: float(v) for k, v in cap.quota.to_json().items()}
        if listed != declared:
            problems.append(f"Quota needs lists {listed}; the declaration needs {declared}")
    why = " ".join(sections.get(DEFAULT_ON_SECTION, "").split())
    if cap.default_on and DEFAULT_ON_SECTION not in sections:
        problems.append(f"it is on for every goal (default_on) but has no '## {DEFAULT_ON_SECTION}' section saying why")
    elif cap.default_on and " ".join(cap.why.split()) not in why:
        problems.append(f"'## {DEFAULT_ON_SECTION}' does not give the declared why: {cap.why!r}")
    elif not cap.default_on and DEFAULT_ON_SECTION in sections:
        problems.append(f"it has a '## {DEFAULT_ON_SECTION}' section but does not declare default_on=True")
    return problems
