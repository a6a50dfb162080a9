"""``loopx registry``: move a registry between stores (SQLite <-> PostgreSQL), verified."""

from __future__ import annotations

import click

from loopx.cli.output import LoopxGroup, emit
from loopx.values.errors import LoopxError


@click.group(cls=LoopxGroup)
def registry():
    """The registry itself: where it lives, and moving it."""


def _copied_text(summary: dict) -> str:
    replaced = " (its former contents replaced)" if summary["replaced"] else ""
    return (
        f"copied {summary['goals']} goals, {summary['events']} events and {summary['operations']} operations\n"
        f"  from {summary['source']}\n  to   {summary['target']}{replaced}\n"
        "verified: the same events in the same order, and every goal's replayed state equal to the source's"
    )


@registry.command()
@click.option("--from", "source", required=True, metavar="URL",
              help="The registry to copy: a path, sqlite:///path or postgresql://... (opened read-only).")
@click.option("--to", "target", required=True, metavar="URL", help="The registry to copy into; must be empty.")
@click.option("--force", is_flag=True, help="Replace whatever the target holds.")
def copy(source, target, force):
    """Copy every goal's ledger and the idempotency keys into another registry, then verify.

    The target's state is rebuilt by replaying the ledger, and compared with the source's before
    anything is committed: a copy is complete and verified, or nothing is written.
    """
    from loopx.views.registry_copy import copy_registry

    emit(copy_registry(source, target, force=force), _copied_text)


def _size_text(n) -> str:
    if n is None:
        return "unknown"
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _info_text(info: dict) -> str:
    lines = [f"registry  {info['url']}",
             f"  chosen by   {info['source_text']}",
             f"  backend     {info['backend']}"]
    if not info["exists"]:
        lines.append("  not created yet (the first command that writes creates it)")
        return "\n".join(lines)
    lines += [f"  schema      version {info['schema_version']} (this LoopX: {info['schema_supported']})",
              f"  size        {_size_text(info['size_bytes'])}",
              f"  goals       {info['goals']} ({info['goals_closed']} closed)",
              f"  events      {info['events']}"]
    if info.get("integrity"):
        key = {"keyed": f"key {info['key_path']}", "missing": f"KEY MISSING: expected {info['key_path']}",
               "legacy": "not keyed yet (keyed at the next open for writing)",
               "stripped": f"ID REMOVED: this user keyed a registry here ({info['registry_id']})"}[info["integrity"]]
        lines.append(f"  integrity   {key}")
    return "\n".join(lines)


@registry.command()
@click.pass_context
def info(ctx):
    """Which registry is in use, why (flag, environment or default), its backend, schema, size and goals.

    Opens the registry read-only: a registry that does not exist yet is reported, not created.
    """
    from loopx.views.registry_info import describe

    root = ctx.find_root()
    source = root.get_parameter_source("registry_url")
    origin = {"COMMANDLINE": "flag", "ENVIRONMENT": "env"}.get(getattr(source, "name", ""), "default")
    from loopx.cli.output import REGISTRY_KEY

    emit(describe(ctx.meta.get(REGISTRY_KEY), origin), _info_text)


@registry.command()
def init():
    """Create an empty registry where --registry / LOOPX_REGISTRY points (or say it exists).

    Read commands never create one: they refuse a path with no registry (registry_not_found).
    """
    from loopx.ledger.registry import Registry, display_url, open_store, resolve_url

    url = resolve_url(click.get_current_context().find_root().meta.get("loopx.ledger.registry"))
    try:
        open_store(url, readonly=True).close()
        created = False
    except LoopxError as err:
        # PostgreSQL says so with registry_unavailable: a server is there, the registry is not.
        if err.code != "registry_not_found" and not (
                err.code == "registry_unavailable" and err.message.startswith("no LoopX registry")):
            raise
        created = True
    with Registry.open(url) as reg:
        version = reg.store.schema_version()
    emit({"registry": display_url(url), "created": created, "schema_version": version},
         lambda d: f"{'created' if d['created'] else 'exists'}: {d['registry']} (schema {d['schema_version']})")


