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
from gpusim.report.viz.common import (BOUND_COLOURS, BOUNDS, GRID, INK, MUTED, arrow_marker, check_target, esc,
                     kernel_tip, load_matplotlib, plot_format, save_figure, short, svg_open,
                     text_w)

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


# ---------------------------------------------------------------------------
# as hand-written SVG (the report: no matplotlib needed)
class _LogAxes:
    """Maps data to pixels on log-log axes."""

    def __init__(self, xr, yr, left, top, w, h):
        self.lx0, self.lx1 = math.log10(xr[0]), math.log10(xr[1])
        self.ly0, self.ly1 = math.log10(yr[0]), math.log10(yr[1])
        self.left, self.top, self.w, self.h = left, top, w, h

    def px(self, x: float) -> float:
        return self.left + (math.log10(x) - self.lx0) / (self.lx1 - self.lx0) * self.w

    def py(self, y: float) -> float:
        return self.top + self.h - (math.log10(y) - self.ly0) / (self.ly1 - self.ly0) * self.h

    def xy(self, x: float, y: float) -> tuple[float, float]:
        return self.px(x), self.py(y)


def _decades(l0: float, l1: float) -> range:
    """Exponents of the powers of ten within [10**l0, 10**l1]."""
    return range(math.ceil(l0 - 1e-9), math.floor(l1 + 1e-9) + 1)


def _tick_label(v: float, unit: str = "") -> str:
    if 1e-3 <= v < 1e3 and not unit:
        return f"{v:g}"
    return fmt_si(v, unit, 3).replace(" ", "")


def roofline_svg(pred=None, result=None, width: int = 980, height: int = 580,
                 uid: str = "rf") -> str:
    """The roofline as a standalone SVG string (hover a dot for its kernel)."""
    d = _roof_data(pred, result)
    left, right, top, bottom = 78, 24, 34, 62
    ax = _LogAxes(d.xr, d.yr, left, top, width - left - right, height - top - bottom)
    o = [svg_open(width, height, f"Roofline of {d.title} on {d.spec.display_name}"),
         f'<defs><clipPath id="{uid}-clip"><rect x="{left}" y="{top}" width="{ax.w}" '
         f'height="{ax.h}"/></clipPath>{arrow_marker(uid + "-arrow", "#333")}</defs>',
         f'<rect width="{width}" height="{height}" fill="#fff"/>',
         f'<text x="{left}" y="20" font-size="13" font-weight="600" fill="{INK}">Roofline: '
         f'{esc(d.title)} on {esc(d.spec.display_name)}</text>']
    for e in _decades(ax.lx0, ax.lx1):
        x = ax.px(10.0 ** e)
        o.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ax.h}" stroke="{GRID}"/>')
        o.append(f'<text x="{x:.1f}" y="{top + ax.h + 16}" text-anchor="middle" fill="{MUTED}">'
                 f'{_tick_label(10.0 ** e)}</text>')
    for e in _decades(ax.ly0, ax.ly1):
        y = ax.py(10.0 ** e)
        o.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + ax.w}" y2="{y:.1f}" stroke="{GRID}"/>')
        o.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="{MUTED}">'
                 f'{_tick_label(10.0 ** e, "")}</text>')
    o.append(f'<rect x="{left}" y="{top}" width="{ax.w}" height="{ax.h}" fill="none" '
             f'stroke="#c9ced6"/>')
    o.append(f'<text x="{left + ax.w / 2:.0f}" y="{height - 30}" text-anchor="middle" '
             f'fill="{INK}">arithmetic intensity (FLOP per byte moved)</text>')
    o.append(f'<text transform="translate(18 {top + ax.h / 2:.0f}) rotate(-90)" '
             f'text-anchor="middle" fill="{INK}">achieved FLOP/s (FLOPs / predicted time)</text>')
    items, circles = _label_items(d, ax.xy)
    legend, legend_box = _svg_roof_legend(d, ax)
    roof = _roof_labels(d, ax.xy, circles, 11)
    slopes, slope_boxes = _slope_labels(d, ax, circles)
    o.append(f'<g clip-path="url(#{uid}-clip)">')
    o += _svg_roofs(d, ax)
    o += slopes
    o += _svg_points(d, ax, uid)
    o.append("</g>")
    o += legend
    for text, box, anchor in roof:
        x = box[0] if anchor == "start" else box[2]
        o.append(f'<text x="{x:.1f}" y="{box[3] - 2.5:.1f}" text-anchor="{anchor}" fill="{INK}" '
                 f'stroke="#fff" stroke-width="3" paint-order="stroke">{esc(text)}</text>')
    bounds = (left + 2, top + 2, left + ax.w - 2, top + ax.h - 2)
    keep_out = [legend_box] + [b for _, b, _ in roof] + slope_boxes
    for text, box, anchor in _place_labels(items, circles, bounds, 10.5, keep_out):
        x = {"start": box[0], "end": box[2], "middle": (box[0] + box[2]) / 2}[anchor]
        o.append(f'<text x="{x:.1f}" y="{(box[1] + box[3]) / 2 + 3.8:.1f}" text-anchor="{anchor}" '
                 f'font-size="10.5" fill="{INK}" stroke="#fff" stroke-width="3" '
                 f'paint-order="stroke">{esc(text)}</text>')
    note = _left_out_note(d.left_out)
    if note:
        o.append(f'<text x="{left}" y="{height - 10}" fill="{MUTED}" font-size="10.5">'
                 f'{esc(note)}</text>')
    o.append("</svg>")
    return "\n".join(o)


