"""The roofline (``--plot F.png|svg|pdf`` with matplotlib; an SVG drawn by hand for the
HTML report).

The DRAM-bandwidth slope and a flat roof for each execution unit the kernels use; each
kernel a dot at (FLOP per byte, achieved FLOP/s), its area proportional to its time and
its colour saying what bounds it. For a search, arrows show how fusion moves each group
(its unfused parts in aggregate -> the fused kernel). Both renderings share the data
(:func:`roofline_points`, :func:`roofs`, :func:`fusion_moves`) and the label placement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpusim.util.fmt import fmt_si, fmt_us
from gpusim.report.viz.common import (BOUND_COLOURS, BOUNDS, GRID, INK, MUTED, check_target, load_matplotlib, plot_format, save_figure, short, text_w)

UNIT_NAMES = {"fp64": "FP64", "fp32": "FP32 CUDA cores", "tf32_tc": "TF32 tensor cores",
              "fp16_tc": "FP16 tensor cores", "bf16_tc": "BF16 tensor cores"}


@dataclass(frozen=True)
class RoofPoint:
    """One kernel on the roofline."""

    kernel: object          # KernelEstimate
    intensity: float        # FLOP per byte moved
    flops_per_s: float      # achieved: FLOPs over predicted time


@dataclass(frozen=True)
class FusionMove:
    """Where a fused group sat before (its unfused parts in aggregate) and after."""

    kernel: object          # the fused KernelEstimate
    parts: tuple            # the unfused KernelEstimates it replaces
    x0: float
    y0: float
    x1: float
    y1: float


def roofline_points(kernels) -> tuple[list[RoofPoint], list]:
    """``(points, left_out)``: kernels with no FLOPs (copies) or no bytes have no place
    on a log-log roofline, so they are returned apart for a note."""
    pts, out = [], []
    for k in kernels:
        if k.flops > 0 and k.bytes > 0 and k.us > 0:
            pts.append(RoofPoint(k, k.flops / k.bytes, k.flops / (k.us * 1e-6)))
        else:
            out.append(k)
    return pts, out


def roofs(spec, kernels) -> list[tuple[str, float]]:
    """``[(unit, peak FLOP/s)]`` for each execution unit the kernels run on, plus the
    CUDA cores (where every pointwise op runs), highest first."""
    units = sorted({k.unit for k in kernels} | {"fp32"})
    by_peak: dict = {}
    for u in units:
        try:
            f = spec.peak_flops(u)
        except Exception:  # noqa: BLE001 - a unit this spec lacks has no roof to draw
            continue
        # units with one peak (fp16 and bf16 tensor cores) share one roof: "fp16_tc/bf16_tc"
        by_peak[f] = f"{by_peak[f]}/{u}" if f in by_peak else u
    return sorted(((u, f) for f, u in by_peak.items()), key=lambda x: -x[1])


def unit_name(unit: str) -> str:
    """``"fp16_tc/bf16_tc"`` -> ``"FP16/BF16 tensor cores"``."""
    names = [UNIT_NAMES.get(u, u) for u in unit.split("/")]
    tail = " tensor cores"
    if len(names) > 1 and all(n.endswith(tail) for n in names):
        return "/".join(n[: -len(tail)] for n in names) + tail
    return " / ".join(names)


def _roof_text(unit: str, f: float) -> str:
    return f"{unit_name(unit)}  {fmt_si(f, 'FLOP/s')}"


def _parts_of(result, kernel) -> list:
    """Unfused kernels whose op lies in ``kernel`` (batch norms folded into one of its
    convolutions count as its parts too)."""
    members = set(kernel.ops)
    for n in result.partition.folded:
        if result.graph.g.nodes[n].get("folded_into") in members:
            members.add(n)
    return [u for u in result.unfused.kernels if u.ops[0] in members]


def fusion_moves(result) -> list[FusionMove]:
    """One move per fused kernel of more than one op that does FLOPs."""
    moves = []
    for k in result.fused.kernels:
        if len(k.ops) < 2 or k.flops <= 0 or k.bytes <= 0:
            continue
        parts = _parts_of(result, k)
        f = sum(p.flops for p in parts)
        b = sum(p.bytes for p in parts)
        t = sum(p.us for p in parts)
        if f <= 0 or b <= 0 or t <= 0:
            continue
        moves.append(FusionMove(k, tuple(parts), f / b, f / (t * 1e-6), k.intensity,
                                k.flops / (k.us * 1e-6)))
    return moves


@dataclass
class _RoofData:
    spec: object
    graph: object           # for the ops of a kernel in tooltips
    title: str
    points: list            # RoofPoint of the run shown solid (prediction / fused)
    before: list            # RoofPoint of the unfused run (search only)
    moves: list
    left_out: list
    peaks: list
    xr: tuple
    yr: tuple


def _decade_range(lo: float, hi: float) -> tuple[float, float]:
    return 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))


def _roof_data(pred=None, result=None) -> _RoofData:
    if result is not None:
        main = result.fused
        title = f"{result.graph.name}: unfused → fused ({result.fused.mode})"
        before, before_out = roofline_points(result.unfused.kernels)
        moves = fusion_moves(result)
        all_k = list(result.fused.kernels) + list(result.unfused.kernels)
    else:
        main, title, before, before_out, moves = pred, f"{pred.graph.name} ({pred.mode})", [], [], []
        all_k = list(pred.kernels)
    pts, left_out = roofline_points(main.kernels)
    # a copy left out of both runs is one kernel to mention, not two
    seen = {k.ops for k in left_out}
    left_out += [k for k in before_out if k.ops not in seen]
    spec = main.spec
    peaks = roofs(spec, all_k)
    ridges = [f / spec.bandwidth for _, f in peaks]
    xs = [p.intensity for p in pts + before] + [m.x0 for m in moves] + ridges
    ys = [p.flops_per_s for p in pts + before] + [m.y0 for m in moves]
    xlo, xhi = min(xs) / 3, max(xs) * 3
    ylo = min(ys) / 3 if ys else peaks[-1][1] / 1e4
    return _RoofData(spec, main.graph, title, pts, before, moves, left_out, peaks,
                     _decade_range(xlo, xhi),
                     (10 ** math.floor(math.log10(ylo)), peaks[0][1] * 4))


def _left_out_note(left_out) -> str:
    if not left_out:
        return ""
    t = sum(k.us for k in left_out)
    names = ", ".join(k.name for k in left_out[:3]) + (" ..." if len(left_out) > 3 else "")
    n = len(left_out)
    return (f"not shown: {n} kernel{'s' if n > 1 else ''} with no FLOPs, which no log-log "
            f"roofline can place ({names}; {fmt_us(t)} in all)")


def _radius(us: float, max_us: float, lo: float = 3.5, hi: float = 13.0) -> float:
    """Dot radius with area proportional to time, so big dots are where time goes."""
    return lo + (hi - lo) * math.sqrt(us / max_us) if max_us > 0 else lo


# ---------------------------------------------------------------------------
# labels: beside their dots, over nothing else
def _overlaps(a, b) -> bool:
    return not (a[2] < b[0] or a[0] > b[2] or a[3] < b[1] or a[1] > b[3])


def _hits_circle(box, c) -> bool:
    cx, cy, r = c
    nx_ = min(max(cx, box[0]), box[2])
    ny_ = min(max(cy, box[1]), box[3])
    return math.hypot(cx - nx_, cy - ny_) < r - 0.5


def _as_circle(box):
    """A box as a circle around it, so that later labels keep clear of it."""
    return ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2,
            math.hypot(box[2] - box[0], box[3] - box[1]) / 2)


def _merge_coincident(items):
    """Dots drawn on top of each other get one label: ``relu, mul``."""
    out: list = []
    for text, cx, cy, r in items:
        for j, (t2, x2, y2, r2) in enumerate(out):
            if abs(cx - x2) < 3 and abs(cy - y2) < 3:
                out[j] = (t2 + ", " + text, x2, y2, max(r, r2))
                break
        else:
            out.append((text, cx, cy, r))
    return out


def _place_labels(items, circles, bounds, size: float, keep_out=(), max_chars: int = 28):
    """Labels beside dots (right, left, above, below: the first spot free of other
    labels and dots); a dot with no free spot goes unlabelled rather than overprinted.

    ``items``: ``[(text, cx, cy, r)]`` in priority order, y pointing down; ``keep_out``:
    boxes already taken (legend, roof labels). Returns ``[(text, box, anchor)]``,
    ``anchor`` in start/end/middle.
    """
    placed, out = list(keep_out), []
    for text, cx, cy, r in _merge_coincident(items):
        text = short(text, max_chars)
        w, h = text_w(text, size), size
        cands = [((cx + r + 3, cy - h / 2, cx + r + 3 + w, cy + h / 2), "start"),
                 ((cx - r - 3 - w, cy - h / 2, cx - r - 3, cy + h / 2), "end"),
                 ((cx - w / 2, cy - r - 3 - h, cx + w / 2, cy - r - 3), "middle"),
                 ((cx - w / 2, cy + r + 3, cx + w / 2, cy + r + 3 + h), "middle")]
        for box, anchor in cands:
            if (box[0] < bounds[0] or box[2] > bounds[2] or box[1] < bounds[1] or box[3] > bounds[3]
                    or any(_overlaps(box, b) for b in placed)
                    or any(_hits_circle(box, c) for c in circles)):
                continue
            placed.append(box)
            out.append((text, box, anchor))
            break
    return out


def _roof_labels(d: "_RoofData", to_px, circles, size: float):
    """``[(text, box, anchor)]``, one per flat roof: above it at the right end, above it
    just right of its ridge, or below it at the right end, whichever covers fewest dots."""
    x_right = to_px(d.xr[1], d.yr[0])[0]
    h = size * 1.15
    out, taken = [], []
    for unit, f in d.peaks:
        text = _roof_text(unit, f)
        w = text_w(text, size)
        rx, y = to_px(f / d.spec.bandwidth, f)
        cands = [((x_right - 6 - w, y - 4 - h, x_right - 6, y - 4), "end"),
                 ((rx + 10, y - 4 - h, rx + 10 + w, y - 4), "start"),
                 ((x_right - 6 - w, y + 4, x_right - 6, y + 4 + h), "end")]

        def cost(c, i):
            box = c[0]
            return (sum(_hits_circle(box, cc) for cc in circles)
                    + 10 * sum(_overlaps(box, t) for t in taken), i)
        box, anchor = min(cands, key=lambda c: cost(c, cands.index(c)))
        taken.append(box)
        out.append((text, box, anchor))
    return out


def _label_items(d: "_RoofData", to_px, n: int = 8):
    """The biggest kernels' labels, with the dots they must avoid, in pixels."""
    max_us = max([p.kernel.us for p in d.points + d.before] or [1.0])
    circles = [(*to_px(p.intensity, p.flops_per_s), _radius(p.kernel.us, max_us))
               for p in d.points + d.before]
    top = sorted(d.points, key=lambda p: -p.kernel.us)[:n]
    items = [(p.kernel.name, *to_px(p.intensity, p.flops_per_s), _radius(p.kernel.us, max_us))
             for p in top]
    return items, circles


