"""Progress bars for long work, on stderr and only when stderr is a terminal.

``with progress(total, "copying events") as bar: bar.advance(n)`` draws one line, redrawn in place
at most ten times a second, and ends it with a newline; piped or redirected, it prints nothing,
so scripts and logs see exactly what they saw before. ``LOOPX_PROGRESS=0`` turns it off, ``=1``
forces it on (for terminals that do not say they are one).
"""

from __future__ import annotations

import os
import sys
import time

WIDTH = 28
_MIN_INTERVAL = 0.1
_LINE = 100  # a note is cut to fit one line of a narrow terminal


def enabled(stream=None) -> bool:
    """Whether progress is drawn on ``stream`` (default stderr)."""
    forced = os.environ.get("LOOPX_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    stream = stream or sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def activity_on(stream=None) -> bool:
    """Whether an agent's activity is shown as it streams, one line per event, on ``stream``
    (default stderr): on a terminal, never in a pipe. ``LOOPX_ACTIVITY=0`` / ``=1`` decides instead
    (a worker on a terminal sets it for its turns, whose output it reads through a pipe)."""
    forced = os.environ.get("LOOPX_ACTIVITY")
    if forced in ("0", "1"):
        return forced == "1"
    stream = stream or sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def shown_line(text: str, limit: int = 160) -> str:
    """``text`` fit for one terminal line: control characters (an agent's output may hold any)
    replaced, newlines folded, cut to ``limit`` characters."""
    text = " ".join(str(text).split())
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Progress:
    """One progress line: ``label [#####.....] 45% 4,500/10,000``."""

    def __init__(self, total: int | None, label: str, stream=None):
        self.total = total
        self.label = label
        self.done = 0
        self.stream = stream or sys.stderr
        self.on = enabled(self.stream)
        self._last = 0.0
        self._drawn = False
        self.detail = ""
        self.counting = True  # a counter until told what is happening (note)

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more units done, redrawing if enough time passed."""
        self.done += n
        now = time.monotonic()
        if self.on and (now - self._last >= _MIN_INTERVAL or (self.total and self.done >= self.total)):
            self._last = now
            self._draw()

    def note(self, text: str) -> None:
        """Show ``text`` (what is happening now, e.g. a child's latest line) after the count."""
        self.detail, self.counting = text, False
        self.advance(0)

    def phase(self, label: str, total: int | None = None) -> None:
        """Start the next stage on a fresh line (e.g. "writing" after "reading")."""
        self.finish()
        self.label, self.total, self.done, self._drawn = label, total, 0, False
        if self.on:
            self._draw()

    def _draw(self) -> None:
        if self.total:
            frac = min(1.0, self.done / self.total)
            filled = int(frac * WIDTH)
            text = (f"{self.label} [{'#' * filled}{'.' * (WIDTH - filled)}] {frac * 100:3.0f}% "
                    f"{self.done:,}/{self.total:,}")
        else:
            text = f"{self.label} {self.done:,}" if self.counting else self.label
        if self.detail:
            # A child's line may hold control characters: never sent to the terminal.
            shown = "".join(c if c.isprintable() else "?" for c in self.detail)
            text = f"{text}: {shown}"[:_LINE]
        self.stream.write("\r\x1b[K" + text)
        self.stream.flush()
        self._drawn = True

    def finish(self) -> None:
        """Draw the final state and end the line."""
        if self.on and (self._drawn or self.done):
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def __enter__(self):
        if self.on:
            self._draw()
        return self

    def __exit__(self, *exc):
        self.finish()


def progress(total: int | None, label: str, stream=None) -> Progress:
    """A :class:`Progress` for ``total`` units (None: a counter without a bar)."""
    return Progress(total, label, stream)


def counted(items, total: int | None, label: str):
    """Yield from ``items``, advancing a progress bar of ``total`` by one per item."""
    with progress(total, label) as bar:
        for item in items:
            yield item
            bar.advance()
