"""LoopX's own parts, registered through the same plugin manager as third-party plugins.

Every implementation here is ``trylast`` so that a plugin can override a default.
"""

from loopx import hookimpl


@hookimpl(trylast=True)
def loopx_register_stores(register):
    from loopx.store.sqlite import open_sqlite

    register("sqlite", open_sqlite)
