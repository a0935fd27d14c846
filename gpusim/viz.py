"""Pictures of a prediction: what a performance engineer looks at first.

Every picture is drawn from the same data, a :class:`~gpusim.predict.Prediction` or a
:class:`~gpusim.search.SearchResult` (an unfused and a fused prediction), and written
atomically (a temporary file, then a rename). None needs a network; only the raster
plots (``--plot``, ``accuracy --plot``) need matplotlib, the optional ``plot`` extra.

``--trace F.json``  :func:`trace_output`, :func:`trace_document`
    The simulated first call in Chrome's trace event format, which Perfetto
    (ui.perfetto.dev) and chrome://tracing open: a host lane (the dispatch of each
    kernel), a GPU-stream lane (each kernel, with its ops, bytes, FLOPs and bound as
    arguments), a lane marking when the GPU sits idle waiting on the host, and flow
    arrows from each launch to its kernel. A search shows the unfused and the fused run
    as two processes on one time axis. Measured kernels from a validation record can be
    laid beside the predicted ones (``measured_kernels=``).
``--plot F.png``    :func:`plot_output` (also .svg, .pdf)
    A roofline: the DRAM-bandwidth slope and a flat roof for each execution unit the
    kernels use; each kernel a dot at (FLOP per byte, achieved FLOP/s), its area
    proportional to its time and its colour saying what bounds it. For a search, arrows
    show how fusion moves each group (its unfused parts in aggregate -> the fused kernel).
``--dot F.dot``     :func:`dot_output`, :func:`dot_document`
    The graph in Graphviz DOT: ops as nodes, inputs as small boxes, each fused kernel a
    cluster coloured by its bound, edges labelled with the bytes they carry (dashed when
    fusion keeps them on chip). Also ``F.svg`` when Graphviz's ``dot`` is installed.
``gpusim report``   :func:`report_main`, :func:`report_html`
    One self-contained HTML page (inline CSS and SVG, no external assets, no
    matplotlib): summary, timeline, top kernels, roofline, fused graph, kernel tables.
``gpusim accuracy --plot F.png``  :func:`accuracy_plot`
    Predicted against measured time (log-log) and error against size, from recorded
    validation runs.

The SVG pieces of the report (:func:`timeline_svg`, :func:`roofline_svg`,
:func:`graph_svg`) are public too, for notebooks and docs.
"""

from __future__ import annotations

import html
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

from .atomic import atomic_path, atomic_write
from .progress import Progress, progress  # noqa: F401  (re-exported for callers)

BOUND_COLOURS = {"memory": "#2f6fd0", "compute": "#e8743b", "latency": "#8e6cc9"}
BOUND_TINTS = {"memory": "#dfe9fb", "compute": "#fde6d8", "latency": "#ede5f8"}
BOUNDS = ("memory", "compute", "latency")
HOST_COLOUR = "#3f9c8a"
CALL_COLOUR = "#23645a"
IDLE_COLOUR = "#d9534f"
INK, MUTED, GRID = "#1f2328", "#656d76", "#e4e7eb"
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
UNIT_NAMES = {"fp64": "FP64", "fp32": "FP32 CUDA cores", "tf32_tc": "TF32 tensor cores",
              "fp16_tc": "FP16 tensor cores", "bf16_tc": "BF16 tensor cores"}
PLOT_FORMATS = (".png", ".svg", ".pdf")
# drawing hundreds of boxes inline makes a page nobody can read; the DOT file has them all
GRAPH_SVG_MAX_KERNELS = 120
DOT_TIMEOUT_S = 60

# trace lanes (thread ids inside each process)
TID_HOST, TID_GPU, TID_IDLE, TID_MEASURED = 1, 2, 3, 4


# ---------------------------------------------------------------------------
# formatting and files
def fmt_bytes(b: float) -> str:
    """Binary units: ``67108864`` -> ``'64.0 MiB'``."""
    b = float(b)
    if abs(b) < 1024:
        return f"{b:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        b /= 1024
        if abs(b) < 1024 or unit == "TiB":
            return f"{b:.1f} {unit}"
    raise AssertionError("unreachable")


def fmt_si(x: float, unit: str = "", digits: int = 3) -> str:
    """Decimal prefixes: ``fmt_si(3.35e12, 'B/s')`` -> ``'3.35 TB/s'``."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g} {unit}".strip()
    for p, f in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= f:
            return f"{x / f:.{digits}g} {p}{unit}"
    return f"{x:.{digits}g} {unit}".strip()


def fmt_us(us: float) -> str:
    """A duration for labels: µs below a millisecond, then ms, then s."""
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs" if us < 100 else f"{us:.0f} µs"


def _shape(s) -> str:
    from .report import fmt_shape
    return fmt_shape(s)


def _user_error(msg: str) -> Exception:
    # imported late: cli imports this module lazily and we must not import it at load
    from .cli import UserError
    return UserError(msg)


def _check_target(path: str) -> None:
    """Fail before any slow work if ``path`` cannot be written."""
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise _user_error(f"cannot write {path}: folder {d} does not exist")
    if os.path.isdir(path):
        raise _user_error(f"cannot write {path}: it is a folder; give a file name")


def _write_atomic(path: str, data) -> None:
    """Write ``data`` (str or bytes) to ``path`` atomically, after checking the target."""
    _check_target(path)
    atomic_write(path, data)


def _runs(pred=None, result=None) -> list[tuple[str, object]]:
    """``[(label, Prediction)]``: the unfused and fused runs of a search, or one run."""
    if result is not None:
        return [("unfused (eager)", result.unfused), (f"fused ({result.fused.mode})", result.fused)]
    if pred is not None:
        return [(f"predicted ({pred.mode})", pred)]
    raise ValueError("give a Prediction (pred=) or a SearchResult (result=)")


def _esc(s) -> str:
    return html.escape(str(s), quote=True)


def _text_w(s: str, size: float = 11.0) -> float:
    """Rough rendered width of sans-serif text (no font metrics without a browser)."""
    return len(s) * size * 0.58


# ---------------------------------------------------------------------------
# 1. timeline: Chrome trace events
def record_kernels(record: dict, run: str = "eager") -> list[dict]:
    """Measured kernels ``[{"name", "us"}]`` of one run of a validation record, in launch
    order, without the harness's own ``gpusim:`` profiler ranges."""
    ks = record["runs"][run]["profile"]["kernels"]
    return [{"name": k["name"], "us": float(k["us"])} for k in ks
            if not str(k["name"]).startswith("gpusim:")]


def _kernel_args(k, index: int) -> dict:
    return {"kernel": index, "ops": list(k.ops), "op_types": list(k.op_types),
            "kind": k.kind, "shape": _shape(k.shape), "unit": k.unit, "bound": k.bound,
            "flops": k.flops, "bytes_read": k.bytes_read, "bytes_read_l2": k.bytes_read_l2,
            "bytes_written": k.bytes_written, "bytes": k.bytes,
            "flop_per_byte": None if math.isinf(k.intensity) else k.intensity,
            "mem_us": k.mem_us, "compute_us": k.compute_us, "predicted_us": k.us,
            "bytes_human": fmt_bytes(k.bytes)}


def _meta(pid: int, tid: int | None, what: str, value) -> dict:
    e = {"ph": "M", "pid": pid, "name": what, "args": {}}
    if tid is not None:
        e["tid"] = tid
    e["args"]["name" if what.endswith("_name") else "sort_index"] = value
    return e