def _svg_roofs(d: _RoofData, ax: _LogAxes) -> list[str]:
    bw, top = d.spec.bandwidth, d.peaks[0][1]
    x0, x1 = 10 ** ax.lx0, 10 ** ax.lx1
    o = []

    def slope(b, style, colour, width):
        ridge = top / b
        return (f'<polyline points="{ax.px(x0):.1f},{ax.py(x0 * b):.1f} {ax.px(ridge):.1f},'
                f'{ax.py(top):.1f} {ax.px(x1):.1f},{ax.py(top):.1f}" fill="none" '
                f'stroke="{colour}" stroke-width="{width}" {style}/>')
    o.append(slope(d.spec.l2_bandwidth, 'stroke-dasharray="2 3"', MUTED, 1))
    o.append(slope(bw * d.spec.mem_efficiency, 'stroke-dasharray="5 4" opacity="0.6"', INK, 1))
    for _, f in d.peaks[1:]:
        o.append(f'<line x1="{ax.px(f / bw):.1f}" y1="{ax.py(f):.1f}" x2="{ax.px(x1):.1f}" '
                 f'y2="{ax.py(f):.1f}" stroke="{INK}" stroke-width="1.2" stroke-dasharray="6 4"/>')
    o.append(slope(bw, "", INK, 2.2))
    return o


def _slope_labels(d: _RoofData, ax: _LogAxes, circles):
    """DRAM and L2 labels along their slopes, each where it is farthest from any dot;
    returns the SVG and the boxes they cover."""
    o, boxes = [], []
    for bw, text, colour in ((d.spec.bandwidth, f"DRAM {fmt_si(d.spec.bandwidth, 'B/s')}", INK),
                             (d.spec.l2_bandwidth, f"L2 {fmt_si(d.spec.l2_bandwidth, 'B/s')}",
                              MUTED)):
        got = _slope_label(ax, bw, d.peaks[0][1], text, colour,
                           circles + [_as_circle(b) for b in boxes])
        if got:
            o.append(got[0])
            boxes.append(got[1])
    return o, boxes


def _slope_label(ax: _LogAxes, bw: float, top: float, text: str, colour: str, circles):
    """``(svg, box)`` of ``text`` set along the slope ``y = bw * x`` where the dots leave
    it most room, or None when the slope is not visible."""
    x0, x1 = 10 ** ax.lx0, 10 ** ax.lx1
    xa, xb = max(x0, 10 ** ax.ly0 / bw), min(top / bw, x1)
    if xb <= xa:
        return None
    pa, pb = ax.xy(xa, xa * bw), ax.xy(xb, xb * bw)
    ang = math.atan2(pb[1] - pa[1], pb[0] - pa[0])
    length = text_w(text) + 4
    ca, sa = math.cos(ang), math.sin(ang)
    la, lb = math.log10(xa), math.log10(xb)
    best = None
    for i in range(1, 19):
        t = i / 20
        xm = 10 ** (la + t * (lb - la))
        px, py = ax.xy(xm, xm * bw)
        if math.hypot(pb[0] - px, pb[1] - py) < length + 8:
            break                      # it would run into the ridge
        # the text sits just above the line: sample along it, 7 px off the line
        samples = [(px + s * ca + 7 * sa, py + s * sa - 7 * ca) for s in range(0, int(length) + 1, 8)]
        clear = min((math.hypot(qx - cx, qy - cy) - r for qx, qy in samples
                     for cx, cy, r in circles), default=1e9)
        if best is None or clear > best[0] + 0.5:
            best = (clear, px, py, samples)
    if best is None:
        return None
    _, px, py, samples = best
    xs, ys = [q[0] for q in samples], [q[1] for q in samples]
    box = (min(xs), min(ys) - 6, max(xs), max(ys) + 6)
    svg = (f'<text transform="translate({px:.1f} {py:.1f}) rotate({math.degrees(ang):.1f}) '
           f'translate(0 -6)" fill="{colour}" font-size="11">{esc(text)}</text>')
    return svg, box


