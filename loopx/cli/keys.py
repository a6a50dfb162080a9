"""Where commands keep shared settings in ``click.Context.meta`` (a module of its own so that
``loopx.cli.output`` and the id helpers share them without importing each other)."""

FORMAT_KEY = "loopx.format"
REGISTRY_KEY = "loopx.registry"