def _run_trace(pid: int, label: str, p, flow_ids) -> list[dict]:
    """Events of one simulated call: host lane, GPU lane, idle lane, launch flows."""
    title = f"{label}: {p.graph.name} on {p.spec.display_name}"
    ev = [_meta(pid, None, "process_name", title), _meta(pid, None, "process_sort_index", pid),
          _meta(pid, TID_HOST, "thread_name", "host (dispatch)"),
          _meta(pid, TID_HOST, "thread_sort_index", TID_HOST),
          _meta(pid, TID_GPU, "thread_name", "GPU stream"),
          _meta(pid, TID_GPU, "thread_sort_index", TID_GPU),
          _meta(pid, TID_IDLE, "thread_name", "GPU idle"),
          _meta(pid, TID_IDLE, "thread_sort_index", TID_IDLE)]
    gpu_start = {}
    for e in p.timeline.events:
        if e.lane == "gpu":
            k = p.kernels[e.kernel]
            gpu_start[e.kernel] = e
            ev.append({"name": e.name, "cat": "kernel", "ph": "X", "ts": e.start_us,
                       "dur": e.dur_us, "pid": pid, "tid": TID_GPU,
                       "args": _kernel_args(k, e.kernel)})
        else:
            args = {"host_us": e.dur_us}
            if e.kernel is not None:
                args["kernel"] = p.kernels[e.kernel].name
            ev.append({"name": e.name, "cat": "host", "ph": "X", "ts": e.start_us,
                       "dur": e.dur_us, "pid": pid, "tid": TID_HOST, "args": args})
    # a launch arrow binds to the slices enclosing its two ends: use mid-points
    for e in p.timeline.events:
        if e.lane != "host":
            continue
        target = gpu_start.get(e.kernel if e.kernel is not None else 0)
        if target is None or (e.kernel is None and p.mode != "cudagraph"):
            continue
        fid = next(flow_ids)
        ev.append({"name": "launch", "cat": "launch", "ph": "s", "id": fid, "pid": pid,
                   "tid": TID_HOST, "ts": e.start_us + e.dur_us / 2})
        ev.append({"name": "launch", "cat": "launch", "ph": "f", "bp": "e", "id": fid,
                   "pid": pid, "tid": TID_GPU, "ts": target.start_us + target.dur_us / 2})
    first = min((e.start_us for e in p.timeline.events if e.lane == "gpu"), default=None)
    if first:
        ev.append({"name": "idle: first launch", "cat": "idle", "ph": "X", "ts": 0.0,
                   "dur": first, "pid": pid, "tid": TID_IDLE,
                   "args": {"idle_us": first, "why": "host dispatch and launch latency "
                                                    "before the first kernel"}})
    for a, b in p.timeline.gaps:
        ev.append({"name": "idle", "cat": "idle", "ph": "X", "ts": a, "dur": b - a, "pid": pid,
                   "tid": TID_IDLE, "args": {"idle_us": b - a,
                                             "why": "waiting for the host to launch the next kernel"}})
    return ev


def _measured_trace(pid: int, p, measured: list[dict]) -> list[dict]:
    """Measured kernels laid back to back from the first predicted kernel's start (the
    profiler gives durations, not the host's timing)."""
    ev = [_meta(pid, TID_MEASURED, "thread_name", "measured GPU (back to back)"),
          _meta(pid, TID_MEASURED, "thread_sort_index", TID_MEASURED)]
    t = min((e.start_us for e in p.timeline.events if e.lane == "gpu"), default=0.0)
    matched = len(measured) == len(p.kernels)
    for i, m in enumerate(measured):
        us = float(m["us"])
        args = {"measured_us": us}
        if matched:
            pk = p.kernels[i]
            args.update(predicted_kernel=pk.name, predicted_us=pk.us,
                        error_pct=(pk.us - us) / us * 100 if us else None)
        ev.append({"name": str(m["name"]), "cat": "measured", "ph": "X", "ts": t, "dur": us,
                   "pid": pid, "tid": TID_MEASURED, "args": args})
        t += us
    return ev


def trace_document(pred=None, result=None, measured_kernels: list[dict] | None = None) -> dict:
    """The Chrome trace (a JSON-able dict) of a prediction or of a search's two runs.

    ``measured_kernels`` (``[{"name", "us"}]``, e.g. from :func:`record_kernels`) adds a
    "measured GPU" lane to the first run (the prediction, or a search's unfused run).
    """
    runs = _runs(pred, result)
    flow_ids = itertools.count(1)
    events: list[dict] = []
    for pid, (label, p) in enumerate(runs, start=1):
        events += _run_trace(pid, label, p, flow_ids)
        if measured_kernels is not None and pid == 1:
            events += _measured_trace(pid, p, measured_kernels)
    p0 = runs[-1][1]
    other = {"generator": "gpusim", "graph": p0.graph.name, "gpu": p0.spec.display_name,
             "spec": p0.gpu, "time_unit": "us"}
    for label, p in runs:
        other[label] = {"mode": p.mode, "kernels": len(p.kernels), "device_us": p.device_us,
                        "end_to_end_us": p.end_to_end_us, "host_us": p.timeline.host_us,
                        "idle_us": p.idle_us}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def trace_output(pred=None, result=None, path: str = "trace.json"):
    """Write :func:`trace_document` to ``path``; returns the path."""
    _check_target(path)
    doc = trace_document(pred, result)
    _write_atomic(path, json.dumps(doc, separators=(",", ":"), allow_nan=False))
    return path


# ---------------------------------------------------------------------------
# 2. roofline: data shared by the matplotlib plot and the hand-drawn SVG
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


def _overlaps(a, b) -> bool:
    return not (a[2] < b[0] or a[0] > b[2] or a[3] < b[1] or a[1] > b[3])


def _hits_circle(box, c) -> bool:
    cx, cy, r = c
    nx_ = min(max(cx, box[0]), box[2])
    ny_ = min(max(cy, box[1]), box[3])
    return math.hypot(cx - nx_, cy - ny_) < r - 0.5


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
        text = _short(text, max_chars)
        w, h = _text_w(text, size), size
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
        w = _text_w(text, size)
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
# 2a. roofline with matplotlib (--plot)
def _matplotlib():
    try:
        import matplotlib  # noqa: F401
        # the Agg canvas below renders without a display; no pyplot, no global state
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise _user_error("--plot needs matplotlib: pip install 'gpusim[plot]'") from None
    return Figure, FigureCanvasAgg


def _plot_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in PLOT_FORMATS:
        raise _user_error(f"cannot plot to {path}: use a .png, .svg or .pdf file name")
    return ext[1:]


def _save_figure(fig, path: str, fmt: str) -> None:
    with atomic_path(path, "." + fmt) as tmp:
        fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight",
                    metadata={"Software": "gpusim"} if fmt == "png" else None)


def roofline_figure(pred=None, result=None):
    """A matplotlib Figure of the roofline (see the module docstring)."""
    Figure, FigureCanvasAgg = _matplotlib()
    import numpy as np
    from matplotlib.lines import Line2D
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
    fmt = _plot_format(path)
    _check_target(path)
    fig = roofline_figure(pred, result)
    _save_figure(fig, path, fmt)
    return path


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


# ---------------------------------------------------------------------------
# 2b. roofline as hand-written SVG (the report: no matplotlib needed)
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


def _svg_open(w: float, h: float, label: str, extra: str = "") -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w:.0f} {h:.0f}" '
            f'width="{w:.0f}" height="{h:.0f}" role="img" aria-label="{_esc(label)}" '
            f'font-family="{_esc(FONT)}" font-size="11" style="max-width:100%;height:auto"'
            f'{extra}>')


