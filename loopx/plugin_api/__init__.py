"""The namespaces of the plugin API: each module here is one name of :mod:`loopx.api` (``goals``,
``todos``, ``cli``, ...) and re-exports, under short names, the functions of the core a plugin
may call. A plugin reaches them through ``loopx.api`` only (``from loopx.api import todos``);
``docs/plugins.md`` documents every member under its heading.
"""
