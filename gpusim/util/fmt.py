"""How gpusim writes numbers, bytes, times, shapes and text tables: one definition of
each, used by the text reports (:mod:`gpusim.report.text`) and the pictures (:mod:`gpusim.report.viz`).

One convention for magnitudes: three significant digits and decimal SI prefixes, as
datasheets quote bandwidth (3.35 TB/s) and as ``nvidia-smi`` and the profiler count
bytes. Tables pack number and unit (``201MB``); labels and prose put a space between
(``201 MB``).
"""

from __future__ import annotations

import math

PREFIXES = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))


def fmt_num(x: float | None, unit: str = "", sep: str = "", digits: int = 3) -> str:
    """Decimal prefixes, ``digits`` significant digits: ``fmt_num(2.01e8, "B")`` ->
    ``'201MB'``, ``fmt_num(3.35e12, "B/s", " ")`` -> ``'3.35 TB/s'``; None -> ``'-'``."""
    if x is None:
        return "-"
    if x == 0 or not math.isfinite(x):
        return f"{x:g}{sep}{unit}" if unit else f"{x:g}"
    for p, f in PREFIXES:
        if abs(x) >= f:
            return f"{x / f:.{digits}g}{sep}{p}{unit}"
    return f"{x:.{digits}g}{sep}{unit}" if unit else f"{x:.{digits}g}"


def fmt_bytes(b: float, sep: str = " ") -> str:
    """Bytes for labels: ``fmt_bytes(67108864)`` -> ``'67.1 MB'`` (decimal, as the
    tables print them; ``sep=""`` gives the table form ``'67.1MB'``)."""
    return fmt_num(float(b), "B", sep)


def fmt_si(x: float, unit: str = "", digits: int = 3) -> str:
    """A quantity for labels: ``fmt_si(3.35e12, 'B/s')`` -> ``'3.35 TB/s'``."""
    return fmt_num(x, unit, " ", digits)


def fmt_us(us: float) -> str:
    """A duration for labels: µs below a millisecond, then ms, then s."""
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs" if us < 100 else f"{us:.0f} µs"


def fmt_shape(s) -> str:
    """``(8, 128)`` -> ``'8x128'``; a tuple of shapes -> ``'8x128,128'``; ``()`` for a scalar."""
    if not s:
        return "()"
    if isinstance(s[0], (tuple, list)):
        return ",".join(fmt_shape(x) for x in s)
    return "x".join(str(d) for d in s)


def table(rows: list[list[str]], header: list[str], align: str | None = None) -> str:
    """A plain-text table: columns two spaces apart, a dashed rule under the header.

    ``align`` has one letter per column, ``l`` (left) or ``r`` (right); by default the
    first column is left-aligned and the others right-aligned (numbers).
    """
    cols = len(header)
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(cols)]
    align = align or ("l" + "r" * (cols - 1))

    def line(r):
        return "  ".join(str(c).ljust(w) if a == "l" else str(c).rjust(w)
                         for c, w, a in zip(r, widths, align))
    out = [line(header), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)