def _arrow_marker(mid: str, colour: str) -> str:
    return (f'<marker id="{mid}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
            f'fill="{colour}"/></marker>')


def ops_text(k, graph=None) -> str:
    """A kernel's ops: ``linear → gelu`` where one feeds the next, ``q, k, v`` for
    siblings fused side by side (no graph: commas throughout)."""
    out = k.op_types[0] if k.op_types else ""
    for prev, op, t in zip(k.ops, k.ops[1:], k.op_types[1:]):
        chained = (graph is not None and op in graph.dataflow
                   and graph.dataflow.has_edge(prev, op))
        out += (" → " if chained else ", ") + t
    return out


def _kernel_tip(k, extra: str = "", graph=None) -> str:
    ai = "∞" if math.isinf(k.intensity) else f"{k.intensity:.3g}"
    ops = ops_text(k, graph)
    return (f"{k.name}\nops: {ops}\nshape {_shape(k.shape)} · unit {k.unit}\n"
            f"{fmt_si(k.flops, 'FLOP')} · {fmt_bytes(k.bytes_read)} in, "
            f"{fmt_bytes(k.bytes_written)} out · {ai} FLOP/B\n"
            f"{k.us:.2f} µs predicted ({k.bound}-bound; memory {k.mem_us:.2f} µs, "
            f"compute {k.compute_us:.2f} µs)" + extra)


def roofline_svg(pred=None, result=None, width: int = 980, height: int = 580,
                 uid: str = "rf") -> str:
    """The roofline as a standalone SVG string (hover a dot for its kernel)."""
    d = _roof_data(pred, result)
    left, right, top, bottom = 78, 24, 34, 62
    ax = _LogAxes(d.xr, d.yr, left, top, width - left - right, height - top - bottom)
    o = [_svg_open(width, height, f"Roofline of {d.title} on {d.spec.display_name}"),
         f'<defs><clipPath id="{uid}-clip"><rect x="{left}" y="{top}" width="{ax.w}" '
         f'height="{ax.h}"/></clipPath>{_arrow_marker(uid + "-arrow", "#333")}</defs>',
         f'<rect width="{width}" height="{height}" fill="#fff"/>',
         f'<text x="{left}" y="20" font-size="13" font-weight="600" fill="{INK}">Roofline: '
         f'{_esc(d.title)} on {_esc(d.spec.display_name)}</text>']
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
                 f'stroke="#fff" stroke-width="3" paint-order="stroke">{_esc(text)}</text>')
    bounds = (left + 2, top + 2, left + ax.w - 2, top + ax.h - 2)
    keep_out = [legend_box] + [b for _, b, _ in roof] + slope_boxes
    for text, box, anchor in _place_labels(items, circles, bounds, 10.5, keep_out):
        x = {"start": box[0], "end": box[2], "middle": (box[0] + box[2]) / 2}[anchor]
        o.append(f'<text x="{x:.1f}" y="{(box[1] + box[3]) / 2 + 3.8:.1f}" text-anchor="{anchor}" '
                 f'font-size="10.5" fill="{INK}" stroke="#fff" stroke-width="3" '
                 f'paint-order="stroke">{_esc(text)}</text>')
    note = _left_out_note(d.left_out)
    if note:
        o.append(f'<text x="{left}" y="{height - 10}" fill="{MUTED}" font-size="10.5">'
                 f'{_esc(note)}</text>')
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


def _as_circle(box):
    """A box as a circle around it, so that later labels keep clear of it."""
    return ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2,
            math.hypot(box[2] - box[0], box[3] - box[1]) / 2)


def _slope_label(ax: _LogAxes, bw: float, top: float, text: str, colour: str, circles):
    """``(svg, box)`` of ``text`` set along the slope ``y = bw * x`` where the dots leave
    it most room, or None when the slope is not visible."""
    x0, x1 = 10 ** ax.lx0, 10 ** ax.lx1
    xa, xb = max(x0, 10 ** ax.ly0 / bw), min(top / bw, x1)
    if xb <= xa:
        return None
    pa, pb = ax.xy(xa, xa * bw), ax.xy(xb, xb * bw)
    ang = math.atan2(pb[1] - pa[1], pb[0] - pa[0])
    length = _text_w(text) + 4
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
           f'translate(0 -6)" fill="{colour}" font-size="11">{_esc(text)}</text>')
    return svg, box


def _svg_points(d: _RoofData, ax: _LogAxes, uid: str) -> list[str]:
    o = []
    max_us = max([p.kernel.us for p in d.points + d.before] or [1.0])
    for p in d.before:
        r = _radius(p.kernel.us, max_us)
        tip = _kernel_tip(p.kernel, "\nunfused run (eager)", d.graph)
        o.append(f'<circle cx="{ax.px(p.intensity):.1f}" cy="{ax.py(p.flops_per_s):.1f}" '
                 f'r="{r:.1f}" fill="none" stroke="{BOUND_COLOURS[p.kernel.bound]}" '
                 f'stroke-width="1.4" opacity="0.8"><title>{_esc(tip)}</title></circle>')
    for m in d.moves:
        r = _radius(m.kernel.us, max_us)
        xa, ya, xb, yb = ax.px(m.x0), ax.py(m.y0), ax.px(m.x1), ax.py(m.y1)
        dist = math.hypot(xb - xa, yb - ya)
        tip = f"fused {len(m.parts)} kernels into {m.kernel.name}"
        o.append(f'<rect x="{xa - 3:.1f}" y="{ya - 3:.1f}" width="6" height="6" fill="#fff" '
                 f'stroke="#333" stroke-width="1.2"><title>{_esc(tip)} (before, aggregate)'
                 f'</title></rect>')
        if dist < r + 4:
            continue
        # stop at the dot's edge so the arrow head stays visible
        xe, ye = xb - (xb - xa) * (r + 1) / dist, yb - (yb - ya) * (r + 1) / dist
        o.append(f'<line x1="{xa:.1f}" y1="{ya:.1f}" x2="{xe:.1f}" y2="{ye:.1f}" stroke="#333" '
                 f'stroke-width="1.3" marker-end="url(#{uid}-arrow)"><title>{_esc(tip)}</title></line>')
    for p in sorted(d.points, key=lambda p: -p.kernel.us):
        r = _radius(p.kernel.us, max_us)
        o.append(f'<circle cx="{ax.px(p.intensity):.1f}" cy="{ax.py(p.flops_per_s):.1f}" '
                 f'r="{r:.1f}" fill="{BOUND_COLOURS[p.kernel.bound]}" fill-opacity="0.88" '
                 f'stroke="#fff" stroke-width="1"><title>{_esc(_kernel_tip(p.kernel, "", d.graph))}</title>'
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
    w = max(_text_w(t, 11) for _, _, t in items) + 40
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
                 f'{_esc(text)}</text>')
    return o, (x, y, x + w, y + h)


