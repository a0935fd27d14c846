"""Progress: one self-updating status line on stderr, for the slow commands.

Capture of a large model, exact search and a validation sweep can each take a while;
a line such as ``validating [#######.........] 7/16  44%  12.3s  gpt2/small`` tells
the user that something is happening. It is written only when the stream is a
terminal: piped output, CI logs and tests see nothing, so no caller needs a
``--quiet`` flag.

Usage::

    for case in progress(cases, "validating"):
        ...
    with progress(len(groups), "search") as p:
        for g in groups:
            ...
            p.update(note=g.name)
"""

from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator

BAR = 16


class Progress:
    """A status line ``label [####....] i/n  pct  elapsed  note`` (or ``label i  elapsed``
    when the total is unknown), redrawn at most ``1 / min_interval`` times a second
    and erased when done."""

    def __init__(self, total: int | None = None, label: str = "", stream=None,
                 min_interval: float = 0.1, iterable: Iterable | None = None):
        self.total = total
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        self.min_interval = min_interval
        self.iterable = iterable
        self.n = 0
        self.note = ""
        self.t0 = time.monotonic()
        self._last = 0.0
        self._width = 0
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())

    # -- drawing ---------------------------------------------------------------
    def line(self) -> str:
        """The status text for the current state (no control characters)."""
        el = time.monotonic() - self.t0
        parts = [self.label] if self.label else []
        if self.total:
            frac = min(1.0, self.n / self.total)
            fill = int(round(frac * BAR))
            parts.append("[" + "#" * fill + "." * (BAR - fill) + "]")
            parts.append(f"{self.n}/{self.total}")
            parts.append(f"{frac * 100:3.0f}%")
        else:
            parts.append(str(self.n))
        parts.append(f"{el:.1f}s")
        if self.note:
            parts.append(self.note)
        return "  ".join(parts)

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self.min_interval:
            return
        self._last = now
        text = self.line()[:200]
        # pad over a longer previous line instead of relying on terminal escapes
        pad = max(0, self._width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._width = len(text)

    # -- API -------------------------------------------------------------------
    def update(self, n: int = 1, note: str | None = None) -> None:
        """Count ``n`` more items done; ``note`` replaces the trailing text."""
        self.n += n
        if note is not None:
            self.note = str(note)
        self._draw(force=self.total is not None and self.n >= self.total)

    def close(self) -> None:
        """Erase the line so that whatever is printed next starts clean."""
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
        self._width = 0

    def __enter__(self) -> "Progress":
        self._draw(force=True)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __iter__(self) -> Iterator:
        if self.iterable is None:
            raise TypeError("this Progress wraps no iterable; call update() instead")
        self._draw(force=True)
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()


def progress(iterable_or_total, label: str = "", stream=None) -> Progress:
    """A :class:`Progress` over an iterable (iterate it) or a count (use it as a
    context manager and call ``update()``). Silent unless ``stream`` (default stderr)
    is a terminal."""
    if isinstance(iterable_or_total, bool):
        raise TypeError("progress() takes an iterable or a number of steps")
    if isinstance(iterable_or_total, int):
        return Progress(total=iterable_or_total, label=label, stream=stream)
    try:
        total = len(iterable_or_total)
    except TypeError:
        total = None
    return Progress(total=total, label=label, stream=stream, iterable=iterable_or_total)
