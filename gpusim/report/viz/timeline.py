"""The simulated timeline as hand-written SVG (the report, docs): host and GPU lanes of
the first simulated call of each run, on one time axis."""

from __future__ import annotations

import math

from gpusim.util.fmt import fmt_us
from gpusim.report.viz.common import (BOUND_COLOURS, BOUNDS, CALL_COLOUR, GRID, HOST_COLOUR, IDLE_COLOUR, INK,
                     MUTED, esc, kernel_tip, runs_of, short, svg_open, text_w)


def _nice_step(span: float, n: int = 8) -> float:
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def _fmt_tick_us(t: float, in_ms: bool) -> str:
    if t == 0:
        return "0"
    return f"{t / 1e3:g} ms" if in_ms else f"{t:g} µs"


def timeline_svg(pred=None, result=None, width: int = 1160, uid: str = "tl") -> str:
    """Host and GPU lanes of the first simulated call of each run, on one time axis."""
    runs = runs_of(pred, result)
    left, right, top = 96, 40, 44
    lane_h, lane_gap, head_h, run_gap = 22, 5, 26, 18
    pw = width - left - right
    tmax = max(max((e.end_us for e in p.timeline.events), default=0.0) for _, p in runs) or 1.0
    step = _nice_step(tmax)
    tend = math.ceil(tmax * 1.0001 / step) * step
    sx = pw / tend
    n_rows = len(runs)
    height = top + n_rows * (head_h + 2 * lane_h + lane_gap + run_gap) + 34
    o = [svg_open(width, height, "Simulated timeline: host and GPU lanes"),
         f'<defs>{_hatch(uid + "-idle", "#fbe3e2", IDLE_COLOUR)}'
         f'{_hatch(uid + "-lead", "#f6f7f9", "#c5cad1")}</defs>',
         f'<rect width="{width}" height="{height}" fill="#fff"/>']
    o += _timeline_legend(left, 18, uid)
    y = top
    lanes_top = y + head_h
    body = []
    for label, p in runs:
        body += _timeline_run(label, p, y, left, pw, sx, lane_h, lane_gap, head_h, uid)
        y += head_h + 2 * lane_h + lane_gap + run_gap
    lanes_bottom = y - run_gap
    in_ms = tend >= 2000
    for i in range(int(round(tend / step)) + 1):
        t = i * step
        x = left + t * sx
        o.append(f'<line x1="{x:.1f}" y1="{lanes_top - 4}" x2="{x:.1f}" y2="{lanes_bottom + 4}" '
                 f'stroke="{GRID}"/>')
        o.append(f'<text x="{x:.1f}" y="{lanes_bottom + 18}" text-anchor="middle" '
                 f'fill="{MUTED}">{_fmt_tick_us(t, in_ms)}</text>')
    o += body
    o.append(f'<text x="{left - 8}" y="{lanes_bottom + 18}" text-anchor="end" fill="{MUTED}">'
             f'time in call</text>')
    o.append("</svg>")
    return "\n".join(o)


def _hatch(pid: str, bg: str, fg: str) -> str:
    return (f'<pattern id="{pid}" patternUnits="userSpaceOnUse" width="6" height="6" '
            f'patternTransform="rotate(45)"><rect width="6" height="6" fill="{bg}"/>'
            f'<line x1="0" y1="0" x2="0" y2="6" stroke="{fg}" stroke-width="2"/></pattern>')


def _timeline_legend(x: float, y: float, uid: str) -> list[str]:
    items = [(HOST_COLOUR, "kernel launch"), (CALL_COLOUR, "call overhead")]
    items += [(BOUND_COLOURS[b], f"{b}-bound") for b in BOUNDS]
    items += [(f"url(#{uid}-idle)", "GPU idle, waiting on the host"),
              (f"url(#{uid}-lead)", "before the first kernel")]
    o = []
    for colour, text in items:
        o.append(f'<rect x="{x:.0f}" y="{y - 9}" width="14" height="11" rx="2" fill="{colour}"/>')
        o.append(f'<text x="{x + 19:.0f}" y="{y}" fill="{INK}">{esc(text)}</text>')
        x += 19 + text_w(text) + 14
    return o


