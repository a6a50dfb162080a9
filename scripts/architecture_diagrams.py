"""Print the diagrams of docs/architecture.md that are generated from the code, or write them there.

    python scripts/architecture_diagrams.py            # print every generated diagram
    python scripts/architecture_diagrams.py --check    # exit 1 if docs/architecture.md differs
    python scripts/architecture_diagrams.py --write    # put the current diagrams into the doc

* ``layers``: the import-linter layer contracts of pyproject.toml ([tool.importlinter]), top
  layer first - what tests/test_import_layers.py and CI check.
* ``hooks``: the hook specifications in loopx/seam/hookspecs/, module by module (read as source, so
  nothing is imported).

In the doc each sits in a fenced block right after a ``<!-- generated: NAME -->`` line.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
WIDTH = 96


def _wrap(words: list[str], sep: str, indent: str) -> list[str]:
    lines, line = [], ""
    for i, word in enumerate(words):
        piece = word + (sep if i < len(words) - 1 else "")
        if line and len(indent + line + piece.rstrip()) > WIDTH:
            lines.append(indent + line.rstrip())
            line = ""
        line += piece
    lines.append(indent + line.rstrip())
    return lines


def layers() -> str:
    """The layer contracts as text: each layer on its lines, arrows pointing down the imports."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    out = []
    for contract in config["contracts"]:
        if contract["type"] != "layers":
            continue
        containers = contract.get("containers") or []
        prefix = containers[0] + "." if containers else "loopx."
        if out:
            out.append("")
        out.append(f"{contract['name']}")
        out.append(f"(top first; a module imports only from its own layer and those below it; {prefix}* shown bare)")
        for i, layer in enumerate(contract["layers"]):
            independent = "|" in layer
            names = [n.strip() for n in re.split(r"[|:]", layer)]
            shown = [n[len(prefix):] if n.startswith(prefix) else n for n in names]
            if i:
                out.append("    ↓")
            body = _wrap(shown, "  |  " if independent else " · ", "  ")
            if independent:
                body[-1] += "    (independent: none imports another)"
            out.extend(body)
    return "\n".join(out)


def hooks() -> str:
    """Every hookspec, by the module of loopx/seam/hookspecs/ it is specified in, with its first doc line."""
    out = []
    for path in sorted((ROOT / "loopx" / "seam" / "hookspecs").glob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        specs = [node for node in tree.body if isinstance(node, ast.FunctionDef)
                 and any("hookspec" in ast.unparse(d) for d in node.decorator_list)]
        if not specs:
            continue
        out.append(f"loopx/seam/hookspecs/{path.name}")
        for node in specs:
            args = ", ".join(a.arg for a in node.args.args)
            doc = (ast.get_docstring(node) or "").split("\n\n")[0].replace("\n", " ")
            first = doc.split(". ")[0].rstrip(".")
            out.append(f"  {node.name}({args})")
            if first:
                out.extend(_wrap(first.split(" "), " ", "      "))
    return "\n".join(out)


DIAGRAMS = {"layers": layers, "hooks": hooks}
#: A generated block: the marker, the fence, the lines up to the closing fence (on a line of its own).
MARK = re.compile(r"(<!-- generated: (\w+) -->\n```text\n)(.*?)(?=^```$)", re.S | re.M)


def in_doc(text: str) -> dict[str, str]:
    """The generated blocks as the doc has them now."""
    return {m.group(2): m.group(3).removesuffix("\n") for m in MARK.finditer(text)}


def main(argv: list[str]) -> int:
    """Print, check or write the diagrams (see the module's docstring)."""
    text = DOC.read_text()
    if "--write" in argv:
        DOC.write_text(MARK.sub(lambda m: m.group(1) + DIAGRAMS[m.group(2)]() + "\n", text))
        return 0
    if "--check" in argv:
        stale = [name for name, block in in_doc(text).items() if block != DIAGRAMS[name]()]
        missing = [name for name in DIAGRAMS if name not in in_doc(text)]
        for name in stale + missing:
            print(f"docs/architecture.md: the {name} diagram is not the one the code gives"
                  " (python scripts/architecture_diagrams.py --write)")
        return 1 if stale or missing else 0
    for name, make in DIAGRAMS.items():
        print(f"<!-- generated: {name} -->\n```text\n{make()}\n```\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