# ---------------------------------------------------------------------------
# 3. timeline as hand-written SVG (report, docs)
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
    runs = _runs(pred, result)
    left, right, top = 96, 40, 44
    lane_h, lane_gap, head_h, run_gap = 22, 5, 26, 18
    pw = width - left - right
    tmax = max(max((e.end_us for e in p.timeline.events), default=0.0) for _, p in runs) or 1.0
    step = _nice_step(tmax)
    tend = math.ceil(tmax * 1.0001 / step) * step
    sx = pw / tend
    n_rows = len(runs)
    height = top + n_rows * (head_h + 2 * lane_h + lane_gap + run_gap) + 34
    o = [_svg_open(width, height, "Simulated timeline: host and GPU lanes"),
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
        o.append(f'<text x="{x + 19:.0f}" y="{y}" fill="{INK}">{_esc(text)}</text>')
        x += 19 + _text_w(text) + 14
    return o


def _timeline_run(label, p, y, left, pw, sx, lane_h, lane_gap, head_h, uid) -> list[str]:
    tl = p.timeline
    stats = (f"end-to-end {fmt_us(p.end_to_end_us)}/call · device {fmt_us(p.device_us)} · "
             f"host {fmt_us(tl.host_us)}/call · GPU idle {fmt_us(p.idle_us)} · "
             f"{len(p.kernels)} kernel{'s' if len(p.kernels) != 1 else ''}")
    o = [f'<text x="{left}" y="{y + 16}" fill="{INK}"><tspan font-weight="600" font-size="12.5">'
         f'{_esc(label)}</tspan><tspan fill="{MUTED}" dx="10">{_esc(stats)}</tspan></text>']
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
                          k.name, _kernel_tip(k, f"\nstarts at {e.start_us:.2f} µs", p.graph)))
    if len(p.kernels) <= 60:
        # link a launch to its kernel only when the kernel starts on arrival (the GPU
        # was waiting): that is when the link explains an idle gap; when kernels queue
        # up the lines would only cross each other
        starts = {e.kernel: e for e in gpu}
        prompt = p.spec.launch_latency_us + 0.5
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
    s = (f'<g><title>{_esc(tip)}</title><rect x="{x:.2f}" y="{y}" width="{w:.2f}" '
         f'height="{h}" fill="{fill}" stroke="#fff" stroke-width="0.5"/>')
    fit = int((w - 8) / _text_w("x", 10.5))
    if text and len(text) > fit >= 5:
        text = _short(text, fit)
    if text and _text_w(text, 10.5) + 8 <= w:
        s += (f'<text x="{x + w / 2:.1f}" y="{y + h / 2 + 4}" text-anchor="middle" '
              f'font-size="10.5" fill="{text_colour}">{_esc(text)}</text>')
    return s + "</g>"


