"""What the pictures share: colours, kernel descriptions, SVG primitives and file output.

Every picture is written atomically (a temporary file, then a rename) after
:func:`check_target` has made sure, before any slow work, that the file can be written.
"""

from __future__ import annotations

import html
import math
import os
import tempfile

from gpusim.util.atomic import atomic_path, atomic_write
from gpusim.util.errors import UserError
from gpusim.util.fmt import fmt_bytes, fmt_shape, fmt_si

BOUND_COLOURS = {"memory": "#2f6fd0", "compute": "#e8743b", "latency": "#8e6cc9"}
BOUND_TINTS = {"memory": "#dfe9fb", "compute": "#fde6d8", "latency": "#ede5f8"}
BOUNDS = ("memory", "compute", "latency")
HOST_COLOUR = "#3f9c8a"
CALL_COLOUR = "#23645a"
IDLE_COLOUR = "#d9534f"
INK, MUTED, GRID = "#1f2328", "#656d76", "#e4e7eb"
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
PLOT_FORMATS = (".png", ".svg", ".pdf")


# ---------------------------------------------------------------------------
# files
def check_target(path: str) -> None:
    """Raise :class:`~gpusim.util.errors.UserError` (``cannot write PATH: why``) unless a file
    can be written at ``path``; cheap, so callers run it before any slow work.

    It tries what the atomic write will do: create a temporary file in the target's
    folder (and removes it). An existing target must be a regular file: replacing a
    device or a folder by a rename is never what was meant.
    """
    if not path or "\0" in path:
        raise UserError(f"cannot write {path!r}: not a file name")
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        why = "is not a folder" if os.path.exists(d) else "does not exist"
        raise UserError(f"cannot write {path}: folder {d} {why}")
    if os.path.isdir(path):
        raise UserError(f"cannot write {path}: it is a folder; give a file name")
    if os.path.exists(path) and not os.path.isfile(path):
        raise UserError(f"cannot write {path}: it exists and is not a regular file")
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".gpusim-check-")
    except OSError as e:
        raise UserError(f"cannot write {path}: cannot create a file in {d} "
                        f"({e.strerror or e})") from None
    os.close(fd)
    os.unlink(tmp)


def write_atomic(path: str, data) -> None:
    """Write ``data`` (str or bytes) to ``path`` atomically, after checking the target;
    an OS failure on the way (a full disk) is a one-line user error, and leaves nothing."""
    check_target(path)
    try:
        atomic_write(path, data)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None


def load_matplotlib():
    """``(Figure, FigureCanvasAgg)``; matplotlib is the optional ``plot`` extra, so it is
    imported here, when a raster picture is asked for."""
    try:
        import matplotlib  # noqa: F401
        # the Agg canvas below renders without a display; no pyplot, no global state
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError("--plot needs matplotlib: pip install 'gpusim[plot]'") from None
    return Figure, FigureCanvasAgg


def plot_format(path: str) -> str:
    """The matplotlib format of ``path`` (png, svg or pdf), from its extension."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in PLOT_FORMATS:
        raise UserError(f"cannot plot to {path}: use a .png, .svg or .pdf file name")
    return ext[1:]


def html_target(path: str) -> None:
    """``gpusim report --out`` writes HTML: a ``.png`` or ``.pdf`` name would hold a page
    no viewer opens as what its name says."""
    if os.path.splitext(path)[1].lower() not in (".html", ".htm"):
        raise UserError(f"cannot write the report to {path}: it is an HTML page, give a "
                        ".html file name")


def save_figure(fig, path: str, fmt: str) -> None:
    """Save a matplotlib figure to ``path`` atomically."""
    try:
        with atomic_path(path, "." + fmt) as tmp:
            fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight",
                        metadata={"Software": "gpusim"} if fmt == "png" else None)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None


# ---------------------------------------------------------------------------
# what is drawn
def runs_of(pred=None, result=None) -> list[tuple[str, object]]:
    """``[(label, Prediction)]``: the unfused and fused runs of a search, or one run."""
    if result is not None:
        return [("unfused (eager)", result.unfused), (f"fused ({result.fused.mode})", result.fused)]
    if pred is not None:
        return [(f"predicted ({pred.mode})", pred)]
    raise ValueError("give a Prediction (pred=) or a SearchResult (result=)")


def ops_text(k, graph=None) -> str:
    """A kernel's ops: ``linear → gelu`` where one feeds the next, ``q, k, v`` for
    siblings fused side by side (no graph: commas throughout)."""
    out = k.op_types[0] if k.op_types else ""
    for prev, op, t in zip(k.ops, k.ops[1:], k.op_types[1:]):
        chained = (graph is not None and op in graph.dataflow
                   and graph.dataflow.has_edge(prev, op))
        out += (" → " if chained else ", ") + t
    return out


def kernel_tip(k, extra: str = "", graph=None) -> str:
    ai = "∞" if math.isinf(k.intensity) else f"{k.intensity:.3g}"
    ops = ops_text(k, graph)
    return (f"{k.name}\nops: {ops}\nshape {fmt_shape(k.shape)} · unit {k.unit}\n"
            f"{fmt_si(k.flops, 'FLOP')} · {fmt_bytes(k.bytes_read)} in, "
            f"{fmt_bytes(k.bytes_written)} out · {ai} FLOP/B\n"
            f"{k.us:.2f} µs predicted ({k.bound}-bound; memory {k.mem_us:.2f} µs, "
            f"compute {k.compute_us:.2f} µs)" + extra)


# ---------------------------------------------------------------------------
# SVG text
def esc(s) -> str:
    return html.escape(str(s), quote=True)


def text_w(s: str, size: float = 11.0) -> float:
    """Rough rendered width of sans-serif text (no font metrics without a browser)."""
    return len(s) * size * 0.58


def short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def svg_open(w: float, h: float, label: str, extra: str = "") -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w:.0f} {h:.0f}" '
            f'width="{w:.0f}" height="{h:.0f}" role="img" aria-label="{esc(label)}" '
            f'font-family="{esc(FONT)}" font-size="11" style="max-width:100%;height:auto"'
            f'{extra}>')


def arrow_marker(mid: str, colour: str) -> str:
    return (f'<marker id="{mid}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
            f'fill="{colour}"/></marker>')