# ---------------------------------------------------------------------------
# with matplotlib (--plot)
def roofline_figure(pred=None, result=None):
    """A matplotlib Figure of the roofline (see the module docstring)."""
    Figure, FigureCanvasAgg = load_matplotlib()
    from matplotlib.lines import Line2D     # optional extra: imported once it is known there
    d = _roof_data(pred, result)
    fig = Figure(figsize=(9.0, 6.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*d.xr)
    ax.set_ylim(*d.yr)
    bw, spec = d.spec.bandwidth, d.spec
    xs = np.logspace(math.log10(d.xr[0]), math.log10(d.xr[1]), 400)
    top_unit, top = d.peaks[0]
    handles = []
    handles += ax.plot(xs, np.minimum(xs * bw, top), color=INK, lw=2.0, zorder=2,
                       label=f"roofline: DRAM {fmt_si(bw, 'B/s')}, {unit_name(top_unit)}")
    handles += ax.plot(xs, np.minimum(xs * bw * spec.mem_efficiency, top), color=INK, lw=0.8,
                       ls="--", alpha=0.6, zorder=2,
                       label=f"achievable DRAM ({spec.mem_efficiency:.0%} of peak, model)")
    handles += ax.plot(xs, np.minimum(xs * spec.l2_bandwidth, top), color=MUTED, lw=0.8, ls=":",
                       zorder=2, label=f"L2 {fmt_si(spec.l2_bandwidth, 'B/s')}")
    for unit, f in d.peaks:
        ax.plot([f / bw, d.xr[1]], [f, f], color=INK, lw=2.0 if f == top else 1.0,
                ls="-" if f == top else "--", zorder=2)
    max_us = max([p.kernel.us for p in d.points + d.before] or [1.0])
    # matplotlib sizes markers in points^2; _radius is in points here
    if d.before:
        ax.scatter([p.intensity for p in d.before], [p.flops_per_s for p in d.before],
                   s=[(2 * _radius(p.kernel.us, max_us)) ** 2 for p in d.before],
                   facecolors="none", edgecolors=[BOUND_COLOURS[p.kernel.bound] for p in d.before],
                   linewidths=1.2, alpha=0.75, zorder=3)
    for b in BOUNDS:
        sel = [p for p in d.points if p.kernel.bound == b]
        if sel:
            ax.scatter([p.intensity for p in sel], [p.flops_per_s for p in sel],
                       s=[(2 * _radius(p.kernel.us, max_us)) ** 2 for p in sel],
                       color=BOUND_COLOURS[b], edgecolors="white", linewidths=0.8, alpha=0.9,
                       zorder=4)
            handles.append(Line2D([], [], ls="", marker="o", markersize=7, color=BOUND_COLOURS[b],
                                  label=f"{b}-bound kernel" + (" (fused run)" if d.before else "")))
    if d.before:
        handles.append(Line2D([], [], ls="", marker="o", markersize=7, markerfacecolor="none",
                              markeredgecolor=MUTED, label="unfused kernel (eager)"))
    for m in d.moves:
        ax.annotate("", xy=(m.x1, m.y1), xytext=(m.x0, m.y0), zorder=5,
                    arrowprops=dict(arrowstyle="-|>", color="#333333", lw=1.1,
                                    shrinkA=2, shrinkB=6))
    if d.moves:
        handles.append(Line2D([], [], color="#333333", lw=1.1, marker=">", markersize=5,
                              label="fusion: unfused parts → fused kernel"))
    handles.append(Line2D([], [], ls="", label="dot area ∝ predicted time"))
    ax.set_xlabel("arithmetic intensity (FLOP per byte of DRAM/L2 traffic)")
    ax.set_ylabel("achieved FLOP/s (FLOPs / predicted time)")
    ax.set_title(f"Roofline: {d.title} on {d.spec.display_name}", fontsize=11)
    ax.grid(True, which="major", color=GRID, lw=0.8)
    ax.grid(True, which="minor", color=GRID, lw=0.4, alpha=0.5)
    ax.set_axisbelow(True)
    ax.legend(handles=handles, loc="upper left", fontsize=8, framealpha=0.92)
    note = _left_out_note(d.left_out)
    if note:
        fig.text(0.01, 0.005, note, fontsize=8, color=MUTED, ha="left", va="bottom")
    fig.tight_layout()
    _mpl_labels(fig, ax, d)
    return fig


def _mpl_labels(fig, ax, d: _RoofData) -> None:
    """Label the roofs and the biggest kernels, placed in points after layout (so that
    they do not depend on the dpi the figure is saved at)."""
    k = 72.0 / fig.dpi
    w_pts, h_pts = fig.get_figwidth() * 72.0, fig.get_figheight() * 72.0

    def to_pts(x, y):
        px, py = ax.transData.transform((x, y))
        return px * k, h_pts - py * k
    items, circles = _label_items(d, to_pts)
    x0, y0 = to_pts(d.xr[0], d.yr[1])
    x1, y1 = to_pts(d.xr[1], d.yr[0])
    keep_out = []
    leg = ax.get_legend()
    if leg is not None:
        bb = leg.get_window_extent(fig.canvas.get_renderer())
        keep_out.append((bb.x0 * k, h_pts - bb.y1 * k, bb.x1 * k, h_pts - bb.y0 * k))
    roof = _roof_labels(d, to_pts, circles, 8.5)
    keep_out += [box for _, box, _ in roof]

    def put(text, box, anchor, size, colour):
        x = {"start": box[0], "end": box[2], "middle": (box[0] + box[2]) / 2}[anchor]
        fig.text(x / w_pts, 1 - (box[1] + box[3]) / 2 / h_pts, text, fontsize=size, color=colour,
                 ha={"start": "left", "end": "right", "middle": "center"}[anchor], va="center")
    for text, box, anchor in roof:
        put(text, box, anchor, 8.5, INK)
    for text, box, anchor in _place_labels(items, circles, (x0, y0, x1, y1), 7.5, keep_out):
        put(text, box, anchor, 7.5, INK)


def plot_output(pred=None, result=None, path: str = "roofline.png"):
    """Write the roofline to ``path`` (.png, .svg or .pdf); returns the path."""
    fmt = plot_format(path)
    check_target(path)
    fig = roofline_figure(pred, result)
    save_figure(fig, path, fmt)
    return path