# ---------------------------------------------------------------------------
# 4. the fused graph: Graphviz DOT, and a hand-drawn SVG when Graphviz is missing
def _q(s) -> str:
    """A DOT double-quoted ID (node names contain ':' and '.')."""
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def _qlabel(*lines: str) -> str:
    """A quoted DOT label of several lines (``\\n`` is DOT's centred line break)."""
    esc = [str(x).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") for x in lines]
    return '"' + "\\n".join(esc) + '"'


def _graph_and_kernels(pred=None, result=None):
    if result is not None:
        return result.graph, result.fused, result
    if pred is not None:
        return pred.graph, pred, None
    raise ValueError("give a Prediction (pred=) or a SearchResult (result=)")


def dot_document(pred=None, result=None, title: bool = True) -> str:
    """Graphviz DOT of the graph: compute nodes with name and op, inputs as small boxes,
    every kernel of more than one op as a ``cluster_N`` coloured by its bound (single-op
    kernels are nodes filled with their bound's colour), edges labelled with bytes.
    ``title=False`` leaves out the heading and legend (the report has its own)."""
    graph, p, res = _graph_and_kernels(pred, result)
    g, df = graph.g, graph.dataflow
    owner = {op: i for i, k in enumerate(p.kernels) for op in k.ops}
    heading = (f"{graph.name} on {p.spec.display_name}, {p.mode}: {len(p.kernels)} kernels, "
               f"{fmt_us(p.device_us)} device, {fmt_us(p.end_to_end_us)} end to end")
    fused = any(len(k.ops) > 1 for k in p.kernels)
    legend = ("colour = what bounds the kernel: memory blue, compute orange, latency purple"
              + ("; a box around ops = one fused kernel; dashed edges stay on chip" if fused else
                 "; one kernel per op"))
    o = [f"digraph {_q(graph.name)} {{",
         f'  graph [rankdir=TB, fontname="Helvetica", fontsize=13, labelloc=t, '
         f'label={_qlabel(heading, legend) if title else _qlabel("")}, nodesep=0.25, '
         f'ranksep=0.4, bgcolor="white"];',
         '  node [fontname="Helvetica", fontsize=10, shape=box, style="rounded,filled", '
         f'fillcolor="white", color="{MUTED}", margin="0.12,0.05"];',
         f'  edge [fontname="Helvetica", fontsize=8.5, color="#7a828c", fontcolor="{MUTED}", '
         'arrowsize=0.6];']
    for n in df.nodes:
        if n not in owner and g.nodes[n]["kind"] == "input":
            a = g.nodes[n]
            label = _qlabel(n, f"{_shape(a.get('shape'))} {a.get('dtype', '')}".strip())
            o.append(f'  {_q(n)} [shape=box, style=filled, fillcolor="#f1f3f5", color="#b8bec6", '
                     f'fontsize=8, height=0.2, margin="0.06,0.02", label={label}];')
    cluster = 0
    for i, k in enumerate(p.kernels):
        colour, tint = BOUND_COLOURS.get(k.bound, MUTED), BOUND_TINTS.get(k.bound, "#fff")
        if len(k.ops) > 1:
            label = _qlabel(k.name, f"{fmt_us(k.us)} · {k.bound}-bound",
                            f"{fmt_bytes(k.bytes_read)} in → {fmt_bytes(k.bytes_written)} out")
            o.append(f"  subgraph cluster_{cluster} {{")
            o.append(f'    graph [style="rounded,filled", fillcolor="{tint}", color="{colour}", '
                     f'penwidth=1.6, fontsize=10, fontcolor="{INK}", label={label}];')
            for op in k.ops:
                o.append(f"    {_dot_node(g, op, None)}")
            o.append("  }")
            cluster += 1
        else:
            o.append(f"  {_dot_node(g, k.ops[0], k)}")
    for u, v, data in df.edges(data=True):
        b = data.get("bytes", 0)
        inside = u in owner and owner[u] == owner.get(v)
        attrs = [f"label={_qlabel(fmt_bytes(b))}"]
        if inside:
            colour = BOUND_COLOURS.get(p.kernels[owner[u]].bound, MUTED)
            attrs += ["style=dashed", f'color="{colour}"']
        o.append(f"  {_q(u)} -> {_q(v)} [{', '.join(attrs)}];")
    if res is not None and res.partition.folded:
        o.append(f"  // batch norms folded into their convolution: {', '.join(res.partition.folded)}")
    o.append("}")
    return "\n".join(o) + "\n"


def _dot_node(g, n: str, k) -> str:
    """A compute node; ``k`` (a single-op kernel) adds its time and bound's colour."""
    from .cost import short_op
    a = g.nodes[n]
    op = short_op(a["op"])
    lines = [n, f"{op} {_shape(a.get('shape'))}" if op != n else _shape(a.get("shape"))]
    attrs = []
    if k is not None:
        lines.append(f"{fmt_us(k.us)} · {k.bound}")
        attrs += [f'fillcolor="{BOUND_TINTS.get(k.bound, "#fff")}"',
                  f'color="{BOUND_COLOURS.get(k.bound, MUTED)}"']
    if a.get("is_output"):
        attrs.append("peripheries=2")
    if a.get("unmodelled"):
        attrs.append('style="rounded,filled,dashed"')
    return f"{_q(n)} [label={_qlabel(*lines)}{', ' if attrs else ''}{', '.join(attrs)}];"


def _svg_path_for(path: str) -> str | None:
    svg = os.path.splitext(path)[0] + ".svg"
    return None if os.path.abspath(svg) == os.path.abspath(path) else svg


def render_dot(dot_text: str) -> str | None:
    """SVG text rendered by Graphviz's ``dot``, or None when it is not installed/fails."""
    exe = shutil.which("dot")
    if not exe:
        return None
    try:
        r = subprocess.run([exe, "-Tsvg"], input=dot_text.encode("utf-8"), capture_output=True,
                           timeout=DOT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"gpusim: warning: Graphviz dot failed ({e}); no SVG drawn", file=sys.stderr)
        return None
    if r.returncode != 0:
        msg = r.stderr.decode("utf-8", "replace").strip().splitlines()
        print(f"gpusim: warning: Graphviz dot failed ({msg[0] if msg else r.returncode}); "
              "no SVG drawn", file=sys.stderr)
        return None
    return r.stdout.decode("utf-8", "replace")


def dot_output(pred=None, result=None, path: str = "graph.dot"):
    """Write :func:`dot_document` to ``path``, and ``path`` with .svg when Graphviz is
    installed; returns the DOT path."""
    _check_target(path)
    text = dot_document(pred, result)
    _write_atomic(path, text)
    svg_path = _svg_path_for(path)
    if svg_path and shutil.which("dot"):
        svg = render_dot(text)
        if svg is not None:
            _write_atomic(svg_path, svg)
            print(f"wrote {svg_path}", file=sys.stderr)
    return path


def _kernel_edges(graph, kernels) -> tuple[dict, list[float]]:
    """Bytes between kernels ``{(i, j): bytes}`` and each kernel's bytes read from
    graph inputs (a fused kernel loads a tensor once, so max over its readers)."""
    from .cost import group_io
    owner = {op: i for i, k in enumerate(kernels) for op in k.ops}
    edges: dict = {}
    from_inputs = [0.0] * len(kernels)
    for j, k in enumerate(kernels):
        reads, _ = group_io(graph, k.ops)
        for prod, b in reads.items():
            i = owner.get(prod)
            if i is None:
                from_inputs[j] += b
            elif i != j:
                edges[(i, j)] = edges.get((i, j), 0.0) + b
    return edges, from_inputs


def graph_svg(pred=None, result=None, uid: str = "kg") -> str:
    """The kernel graph as a layered drawing: one box per kernel (its ops, time, bound
    and bytes read from graph inputs), arrows labelled with the bytes passed between
    kernels. A stand-in for Graphviz that needs nothing installed."""
    graph, p, _ = _graph_and_kernels(pred, result)
    ks = p.kernels
    if len(ks) > GRAPH_SVG_MAX_KERNELS:
        return (f'<p class="note">{len(ks)} kernels: too many to draw inline; write the '
                f'graph with <code>--dot</code> and open it in Graphviz.</p>')
    import networkx as nx
    edges, from_inputs = _kernel_edges(graph, ks)
    q = nx.DiGraph()
    q.add_nodes_from(range(len(ks)))
    q.add_edges_from(edges)
    layer = {}
    for i in nx.topological_sort(q):
        layer[i] = max((layer[u] + 1 for u in q.predecessors(i)), default=0)
    n_layers = max(layer.values(), default=-1) + 1
    rows = [[i for i in range(len(ks)) if layer[i] == r] for r in range(n_layers)]
    lines = {i: _box_lines(graph, ks[i], from_inputs[i]) for i in range(len(ks))}
    bw = {i: min(320.0, max(_text_w(t, 11) * (1.08 if n == 0 else 1.0)
                            for n, t in enumerate(lines[i])) + 24) for i in lines}
    bh, vgap, hgap, margin = 12 + 14 * 4, 44, 26, 24
    widest = max((sum(bw[i] for i in r) + hgap * (len(r) - 1) for r in rows), default=200)
    width = max(640.0, widest + 2 * margin + 120)   # room on the right for skip edges
    cx: dict = {}
    for r, row in enumerate(rows):
        # order by the mean position of predecessors to keep edges short and uncrossed
        row.sort(key=lambda i: (sum(cx[u] for u in q.predecessors(i)) /
                                max(1, q.in_degree(i)) if q.in_degree(i) else 0, i))
        total = sum(bw[i] for i in row) + hgap * (len(row) - 1)
        x = (width - 120) / 2 - total / 2
        for i in row:
            cx[i] = x + bw[i] / 2
            x += bw[i] + hgap
    ytop = {i: margin + layer[i] * (bh + vgap) for i in cx}
    height = margin * 2 + n_layers * (bh + vgap) - vgap
    arrows, right_edge = [], max((cx[i] + bw[i] / 2 for i in cx), default=0.0)
    lanes: list[int] = []          # per lane: the last layer a skip edge in it reaches
    for (i, j), b in sorted(edges.items(), key=lambda e: (layer[e[0][0]], layer[e[0][1]], e[0])):
        if layer[j] - layer[i] == 1:
            x1, y1, x2, y2 = cx[i], ytop[i] + bh, cx[j], ytop[j]
            path = (f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + vgap / 2:.1f} {x2:.1f},"
                    f"{y2 - vgap / 2:.1f} {x2:.1f},{y2 - 1:.1f}")
            lx, ly = (x1 + x2) / 2 + 6, (y1 + y2) / 2 + 4
        else:
            # around the layers in between, on the right; edges whose spans overlap
            # take separate lanes so that they stay apart
            lane = next((n for n, end in enumerate(lanes) if end <= layer[i]), len(lanes))
            if lane == len(lanes):
                lanes.append(0)
            lanes[lane] = layer[j]
            mids = [k for k in cx if layer[i] <= layer[k] <= layer[j]]
            bx = max(cx[k] + bw[k] / 2 for k in mids) + 34 + 22 * lane
            right_edge = max(right_edge, bx + 60)
            x1, y1 = cx[i] + bw[i] / 2, ytop[i] + bh / 2
            x2, y2 = cx[j] + bw[j] / 2 + 1, ytop[j] + bh / 2
            path = f"M{x1:.1f},{y1:.1f} C{bx:.1f},{y1:.1f} {bx:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
            lx, ly = (x1 + 6 * bx + x2) / 8 + 4, (y1 + y2) / 2 + 4
        arrows.append(f'<path d="{path}" fill="none" stroke="#7a828c" stroke-width="1.2" '
                      f'marker-end="url(#{uid}-arrow)"><title>{_esc(ks[i].name)} → '
                      f'{_esc(ks[j].name)}: {fmt_bytes(b)}</title></path>')
        arrows.append(f'<text x="{lx:.1f}" y="{ly:.1f}" font-size="10" fill="{MUTED}" '
                      f'stroke="#fff" stroke-width="3" paint-order="stroke">{fmt_bytes(b)}</text>')
    width = max(width, right_edge + margin)
    o = [_svg_open(width, height, f"Kernel graph of {graph.name}"),
         f'<defs>{_arrow_marker(uid + "-arrow", "#7a828c")}</defs>',
         f'<rect width="{width:.0f}" height="{height:.0f}" fill="#fff"/>'] + arrows
    for i, k in enumerate(ks):
        x, y, w = cx[i] - bw[i] / 2, ytop[i], bw[i]
        colour, tint = BOUND_COLOURS.get(k.bound, MUTED), BOUND_TINTS.get(k.bound, "#fff")
        sw = 2.2 if len(k.ops) > 1 else 1.2
        o.append(f'<g><title>{_esc(_kernel_tip(k, "", graph))}</title><rect x="{x:.1f}" y="{y:.1f}" '
                 f'width="{w:.1f}" height="{bh}" rx="7" fill="{tint}" stroke="{colour}" '
                 f'stroke-width="{sw}"/>')
        for li, t in enumerate(lines[i]):
            weight = ' font-weight="600"' if li == 0 else ""
            fill = INK if li < 2 else MUTED
            fit = int((w - 14) / (_text_w("x") * (1.08 if li == 0 else 1.0)))
            o.append(f'<text x="{cx[i]:.1f}" y="{y + 19 + 14 * li:.1f}" text-anchor="middle" '
                     f'fill="{fill}"{weight}>{_esc(_short(t, fit))}</text>')
        o.append("</g>")
    o.append("</svg>")
    return "\n".join(o)