def _rekeyed_text(d: dict) -> str:
    how = "adopted as it stands and keyed" if d["adopted"] else "re-keyed"
    return f"registry {d['registry_id']}: {d['goals']} goals {how}; new key {d['key']} (mode 0600)"


@registry.command()
@click.option("--adopt", is_flag=True,
              help="Trust the registry as it stands (the old key is lost, or goals fail their check).")
def rekey(adopt):
    """Give the registry a new integrity key and recompute every chain and digest with it.

    For a key that was exposed, or (``--adopt``) lost. Refused while a goal fails its check with
    the current key unless ``--adopt``. User only. See docs/security.md.
    """
    from loopx.ledger.registry import Registry, current_actor
    from loopx.ledger.rekey import rekey as do_rekey

    actor = current_actor()
    with Registry.open(click.get_current_context().find_root().meta.get("loopx.ledger.registry"), create=False) as reg:
        emit(do_rekey(reg, actor, adopt=adopt), _rekeyed_text)


@registry.command()
def reanchor():
    """Accept the registry as it stands as the newest (after restoring an older backup on purpose).

    ``quota should-run`` answers ``repair`` (registry_rolled_back) on a registry older than what
    this user last committed to it; this records its current heads as the rollback anchor.
    User only.
    """
    from loopx.ledger.registry import Registry, current_actor
    from loopx.ledger.rekey import reanchor as do_reanchor

    actor = current_actor()
    with Registry.open(click.get_current_context().find_root().meta.get("loopx.ledger.registry"), create=False) as reg:
        emit(do_reanchor(reg, actor),
             lambda d: f"registry {d['registry_id']}: anchored at its current {d['goals']} goal heads")


@registry.command()
@click.option("--evidence-bytes", type=int, default=None,
              help="Largest payload (summary + data as JSON) one evidence item may store (default 1 MiB).")
@click.option("--goal-state-bytes", type=int, default=None,
              help="Most plugin state (keys + JSON values, all capabilities) one goal may hold (default 4 MiB).")
def caps(evidence_bytes, goal_state_bytes):
    """Show or set the registry's per-goal caps on evidence payloads and plugin state.

    Writes past a cap are refused (evidence_too_large, state_too_large) and write nothing. Only a
    user sets them; they live in the registry, not in an environment an agent could change.
    """
    from loopx.ledger import caps as bounded
    from loopx.cli.output import actor, open_registry

    with open_registry() as reg:
        out = bounded.set_caps(reg, actor(), {"evidence_bytes": evidence_bytes, "goal_state_bytes": goal_state_bytes})
    emit(out, lambda c: "\n".join(f"{k.replace('_', ' '):<18} {v:,}" for k, v in c.items()))


def _keys_text(d: dict) -> str:
    lines = [f"keys in {d['key_dir']}"]
    for k in d["keys"]:
        where = ", ".join(f"{p['location']} ({p['state']})" for p in k["registries"]) or "no registry recorded"
        tag = "  [orphan]" if k["orphan"] else "  [in force]" if k["in_force"] else ""
        lines.append(f"  {k['registry_id']}  mode {k['mode']}{tag}\n      {where}")
    if not d["keys"]:
        lines.append("  none")
    if "pruned" in d:
        lines.append(f"pruned {len(d['pruned'])} orphan key(s)" + (f": {', '.join(d['pruned'])}" if d["pruned"] else ""))
    elif d["orphans"]:
        lines.append(f"{d['orphans']} orphan key(s): `loopx registry keys --prune` removes them")
    return "\n".join(lines)


@registry.command()
@click.option("--prune", is_flag=True, help="Remove the orphan keys (and their anchors). User only.")
def keys(prune):
    """The integrity keys on this machine and the registry each belongs to.

    A key is an orphan when no registry it was made for is where it was last written (an SQLite
    file gone, or holding another registry now); a PostgreSQL registry's key never is. A moved
    registry: run `loopx --registry NEW registry keys` once, before `--prune`.
    """
    from loopx.views import key_files
    from loopx.cli.output import actor, registry_url

    url = registry_url()
    emit(key_files.prune(actor(), url) if prune else key_files.inventory(url), _keys_text)
