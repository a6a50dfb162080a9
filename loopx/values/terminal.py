"""Text for a terminal: stored text shown, never obeyed.

Evidence, summaries, hand-offs, titles and command output are written by agents, and an agent
may be hostile. Printed raw, an escape sequence in them clears the screen, rewrites earlier
lines (CR), rings the bell, or sets the clipboard (OSC 52). :func:`safe` shows every control
character escaped instead (``\\x1b``, ``\\r``, ``\\x9b``, ``\\u202e``), keeping newlines and
tabs. Every text view goes through it (``loopx.cli.output.emit`` and the error line); JSON
output does not need it, since JSON escapes control characters itself.
"""

from __future__ import annotations

import re

# C0 controls but newline and tab, DEL, the C1 controls (U+0080-U+009F, which a terminal may
# read as CSI/OSC/ST), and the bidirectional overrides and isolates that reorder what is shown.
# A string, compiled on first use (re's cache): every command imports this module, few print text.
_CONTROLS = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
_NAMED = {"\r": "\\r", "\x0b": "\\v", "\x0c": "\\f"}


def _escape(m: re.Match) -> str:
    c = m.group()
    if c in _NAMED:
        return _NAMED[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def safe(text: str) -> str:
    """``text`` with every control character but newline and tab shown escaped (``\\x1b``)."""
    return re.sub(_CONTROLS, _escape, text) if re.search(_CONTROLS, text) else text


def closed_pipe() -> None:
    """End the process after its stdout's reader went away (``loopx history G | head -1``):
    quietly, status 0, as ``git log | head`` does. stdout is pointed at /dev/null first, so the
    interpreter's final flush has nowhere to fail."""
    import os
    import sys

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    sys.exit(0)