def _box_lines(graph, k, inputs_b: float) -> list[str]:
    ops = ops_text(k, graph)
    first = k.name if len(k.ops) == 1 else f"{k.name}  (fused ×{len(k.ops)})"
    extra = []
    if inputs_b:
        extra.append(f"reads {fmt_bytes(inputs_b)} of inputs")
    if any(graph.g.nodes[n].get("is_output") for n in k.ops):
        extra.append("graph output")
    return [first, ops, f"{fmt_us(k.us)} · {k.bound}-bound · {_shape(k.shape)}",
            " · ".join(extra) or "\u00a0"]


# ---------------------------------------------------------------------------
# 5. the HTML report
CSS = """
:root { --ink:#1f2328; --muted:#656d76; --line:#e4e7eb; --bg:#f6f7f9; --mem:#2f6fd0;
        --cmp:#e8743b; --lat:#8e6cc9; --good:#1a7f37; --bad:#c93c37; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
       font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif; }
main { max-width:1240px; margin:0 auto; padding:24px 28px 48px; }
header h1 { margin:0; font-size:24px; font-weight:650; letter-spacing:-0.01em; }
header h1 span { color:var(--muted); font-weight:450; }
header p { margin:4px 0 0; color:var(--muted); }
section { background:#fff; border:1px solid var(--line); border-radius:10px; padding:18px 20px;
          margin-top:18px; }
section h2 { margin:0 0 4px; font-size:16px; font-weight:650; }
p.note, .note { color:var(--muted); margin:2px 0 12px; font-size:13px; }
.cards { display:grid; grid-template-columns:1fr 1fr 1fr; gap:14px; background:none; border:0;
         padding:0; }
.card { background:#fff; border:1px solid var(--line); border-radius:10px; padding:14px 18px; }
.card h3 { margin:0 0 6px; font-size:13px; font-weight:600; color:var(--muted);
           text-transform:uppercase; letter-spacing:.04em; }
.big { font-size:28px; font-weight:650; font-variant-numeric:tabular-nums; }
.big small { font-size:14px; color:var(--muted); font-weight:450; }
.kv { display:grid; grid-template-columns:auto 1fr; gap:1px 12px; margin-top:6px;
      font-variant-numeric:tabular-nums; }
.kv dt { color:var(--muted); } .kv dd { margin:0; text-align:right; }
.verdict { display:inline-block; margin-top:8px; padding:3px 10px; border-radius:999px;
           font-weight:600; font-size:13px; }
.verdict.good { background:#dafbe1; color:var(--good); }
.verdict.bad { background:#ffebe9; color:var(--bad); }
.verdict.even { background:#eaeef2; color:var(--muted); }
.mix { display:flex; height:8px; border-radius:4px; overflow:hidden; margin-top:10px;
       background:var(--line); }
.mix span { display:block; height:100%; }
.legend { color:var(--muted); font-size:12px; margin-top:4px; }
.dot { display:inline-block; width:8px; height:8px; border-radius:50%; margin:0 4px 0 9px; }
.bars { display:grid; grid-template-columns:minmax(180px,300px) 1fr 150px; gap:5px 12px;
        align-items:center; font-variant-numeric:tabular-nums; }
.bars .name { white-space:nowrap; overflow:hidden; text-overflow:ellipsis; }
.bars .track { background:#f0f2f4; border-radius:4px; height:16px; }
.bars .fill { height:16px; border-radius:4px; }
.bars .val { text-align:right; color:var(--muted); }
.fig { overflow-x:auto; }
.pic { text-align:center; }
.pic svg { max-width:100%; height:auto; }
table { border-collapse:collapse; width:100%; font-size:13px; font-variant-numeric:tabular-nums; }
th, td { padding:5px 7px; border-bottom:1px solid var(--line); text-align:right;
         white-space:nowrap; }
th { position:sticky; top:0; background:#fafbfc; font-weight:600; cursor:pointer;
     user-select:none; }
th[data-dir="asc"]::after { content:" ▲"; font-size:9px; }
th[data-dir="desc"]::after { content:" ▼"; font-size:9px; }
td.l, th.l { text-align:left; }
td.name { white-space:normal; max-width:260px; overflow-wrap:anywhere; }
td.ops { white-space:normal; max-width:300px; color:var(--muted); }
tbody tr:nth-child(even) { background:#fbfcfd; } tbody tr:hover { background:#f2f6fc; }
.badge { display:inline-block; padding:1px 8px; border-radius:999px; font-size:12px;
         font-weight:600; }
.badge.memory { background:#dfe9fb; color:#1d4f9c; }
.badge.compute { background:#fde6d8; color:#a44b17; }
.badge.latency { background:#ede5f8; color:#5e3f96; }
details summary { cursor:pointer; color:var(--muted); margin:10px 0 6px; }
pre { background:#f6f8fa; border:1px solid var(--line); border-radius:6px; padding:10px;
      overflow:auto; max-height:360px; font-size:12px; }
ul.notes { margin:6px 0 0; padding-left:20px; }
footer { color:var(--muted); font-size:12px; margin-top:18px; }
@media (max-width: 900px) { .cards { grid-template-columns:1fr; } }
"""

JS = """
(function () {
  function key(cell) {
    var v = cell.getAttribute("data-v");
    return v === null ? cell.textContent.trim().toLowerCase() : parseFloat(v);
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.querySelectorAll("th");
    heads.forEach(function (th, col) {
      th.addEventListener("click", function () {
        var asc = th.getAttribute("data-dir") !== "asc";
        heads.forEach(function (h) { h.removeAttribute("data-dir"); });
        th.setAttribute("data-dir", asc ? "asc" : "desc");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a.cells[col]), y = key(b.cells[col]);
          return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  document.body.setAttribute("data-ok", "1");
})();
"""


def _page(title: str, body: str, script: bool = False) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_esc(title)}</title><style>{CSS}</style></head>\n<body><main>\n{body}\n"
            f"</main>{'<script>' + JS + '</script>' if script else ''}</body></html>\n")


def _bound_mix(p) -> str:
    total = p.device_us or 1.0
    spans = []
    for b in BOUNDS:
        t = sum(k.us for k in p.kernels if k.bound == b)
        if t:
            spans.append(f'<span style="width:{t / total * 100:.2f}%;background:'
                         f'{BOUND_COLOURS[b]}" title="{b}-bound: {fmt_us(t)} '
                         f'({t / total:.0%})"></span>')
    legend = "".join(
        f'<span class="dot" style="background:{BOUND_COLOURS[b]}"></span>{b} '
        f'{sum(k.us for k in p.kernels if k.bound == b) / total:.0%}'
        for b in BOUNDS if any(k.bound == b for k in p.kernels))
    return (f'<div class="mix">{"".join(spans)}</div>'
            f'<div class="legend">device time by bound:{legend}</div>')