def _svg_points(d: _RoofData, ax: _LogAxes, uid: str) -> list[str]:
    o = []
    max_us = max([p.kernel.us for p in d.points + d.before] or [1.0])
    for p in d.before:
        r = _radius(p.kernel.us, max_us)
        tip = kernel_tip(p.kernel, "\nunfused run (eager)", d.graph)
        o.append(f'<circle cx="{ax.px(p.intensity):.1f}" cy="{ax.py(p.flops_per_s):.1f}" '
                 f'r="{r:.1f}" fill="none" stroke="{BOUND_COLOURS[p.kernel.bound]}" '
                 f'stroke-width="1.4" opacity="0.8"><title>{esc(tip)}</title></circle>')
    for m in d.moves:
        r = _radius(m.kernel.us, max_us)
        xa, ya, xb, yb = ax.px(m.x0), ax.py(m.y0), ax.px(m.x1), ax.py(m.y1)
        dist = math.hypot(xb - xa, yb - ya)
        tip = f"fused {len(m.parts)} kernels into {m.kernel.name}"
        o.append(f'<rect x="{xa - 3:.1f}" y="{ya - 3:.1f}" width="6" height="6" fill="#fff" '
                 f'stroke="#333" stroke-width="1.2"><title>{esc(tip)} (before, aggregate)'
                 f'</title></rect>')
        if dist < r + 4:
            continue
        # stop at the dot's edge so the arrow head stays visible
        xe, ye = xb - (xb - xa) * (r + 1) / dist, yb - (yb - ya) * (r + 1) / dist
        o.append(f'<line x1="{xa:.1f}" y1="{ya:.1f}" x2="{xe:.1f}" y2="{ye:.1f}" stroke="#333" '
                 f'stroke-width="1.3" marker-end="url(#{uid}-arrow)"><title>{esc(tip)}</title></line>')
    for p in sorted(d.points, key=lambda p: -p.kernel.us):
        r = _radius(p.kernel.us, max_us)
        o.append(f'<circle cx="{ax.px(p.intensity):.1f}" cy="{ax.py(p.flops_per_s):.1f}" '
                 f'r="{r:.1f}" fill="{BOUND_COLOURS[p.kernel.bound]}" fill-opacity="0.88" '
                 f'stroke="#fff" stroke-width="1"><title>{esc(kernel_tip(p.kernel, "", d.graph))}</title>'
                 f'</circle>')
    return o


def _svg_roof_legend(d: _RoofData, ax: _LogAxes):
    """Legend lines and the box it covers (labels keep out of it)."""
    items = [("dot", BOUND_COLOURS[b], f"{b}-bound" + (" (fused run)" if d.before else ""))
             for b in BOUNDS]
    if d.before:
        items.append(("ring", MUTED, "unfused kernel (eager)"))
        items.append(("arrow", "#333", "fusion: parts → fused kernel"))
    items.append(("dash", INK, f"achievable DRAM ({d.spec.mem_efficiency:.0%}, model)"))
    items.append(("text", MUTED, "dot area ∝ predicted time"))
    x, y = ax.left + 10, ax.top + 8
    w = max(text_w(t, 11) for _, _, t in items) + 40
    h = len(items) * 17 + 8
    o = [f'<rect x="{x}" y="{y}" width="{w:.0f}" height="{h}" rx="4" '
         f'fill="#fff" fill-opacity="0.94" stroke="{GRID}"/>']
    for i, (kind, colour, text) in enumerate(items):
        cy = y + 13 + i * 17
        if kind == "dot":
            o.append(f'<circle cx="{x + 13}" cy="{cy}" r="5" fill="{colour}"/>')
        elif kind == "ring":
            o.append(f'<circle cx="{x + 13}" cy="{cy}" r="5" fill="none" stroke="{colour}" '
                     f'stroke-width="1.4"/>')
        elif kind == "arrow":
            o.append(f'<rect x="{x + 3}" y="{cy - 3}" width="6" height="6" fill="#fff" '
                     f'stroke="{colour}" stroke-width="1.2"/><line x1="{x + 9}" y1="{cy}" '
                     f'x2="{x + 20}" y2="{cy}" stroke="{colour}" stroke-width="1.3"/>'
                     f'<path d="M{x + 19},{cy - 4} L{x + 25},{cy} L{x + 19},{cy + 4} z" '
                     f'fill="{colour}"/>')
        elif kind == "dash":
            o.append(f'<line x1="{x + 3}" y1="{cy}" x2="{x + 25}" y2="{cy}" stroke="{colour}" '
                     f'stroke-dasharray="5 4" opacity="0.6"/>')
        o.append(f'<text x="{x + 32}" y="{cy + 4}" fill="{INK if kind != "text" else MUTED}">'
                 f'{esc(text)}</text>')
    return o, (x, y, x + w, y + h)
