"""The roofline drawn by hand as SVG for the HTML report (:func:`roofline_svg`); the data and the matplotlib figure are :mod:`gpusim.report.viz.roofline`."""

from __future__ import annotations
import math
from gpusim.util.fmt import fmt_si
from gpusim.report.viz.common import (BOUND_COLOURS, BOUNDS, GRID, INK, MUTED, arrow_marker, esc,
                     kernel_tip, svg_open,
                     text_w)
from gpusim.report.viz.roofline import _RoofData, _as_circle, _label_items, _left_out_note, _place_labels, _radius, _roof_data, _roof_labels


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