def _run_card(title: str, p) -> str:
    rows = [("device time", fmt_us(p.device_us)), ("host time", f"{fmt_us(p.timeline.host_us)}/call"),
            ("GPU idle (call 1)", fmt_us(p.idle_us)), ("kernels", str(len(p.kernels))),
            ("bytes moved", fmt_bytes(p.bytes)), ("FLOPs", fmt_si(p.flops, "FLOP"))]
    kv = "".join(f"<dt>{_esc(a)}</dt><dd>{_esc(b)}</dd>" for a, b in rows)
    return (f'<div class="card"><h3>{_esc(title)}</h3><div class="big">'
            f'{_esc(fmt_us(p.end_to_end_us))} <small>end to end, per call</small></div>'
            f'<dl class="kv">{kv}</dl>{_bound_mix(p)}</div>')


def _verdict(res) -> tuple[str, str]:
    s, u, f = res.speedup_end_to_end, res.unfused, res.fused
    if s > 1.005:
        return "good", f"fusion helps: {s:.2f}× faster end to end"
    if s < 0.995:
        why = (" — the host overhead of the fused call outweighs the bytes saved"
               if f.device_us < u.device_us else "")
        return "bad", f"fusion hurts: {1 / s:.2f}× slower end to end{why}"
    return "even", "fusion makes no difference end to end"


def _speedup_card(res) -> str:
    cls, text = _verdict(res)
    u, f = res.unfused, res.fused
    saved = u.bytes - f.bytes
    rows = [("device", f"{res.speedup_device:.2f}×"),
            ("kernels", f"{len(u.kernels)} → {len(f.kernels)}"),
            ("bytes moved", f"{fmt_bytes(u.bytes)} → {fmt_bytes(f.bytes)}"),
            ("bytes saved", f"{fmt_bytes(saved)} ({saved / u.bytes:.0%})" if u.bytes else "-"),
            ("search", f"{res.algo}, {res.seconds:.2f} s")]
    kv = "".join(f"<dt>{_esc(a)}</dt><dd>{_esc(b)}</dd>" for a, b in rows)
    return (f'<div class="card"><h3>Speed-up</h3><div class="big">{res.speedup_end_to_end:.2f}× '
            f'<small>end to end</small></div><dl class="kv">{kv}</dl>'
            f'<span class="verdict {cls}">{_esc(text)}</span></div>')


def _top_kernels(p, n: int = 10) -> str:
    top = sorted(p.kernels, key=lambda k: -k.us)[:n]
    total = p.device_us or 1.0
    mx = top[0].us if top else 1.0
    rows = []
    for k in top:
        rows.append(f'<div class="name" title="{_esc(ops_text(k, p.graph))}">{_esc(k.name)}</div>'
                    f'<div class="track"><div class="fill" style="width:{k.us / mx * 100:.1f}%;'
                    f'background:{BOUND_COLOURS.get(k.bound, MUTED)}"></div></div>'
                    f'<div class="val">{k.us:,.1f} µs · {k.us / total:.0%}</div>')
    return f'<div class="bars">{"".join(rows)}</div>'


