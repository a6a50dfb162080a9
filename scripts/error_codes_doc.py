"""Print the table of error codes of docs/errors.md, generated from the code, or write it there.

    python scripts/error_codes_doc.py            # print the generated section
    python scripts/error_codes_doc.py --check    # exit 1 if docs/errors.md differs
    python scripts/error_codes_doc.py --write    # put the current tables into the doc

The core's codes come from ``loopx.values.errors.CODES`` (and ``RESERVED``); the codes of the plugins
that live in this repository (``plugins/*``) from their ``loopx_register_error_codes`` hook,
imported from the checkout (nothing needs to be installed). In the doc the tables sit between
``<!-- generated: codes -->`` and ``<!-- end generated -->``.
"""

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "errors.md"
START, END = "<!-- generated: codes -->", "<!-- end generated -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def plugin_codes() -> dict[str, dict[str, str]]:
    """``{plugin: {code: description}}`` for each plugin in ``plugins/`` that registers codes."""
    found: dict[str, dict[str, str]] = {}
    for project in sorted(ROOT.glob("plugins/*/pyproject.toml")):
        points = tomllib.loads(project.read_text()).get("project", {}).get("entry-points", {}).get("loopx", {})
        for name, target in sorted(points.items()):
            sys.path.insert(0, str(project.parent))
            try:
                module = importlib.import_module(target.split(":", 1)[0])
            finally:
                sys.path.remove(str(project.parent))
            hook = getattr(module, "loopx_register_error_codes", None)
            if hook is not None:
                codes: dict[str, str] = {}
                hook(lambda code, description: codes.__setitem__(code, description))
                found[name] = codes
    return found


def section() -> str:
    """The generated part of docs/errors.md: the core's codes, then each bundled plugin's."""
    sys.path.insert(0, str(ROOT))
    from loopx.values.errors import CODES, RESERVED

    lines = ["| code | what it means |", "|---|---|"]
    lines += [f"| `{code}` | {_cell(text)} |" for code, text in CODES.items()]
    lines += ["", "Reserved (listed, raised nowhere, kept so that code matching on them still works):", ""]
    lines += [f"- `{code}`: {_cell(why)}" for code, why in RESERVED.items()]
    for plugin, codes in plugin_codes().items():
        lines += ["", f"The `{plugin}` plugin's (`plugins/{plugin}`):", "", "| code | what it means |", "|---|---|"]
        lines += [f"| `{code}` | {_cell(text)} |" for code, text in codes.items()]
    return "\n".join([START, *lines, END])


def main(argv: list[str]) -> int:
    text = section()
    if not argv:
        print(text)
        return 0
    doc = DOC.read_text()
    head, _, rest = doc.partition(START)
    _, _, tail = rest.partition(END)
    want = head + text + tail
    if argv[0] == "--check":
        if doc != want:
            print(f"{DOC.relative_to(ROOT)} differs from the code: run python scripts/error_codes_doc.py --write",
                  file=sys.stderr)
            return 1
        return 0
    if argv[0] == "--write":
        DOC.write_text(want)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
