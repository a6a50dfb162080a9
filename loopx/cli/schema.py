"""``loopx schema``: the JSON Schemas shipped with LoopX."""

from __future__ import annotations

import click

from loopx.cli.output import LoopxCommand, emit, wants_json


def schema_names() -> list[str]:
    """The JSON Schemas shipped in ``loopx/schemas/`` (``contract``, ``reward_record``...)."""
    from pathlib import Path

    return sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "schemas").glob("*.json"))


@click.command(cls=LoopxCommand)
@click.argument("name", required=False)
def schema(name):
    """Print a JSON Schema shipped with LoopX: `contract` (the interaction contract), ...

    Without a name, list the schemas there are.
    """
    import json
    from pathlib import Path

    from loopx.values.errors import LoopxError

    names = schema_names()
    if name is None:
        emit(names, lambda ns: "\n".join(ns))
        return
    if name not in names:
        raise LoopxError("not_found", f"no schema {name!r} (available: {', '.join(names)})")
    data = json.loads((Path(__file__).resolve().parent.parent / "schemas" / f"{name}.json").read_text())
    if wants_json():
        emit(data)
    else:
        click.echo(json.dumps(data, indent=2))
