"""``loopx status --watch``: a live terminal view for operators (e.g. over SSH).

Redraws when the registry changes - the store's ``data_version`` (SQLite's ``PRAGMA
data_version``, PostgreSQL's change notifications) is polled every ``interval`` seconds, which
costs one cheap call and no query - and at least every ``refresh`` seconds anyway, because time
alone changes some facts (leases expire, open runs become abandoned). On a terminal each frame
replaces the last and is cut to the window's height; piped, frames follow one another (one JSON
document per line under ``--json``). Ctrl-C quits cleanly with status 0.
"""

from __future__ import annotations

import json
import shutil
import sys
import time

CLEAR = "\x1b[H\x1b[2J"
HIDE_CURSOR, SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"
BOLD_RED, RESET = "\x1b[1;31m", "\x1b[0m"


def run(reg, build, text, *, as_json: bool, interval: float, refresh: float, label: str, out=None) -> None:
    """Draw ``text(build(tx))`` now and whenever the registry changes, until Ctrl-C."""
    out = out or sys.stdout
    tty = out.isatty() and not as_json
    last_version, last_draw = None, 0.0
    if tty:
        out.write(HIDE_CURSOR)
    try:
        while True:
            version = reg.store.data_version()
            now = time.monotonic()
            if version != last_version or now - last_draw >= refresh:
                last_version, last_draw = version, now
                with reg.read() as tx:
                    view = build(tx)
                if as_json:
                    out.write(json.dumps(view, ensure_ascii=False) + "\n")
                else:
                    from loopx.values.terminal import safe

                    out.write(_frame(view, safe(text(view)), label, tty))
                out.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        return
    finally:
        if tty:
            out.write(SHOW_CURSOR + "\n")
            out.flush()


def _frame(view: dict, body: str, label: str, tty: bool) -> str:
    stamp = time.strftime("%H:%M:%S")
    head = f"loopx status --watch · {label} · revision {view.get('revision')} · {stamp} · Ctrl-C quits"
    lines = body.splitlines()
    if not tty:
        return "\n".join([head, *lines, ""]) + "\n"
    # Attention first, and loud: the lines a human must act on.
    lines = [f"{BOLD_RED}{ln}{RESET}" if ln.startswith("!") or ln.lstrip().startswith("attention:") else ln
             for ln in lines]
    rows = shutil.get_terminal_size((100, 40)).lines - 2
    if len(lines) > rows:
        lines = lines[: rows - 1] + [f"… {len(lines) - rows + 1} more lines (make the window taller)"]
    return CLEAR + "\n".join([head, "", *lines])
