"""Fit the broad sample's kernel classes: ATen's elementwise paths and window pooling.

``python3 -m validation.fit.fit_broad [--gpu h100] [--results validation/results] [--cache DIR]``

Reads ``<results>/<gpu>/broad.jsonl.gz`` (:mod:`validation.measure.broad_run`: per-kernel profiler
lists of timm / Hugging Face models under AMP fp16), re-captures each row as it ran
(:func:`validation.records.store.record_graph`; ``--cache`` keeps the graphs as pickles between
runs) and lines its measured kernels up with gpusim's eager lowering (difflib over coarse
kernel classes, :func:`kernel_class` / :func:`measured_class`). On the matched pairs it fits:

* ``aten_cast_efficiency``: elementwise kernels whose operands are contiguous but of another
  dtype than the output (TensorIterator's dynamic casts: ``unrolled_elementwise_kernel``);
* ``aten_strided_cast_efficiency``: broadcast or strided operands and a cast (the legacy
  ``elementwise_kernel<128, 4, gpu_kernel_impl<...>>``);
* ``aten_permuted_efficiency`` / ``_16bit``: an operand read across the output's layout
  (``permuted``), and ATen's strided copy before a layer norm;
* ``pool_output_rate`` / ``_nhwc``: window pooling, G outputs/s;
* ``depthwise_aten_output_rate_fp16`` / ``depthwise_aten_tap_rate_fp16``: ATen's NCHW fp16
  depthwise kernel (:func:`gpusim.cost.classes.depthwise_aten_us`), G outputs/s on filters of up
  to 9 taps (3x3: the per-output cost dominates) and G output-taps/s on filters of 25 and
  more (5x5, 7x7: the multiply-adds do);
* ``depthwise_nchw_plane_tap_ps_fp16`` / ``_output_ps_fp16`` / ``_output_tap_ps_fp16``:
  cuDNN's NCHW fp16 depthwise kernels (:func:`gpusim.cost.classes.depthwise_nchw_us`), least
  squares on the matched kernels' times (every one, so time-weighted).

Fractions are of a copy's bandwidth (``mem_efficiency`` x the datasheet peak), time-weighted
over kernels past 20 us (shorter ones are latency). Class membership is by gpusim's own node
facts (``casts``, ``permuted``, ``contiguous``, ``layout``), as the predictor will use them.

Leave-one-family-out: each family's rows are predicted with figures fitted on the other
families' rows; the report gives device-time median / p90 error before (the spec without
these figures) and after, per family and over all rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import pickle
import sys
from datetime import date

from gpusim.graph.opgraph import HALF_DTYPES, main_shape, numel
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.hw.schema import BROAD_FIGURES
from gpusim.hw.spec_io import figure_line
from gpusim.cost.classes import _filter_taps
from gpusim.lower.conv import conv_info, conv_layout
from gpusim.lower.inductor import WINDOW_POOLS
from gpusim.graph.ops import packet_name
from validation.records.store import read_records, record_graph, run_set
from validation.records.stats import ape

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")
MIN_US = 20.0
ELEMENTWISE = ("pointwise", "copy")


def measured_class(name: str) -> str:
    """A coarse class of a profiled kernel name, comparable with :func:`kernel_class`."""
    if "elementwise_kernel" in name:
        return "elementwise"
    for keys, c in ((("nchwToNhwc", "nhwcToNchw", "AddPadding", "tensorTransform"), "layout"),
                    (("sdpa", "fmha", "flash", "attention"), "attention"),
                    (("bn_fw", "batch_norm"), "batch_norm"), (("layer_norm",), "layer_norm"),
                    (("softmax",), "softmax"), (("pool",), "pool"), (("reduce_kernel",), "reduce"),
                    (("fprop", "convolve", "conv2d", "cutlass", "depthwise", "grouped_direct",
                      "nvjet", "gemm", "gemv", "splitK", "Kernel"), "gemm")):
        if any(k in name for k in keys):
            return c
    return "other"


def kernel_class(graph, k) -> str:
    """The coarse class of one lowered kernel (:class:`gpusim.lower.lowering.Kernel`)."""
    a = graph.g.nodes[k.ops[0]]
    op, kind = packet_name(a["op"]), a["kind"]
    if k.role == "aux":
        if kind == "conv":
            return "layout"
        if kind == "matmul":
            return "gemm"
        return "elementwise"
    if kind in ("matmul", "conv"):
        return "gemm"
    if kind == "attention":
        return "attention"
    if kind == "norm":
        return "batch_norm" if "batch_norm" in op else "layer_norm" if "layer_norm" in op else "other"
    if "softmax" in op:
        return "softmax"
    if op in WINDOW_POOLS or "pool" in op:
        return "pool"
    if kind == "reduction":
        return "reduce"
    return "elementwise" if kind in ELEMENTWISE else "other"


def point_class(graph, k) -> str | None:
    """Which fitted class a matched kernel informs (None: none of them)."""
    a = graph.g.nodes[k.ops[0]]
    half = a["dtype"] in HALF_DTYPES
    if k.role == "aux" and k.variant == "strided_copy":
        return "aten_permuted_efficiency" + ("_16bit" if half else "")
    if k.role != "main":
        return None
    if k.variant == "pool":
        return "pool_output_rate_nhwc" if a.get("layout") == "nhwc" else "pool_output_rate"
    if k.variant == "depthwise" and a["dtype"] == "float16" and conv_layout(graph, k.ops[0]) == "nchw":
        return "depthwise_nchw_fp16"
    if k.variant == "depthwise_aten" and a["dtype"] == "float16":
        taps = _filter_taps(graph, a)
        return ("depthwise_aten_output_rate_fp16" if taps <= 9 else
                "depthwise_aten_tap_rate_fp16" if taps >= 25 else None)
    if a["kind"] not in ELEMENTWISE or k.impl == "generated":
        return None
    casts = a.get("casts") and a["kind"] == "pointwise"      # (copies cast vectorised)
    if a.get("contiguous", True):
        return "aten_cast_efficiency" if casts else None
    if a.get("permuted"):
        return "aten_permuted_efficiency" + ("_16bit" if half else "")
    return "aten_strided_cast_efficiency" if casts else None


def load_graphs(results: str, gpu: str, cache: str | None, progress=None) -> list:
    """``[(record, graph)]`` for every measured broad row (pickled in ``cache`` if given)."""
    recs = [r for r in read_records(run_set(results, gpu, "broad"))
            if not r.get("failed") and r.get("kernel_sum_us")]
    out = []
    for i, r in enumerate(recs):
        path = cache and os.path.join(cache, r["model"].replace(":", "_").replace("/", "_") + ".pkl")
        if path and os.path.exists(path):
            with open(path, "rb") as f:
                g = pickle.load(f)
        else:
            g = record_graph(r)
            if path:
                os.makedirs(cache, exist_ok=True)
                with open(path, "wb") as f:
                    pickle.dump(g, f)
        out.append((r, g))
        if progress:
            progress(i + 1, len(recs), r["model"])
    return out


def points(rows: list, spec) -> list[dict]:
    """The matched kernels of every row that inform a fitted class: ``{"model", "family",
    "cls", "us", "bytes", "outputs"}``."""
    from gpusim.cost.kernel import estimate_kernel
    from gpusim.predict.pipeline import lower
    pts = []
    for r, g in rows:
        ks = lower(g, "eager", spec=spec).kernels
        pc = [kernel_class(g, k) for k in ks]
        mc = [measured_class(k["name"]) for k in r["kernels"]]
        sm = difflib.SequenceMatcher(None, mc, pc, autojunk=False)
        for b in sm.get_matching_blocks():
            for j in range(b.size):
                k = ks[b.b + j]
                cls = point_class(g, k)
                if cls is None:
                    continue
                e = estimate_kernel(g, k, spec)
                pts.append({"model": r["model"], "family": r["family"], "cls": cls,
                            "us": r["kernels"][b.a + j]["us"], "bytes": e.bytes,
                            "outputs": numel(main_shape(g.g.nodes[k.ops[0]].get("shape"))),
                            "taps": _filter_taps(g, g.g.nodes[k.ops[0]]),
                            "planes": _planes(g, k.ops[0])})
    return pts


def _planes(graph, n: str) -> int:
    """Images x output channels of a convolution node (0 for other nodes)."""
    c = conv_info(graph, n) if graph.g.nodes[n]["kind"] == "conv" else None
    return c["N"] * c["Cout"] if c else 0


#: cuDNN's NCHW fp16 depthwise law's figures (gpusim.cost.classes.depthwise_nchw_us), ps
DEPTHWISE_NCHW = ("depthwise_nchw_plane_tap_ps_fp16", "depthwise_nchw_output_ps_fp16",
                  "depthwise_nchw_output_tap_ps_fp16")


def fit_depthwise_nchw(pts: list[dict], spec) -> dict:
    """Least squares of the matched kernels' times past the fixed launch cost on
    (planes x taps, outputs, outputs x taps); every kernel counts by its time."""
    import numpy as np
    sel = [p for p in pts if p["cls"] == "depthwise_nchw_fp16"]
    if len(sel) < 4:
        return {}
    a = np.array([[p["planes"] * p["taps"], p["outputs"], p["outputs"] * p["taps"]] for p in sel], float)
    y = np.array([p["us"] - spec.kernel_fixed_us for p in sel])
    c, *_ = np.linalg.lstsq(a, y, rcond=None)
    return {k: round(float(v) * 1e6, 4) for k, v in zip(DEPTHWISE_NCHW, c)}


def fit(pts: list[dict], spec) -> dict:
    """``{figure: value}`` over ``pts`` (kernels past :data:`MIN_US`); a class with no such
    kernel is left out (the spec's own law stays)."""
    out = {}
    for key in BROAD_FIGURES:
        if key in DEPTHWISE_NCHW:
            continue
        sel = [p for p in pts if p["cls"] == key and p["us"] > MIN_US]
        if not sel:
            continue
        us = sum(p["us"] - spec.kernel_fixed_us for p in sel)
        if key.startswith("pool") or key == "depthwise_aten_output_rate_fp16":
            out[key] = round(sum(p["outputs"] for p in sel) / us / 1e3, 2)
        elif key == "depthwise_aten_tap_rate_fp16":
            out[key] = round(sum(p["outputs"] * p["taps"] for p in sel) / us / 1e3, 1)
        else:
            out[key] = round(min(1.0, sum(p["bytes"] for p in sel) / us * 1e6
                                 / (spec.mem_efficiency * spec.bandwidth)), 4)
    out.update(fit_depthwise_nchw(pts, spec))
    return out


def device_errors(rows: list, spec) -> dict:
    """``{model: absolute device-time error, %}`` of ``rows`` on ``spec``."""
    from gpusim.predict.pipeline import lower
    from gpusim.predict.pipeline import predict_lowering
    return {r["model"]: ape(predict_lowering(lower(g, "eager", spec=spec), spec).device_us,
                            r["kernel_sum_us"]) for r, g in rows}


def _pct(xs: list[float], q: float) -> float:
    import numpy as np
    return float(np.percentile(xs, q)) if xs else float("nan")


def leave_one_family_out(rows: list, pts: list, spec) -> dict:
    """``{"before": {model: err}, "after": {model: err}, "figures": {family: fit}}``: each
    family predicted with the figures fitted on the others' points."""
    base = dataclasses.replace(spec, **{k: None for k in BROAD_FIGURES})
    before = device_errors(rows, base)
    after, figs = {}, {}
    for fam in sorted({r["family"] for r, _ in rows}):
        figs[fam] = fit([p for p in pts if p["family"] != fam], spec)
        held = [(r, g) for r, g in rows if r["family"] == fam]
        after.update(device_errors(held, dataclasses.replace(base, **figs[fam])))
    return {"before": before, "after": after, "figures": figs}


def report(rows: list, lofo: dict) -> str:
    fams = sorted({r["family"] for r, _ in rows}) + ["all"]
    lines = []
    for fam in fams:
        ms = [r["model"] for r, _ in rows if fam in ("all", r["family"])]
        b = [lofo["before"][m] for m in ms]
        a = [lofo["after"][m] for m in ms]
        lines.append(f"# held out {fam:<8} n={len(ms):3d} device median {_pct(b, 50):5.1f}% -> "
                     f"{_pct(a, 50):5.1f}%   p90 {_pct(b, 90):5.1f}% -> {_pct(a, 90):5.1f}%")
    return "\n".join(lines)


def figure_lines(figs: dict, gpu: str, display: str, results: str) -> str:
    ref = (f"{display}, {date.today().isoformat()}, python3 -m validation.fit.fit_broad on "
           f"{os.path.relpath(run_set(results, gpu, 'broad'))} (matched profiler kernels, "
           f"time-weighted past {MIN_US:.0f} us)")
    return "\n".join(figure_line(k, v, "measured", ref) for k, v in figs.items())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.fit.fit_broad")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--results", default=RESULTS)
    ap.add_argument("--cache", help="directory for pickled graphs (re-used when present)")
    a = ap.parse_args(argv)
    spec = load_spec(calibrated_name(a.gpu))
    rows = load_graphs(a.results, a.gpu, a.cache,
                       lambda i, n, m: print(f"[{i}/{n}] {m}", file=sys.stderr, flush=True))
    pts = points(rows, spec)
    lofo = leave_one_family_out(rows, pts, spec)
    for fam, f in lofo["figures"].items():
        print(f"# fitted without {fam}: {f}")
    print(report(rows, lofo))
    display = rows[0][0]["env"]["gpu_name"] if rows else a.gpu
    print(figure_lines(fit(pts, spec), a.gpu, display, a.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