def kernel_table(p, table_id: str) -> str:
    """The per-kernel table (sortable in the browser by clicking a heading)."""
    head = [("#", ""), ("kernel", "l"), ("ops", "l"), ("shape", "l"), ("unit", "l"),
            ("FLOPs", ""), ("bytes in", ""), ("bytes out", ""), ("FLOP/B", ""),
            ("bound", "l"), ("µs", ""), ("% device", "")]
    total = p.device_us or 1.0
    th = "".join(f'<th class="{c}">{_esc(h)}</th>' for h, c in head)
    rows = []
    for i, k in enumerate(p.kernels):
        ai = k.intensity
        ai_txt, ai_v = ("∞", 1e300) if math.isinf(ai) else (f"{ai:.3g}", ai)
        cells = [(str(i), i, ""), (k.name, None, "l name"), (ops_text(k, p.graph), None, "l ops"),
                 (_shape(k.shape), None, "l"), (k.unit, None, "l"),
                 (fmt_si(k.flops), k.flops, ""), (fmt_bytes(k.bytes_read), k.bytes_read, ""),
                 (fmt_bytes(k.bytes_written), k.bytes_written, ""), (ai_txt, ai_v, ""),
                 (None, None, "l"), (f"{k.us:,.2f}", k.us, ""), (f"{k.us / total:.1%}", k.us, "")]
        tds = []
        for text, v, cls in cells:
            dv = f' data-v="{v:.6g}"' if v is not None else ""
            if text is None:
                text_html = f'<span class="badge {_esc(k.bound)}">{_esc(k.bound)}</span>'
            else:
                text_html = _esc(text)
            tds.append(f'<td class="{cls}"{dv}>{text_html}</td>')
        rows.append("<tr>" + "".join(tds) + "</tr>")
    return (f'<div class="fig"><table class="sortable" id="{_esc(table_id)}"><thead><tr>{th}'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')


def _strip_xml_prolog(svg: str) -> str:
    i = svg.find("<svg")
    return svg[i:] if i >= 0 else svg


def _graph_section(res) -> str:
    dot = dot_document(result=res)
    svg = render_dot(dot_document(result=res, title=False)) if len(res.fused.kernels) <= 400 else None
    if svg is not None:
        pic, how = _strip_xml_prolog(svg), ("Drawn by Graphviz: ops as nodes, each fused kernel a "
                                            "cluster coloured by its bound, edges labelled with bytes; "
                                            "dashed edges stay on chip")
    else:
        pic, how = graph_svg(result=res), ("One box per kernel (fused groups have a thick border), "
                                           "coloured by its bound; arrows carry the bytes one "
                                           "kernel writes and the next reads. Install Graphviz for "
                                           "the op-level drawing.")
    n = len(res.fused.kernels)
    if n > 30:
        # a tall drawing would bury the tables below it
        pic = f"<details><summary>Show the graph ({n} kernels)</summary>{pic}</details>"
    return (f'<section id="graph"><h2>Fused graph</h2><p class="note">{_esc(how)}</p>'
            f'<div class="fig pic">{pic}</div><details><summary>Graphviz DOT source</summary>'
            f'<pre>{_esc(dot)}</pre></details></section>')


def report_html(result, info: dict | None = None) -> str:
    """The HTML report of a :class:`~gpusim.search.SearchResult` as one string.

    ``info`` adds facts to the header: ``model``, ``dtype``, ``sizes`` (a dict).
    """
    info = info or {}
    u, f = result.unfused, result.fused
    spec = f.spec
    model = info.get("model") or result.graph.name
    title = f"gpusim report: {model} on {spec.display_name}"
    facts = [f"fused run in {f.mode} mode", f"search {result.algo}"]
    if result.optimal_over:
        facts.append(("optimal" if result.optimal else "best found") + f" over {result.optimal_over}")
    if info.get("dtype"):
        facts.append(str(info["dtype"]))
    if info.get("sizes"):
        facts.append(" ".join(f"{k}={v}" for k, v in info["sizes"].items()))
    facts.append(f"spec {spec.name} ({spec.source})")
    notes = list(result.notes)
    if f.unmodelled_ops:
        notes.append(f"{len(f.unmodelled_ops)} op(s) outside the cost model, estimated as "
                     "memory-bound copies: " + ", ".join(f.unmodelled_ops[:8]))
    body = [
        f'<header><h1>{_esc(model)} <span>on {_esc(spec.display_name)}</span></h1>'
        f'<p>{_esc(" · ".join(facts))}</p></header>',
        f'<section class="cards" id="summary">{_run_card("Unfused (eager PyTorch)", u)}'
        f'{_run_card(f"Fused ({f.mode})", f)}{_speedup_card(result)}</section>',
        '<section id="timeline"><h2>Timeline</h2><p class="note">The first simulated call of '
        'each run: the host dispatches kernels (top lane of each), the GPU runs them in order '
        '(bottom lane). Hatched: the GPU waits for the host. End to end is the steady-state time '
        'per call when calls run back to back. Hover for details.</p>'
        f'<div class="fig pic">{timeline_svg(result=result, uid="tl")}</div></section>',
        f'<section id="top"><h2>Top kernels</h2><p class="note">Fused run, by predicted time '
        f'(share of {fmt_us(f.device_us)} device time).</p>{_top_kernels(f)}</section>',
        '<section id="roofline"><h2>Roofline</h2><p class="note">Each dot is a kernel at its '
        'arithmetic intensity and achieved FLOP/s; dots under the slope are limited by memory, '
        'under a flat roof by compute, and far below both by fixed per-kernel costs (latency). '
        'Rings are the unfused kernels; arrows move each fused group from its unfused parts '
        'to the fused kernel.</p>'
        f'<div class="fig pic">{roofline_svg(result=result, uid="rf")}</div></section>',
        _graph_section(result),
        '<section id="kernels"><h2>Kernels</h2><p class="note">Fused run; click a heading to '
        'sort.</p>' + kernel_table(f, "kernels-fused") +
        '<details><summary>Unfused run (eager, one kernel per op)</summary>' +
        kernel_table(u, "kernels-unfused") + '</details></section>',
    ]
    if notes:
        body.append('<section id="notes"><h2>Notes</h2><ul class="notes">' +
                    "".join(f"<li>{_esc(n)}</li>" for n in notes) + "</ul></section>")
    body.append(f'<footer>gpusim · {_esc(spec.display_name)} spec <code>{_esc(spec.name)}</code> '
                f'({_esc(spec.source)}): DRAM {_esc(fmt_si(spec.bandwidth, "B/s"))}, '
                f'{", ".join(_esc(f"{k} {v:g} TFLOP/s") for k, v in spec.peak_tflops.items())}. '
                'Predicted times, not measurements.</footer>')
    return _page(title, "\n".join(body), script=True)


def timeline_page(pred=None, result=None, title: str | None = None) -> str:
    """A small HTML page holding only :func:`timeline_svg` (docs, sharing)."""
    runs = _runs(pred, result)
    p = runs[-1][1]
    title = title or f"gpusim timeline: {p.graph.name} on {p.spec.display_name}"
    sub = ""
    if result is not None:
        cls, text = _verdict(result)
        sub = (f'<p class="note">Simulated first call, unfused (eager) vs fused '
               f'({result.fused.mode}). <span class="verdict {cls}">{_esc(text)}</span></p>')
    body = (f'<section id="timeline"><h2>{_esc(title)}</h2>{sub}<div class="fig pic">'
            f'{timeline_svg(pred, result)}</div></section>')
    return _page(title, body)


def report_main(a) -> int:
    """``gpusim report``: search, then write the HTML report to ``a.out``."""
    from .cli import _graph, _parse_sizes
    from .search import search
    out = a.out
    _check_target(out)          # before the slow part
    graph = _graph(a)
    res = search(graph, gpu=a.gpu, mode=getattr(a, "mode", None) or "compiled",
                 algo=getattr(a, "algo", None) or "auto")
    info = {"model": a.model, "dtype": getattr(a, "dtype", None),
            "sizes": _parse_sizes(getattr(a, "size", None))}
    _write_atomic(out, report_html(res, info))
    print(f"wrote {out}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------
# 6. accuracy plot
CAT_COLOURS = {"kernel": "#2f6fd0", "device": "#e8743b", "end_to_end": "#2a9d8f"}
GPU_MARKERS = ["o", "s", "^", "D", "v"]


def _accuracy_spec(gpu: str):
    """The spec predictions for a results folder use: calibrated, else datasheet."""
    from .hardware import SpecError, load_spec
    from .validation import accuracy
    for name in (accuracy.SPEC_FOR.get(gpu), accuracy.DATASHEET_FOR.get(gpu), gpu):
        if not name:
            continue
        try:
            return load_spec(name)
        except SpecError:
            continue
    return None


def accuracy_rows(results_dir: str, gpus=None) -> dict:
    """``{gpu: (spec, Errors)}`` for every results folder with records and a spec."""
    from .validation import accuracy
    if not os.path.isdir(results_dir):
        return {}
    gpus = gpus or sorted(d for d in os.listdir(results_dir)
                          if os.path.isdir(os.path.join(results_dir, d)))
    out = {}
    for gpu in gpus:
        recs = accuracy.load_records(os.path.join(results_dir, gpu))
        spec = _accuracy_spec(gpu) if recs else None
        if spec is None:
            continue
        model, _, _ = accuracy.evaluate(recs, spec)
        out[gpu] = (spec, model)
    return out


def accuracy_plot(results_dir: str, gpus, path: str):
    """Predicted against measured (log-log) and error against size, per category and
    GPU, from the validation records in ``results_dir/<gpu>/``; returns the path."""
    fmt = _plot_format(path)
    _check_target(path)
    data = accuracy_rows(results_dir, gpus)
    if not any(e.rows for _, e in data.values()):
        which = f" for {', '.join(gpus)}" if gpus else ""
        raise _user_error(f"no validation records in {results_dir}{which}; run `gpusim validate "
                          "--out validation/results/<gpu>` on a GPU machine first")
    Figure, FigureCanvasAgg = _matplotlib()
    import numpy as np
    from .validation.accuracy import ape
    fig = Figure(figsize=(12.5, 5.4))
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    lo, hi = math.inf, 0.0
    for gi, (gpu, (spec, errs)) in enumerate(data.items()):
        marker = GPU_MARKERS[gi % len(GPU_MARKERS)]
        for cat, colour in CAT_COLOURS.items():
            rows = errs.rows.get(cat) or []
            if not rows:
                continue
            p = np.array([r[1] for r in rows])
            m = np.array([r[2] for r in rows])
            e = np.array([ape(a, b) for a, b in zip(p, m)])
            lo, hi = min(lo, p.min(), m.min()), max(hi, p.max(), m.max())
            lab = f"{gpu} {cat.replace('_', '-')} (n={len(rows)}, median {np.median(e):.1f}%)"
            ax1.scatter(m, p, marker=marker, s=22, color=colour, alpha=0.7, edgecolors="none",
                        label=lab)
            ax2.scatter(m, e, marker=marker, s=22, color=colour, alpha=0.7, edgecolors="none",
                        label=lab)
            ax2.axhline(float(np.median(e)), color=colour, lw=1, ls="--", alpha=0.8)
    lo, hi = lo / 1.5, hi * 1.5
    xs = np.array([lo, hi])
    ax1.fill_between(xs, xs / 1.25, xs * 1.25, color="#d0d7de", alpha=0.45, lw=0,
                     label="within 25%")
    ax1.plot(xs, xs, color=INK, lw=1, label="predicted = measured")
    ax1.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
            xlabel="measured (µs)", ylabel="predicted (µs)", title="Predicted vs measured")
    ax2.set(xscale="log", xlabel="measured (µs)", ylabel="absolute error (%)",
            title="Error vs size (dashed: medians)")
    ax2.set_ylim(bottom=0)
    for ax in (ax1, ax2):
        ax.grid(True, which="major", color=GRID, lw=0.8)
        ax.set_axisbelow(True)
    ax1.legend(fontsize=7.5, loc="upper left", framealpha=0.92)
    specs = ", ".join(f"{g}: {s.name}" for g, (s, _) in data.items())
    fig.suptitle(f"gpusim accuracy ({specs})", fontsize=11)
    fig.tight_layout()
    _save_figure(fig, path, fmt)
    return path