def _timeline_run(label, p, y, left, pw, sx, lane_h, lane_gap, head_h, uid) -> list[str]:
    tl = p.timeline
    stats = (f"end-to-end {fmt_us(p.end_to_end_us)}/call · device {fmt_us(p.device_us)} · "
             f"host {fmt_us(tl.host_us)}/call · GPU idle {fmt_us(p.idle_us)} · "
             f"{len(p.kernels)} kernel{'s' if len(p.kernels) != 1 else ''}")
    o = [f'<text x="{left}" y="{y + 16}" fill="{INK}"><tspan font-weight="600" font-size="12.5">'
         f'{esc(label)}</tspan><tspan fill="{MUTED}" dx="10">{esc(stats)}</tspan></text>']
    hy, gy = y + head_h, y + head_h + lane_h + lane_gap
    for ly, name in ((hy, "host"), (gy, "GPU stream")):
        o.append(f'<text x="{left - 8}" y="{ly + lane_h / 2 + 4}" text-anchor="end" '
                 f'fill="{INK}">{name}</text>')
        o.append(f'<rect x="{left}" y="{ly}" width="{pw}" height="{lane_h}" fill="#f3f4f6"/>')
    gpu = [e for e in tl.events if e.lane == "gpu"]
    if gpu and gpu[0].start_us > 0:
        o.append(_bar(left, gy, 0.0, gpu[0].start_us, sx, lane_h, f"url(#{uid}-lead)",
                      "", f"GPU idle {gpu[0].start_us:.2f} µs until the first kernel is launched"))
    for a, b in tl.gaps:
        o.append(_bar(left, gy, a, b - a, sx, lane_h, f"url(#{uid}-idle)", "idle",
                      f"GPU idle {b - a:.2f} µs: waiting for the host to launch the next kernel",
                      text_colour="#a12a26"))
    for e in tl.events:
        if e.lane == "host":
            call = e.kernel is None
            text = "call overhead" if call else e.name.removeprefix("launch ")
            o.append(_bar(left, hy, e.start_us, e.dur_us, sx, lane_h,
                          CALL_COLOUR if call else HOST_COLOUR, text,
                          f"{e.name}: {e.dur_us:.2f} µs of host time ({p.mode})"))
        else:
            k = p.kernels[e.kernel]
            o.append(_bar(left, gy, e.start_us, e.dur_us, sx, lane_h, BOUND_COLOURS[k.bound],
                          k.name, kernel_tip(k, f"\nstarts at {e.start_us:.2f} µs", p.graph)))
    if len(p.kernels) <= 60:
        # link a launch to its kernel only when the kernel starts on arrival (the GPU
        # was waiting): that is when the link explains an idle gap; when kernels queue
        # up the lines would only cross each other
        starts = {e.kernel: e for e in gpu}
        prompt = p.host.launch_latency_us + 0.5
        for e in tl.events:
            tgt = starts.get(e.kernel if e.kernel is not None else
                             (0 if p.mode == "cudagraph" else -1))
            if e.lane != "host" or tgt is None or tgt.start_us - e.end_us > prompt:
                continue
            x1, x2 = left + e.end_us * sx, left + tgt.start_us * sx
            o.append(f'<line x1="{x1:.1f}" y1="{hy + lane_h}" x2="{x2:.1f}" y2="{gy}" '
                     f'stroke="#8a939d" stroke-width="0.8"/>')
    end = left + tl.latency_us * sx
    o.append(f'<line x1="{end:.1f}" y1="{hy - 3}" x2="{end:.1f}" y2="{gy + lane_h + 3}" '
             f'stroke="{INK}" stroke-width="1.2" stroke-dasharray="3 2"><title>call done at '
             f'{tl.latency_us:.2f} µs</title></line>')
    return o


def _bar(left, y, start, dur, sx, h, fill, text, tip, text_colour="#fff") -> str:
    x, w = left + start * sx, max(dur * sx, 0.8)
    s = (f'<g><title>{esc(tip)}</title><rect x="{x:.2f}" y="{y}" width="{w:.2f}" '
         f'height="{h}" fill="{fill}" stroke="#fff" stroke-width="0.5"/>')
    fit = int((w - 8) / text_w("x", 10.5))
    if text and len(text) > fit >= 5:
        text = short(text, fit)
    if text and text_w(text, 10.5) + 8 <= w:
        s += (f'<text x="{x + w / 2:.1f}" y="{y + h / 2 + 4}" text-anchor="middle" '
              f'font-size="10.5" fill="{text_colour}">{esc(text)}</text>')
    return s + "</g>"
