"""Fit cuDNN's layout-transform law (:mod:`gpusim.cost.layout`) on a GPU's own conv sweeps.

``python3 -m validation.fit.fit_layout [--gpu h200] [--write]``

Reads every NCHW tensor-core convolution of the GPU's microbenchmark sweeps whose kernels include
cuDNN's ``nchwToNhwcKernel`` / ``nhwcToNchwKernel`` (no held-out, zoo or published record):

- ``validation/sweeps/<gpu>.json`` (``conv2d``) and ``<gpu>-cnn.json`` (``cnn``): one conv per
  point, L2 flushed before each call (:mod:`validation.measure.microbench`);
- ``validation/results/<gpu>/cnn_convs.jsonl`` (stems, ``bench`` layers; L2 flushed);
- ``validation/results/<gpu>/cnn_chain.jsonl``: the conv stage of conv -> BN -> ReLU chains, timed
  in the chain (its input written by the kernel before, as in a model), alone cold and alone warm.

In a call's kernels the first ``nchwToNhwc`` is the input's, the second the weight's (a 1x1 conv has
none: its weight is already NHWC), the last ``nhwcToNchw`` the output's. Grouped convolutions are
left out of the fit (cuDNN may split them into per-group calls, each with its own transforms) and
scored apart.

The fit uses the points whose tensors stand as in a model: the output transform (its input the
conv's output, just written), the weight's (cold: read once a forward), the stems' input (the
model's input, cold) and the chain's input transforms (written by the kernel before). The input
transforms of the flushed sweeps (input cold, which in a model it is not) and the warm points are
scored, not fitted. ``layout_transform_us`` and ``layout_transform_gelems``: the tile-element line
over the points within the L2-resident cap (the rate by a grid search on the median relative error,
the intercept the median residual); ``layout_transform_dram_efficiency[_16bit]``: the median
bytes moved / (bandwidth x (time - intercept)) over the larger points of each element size.
Reported: gpusim's error on every group before (the byte stream at ``layout_transform_efficiency``)
and after, and each sweep file, dtype and transform left out.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys

import numpy as np

from gpusim.cost.layout import FIGURES, layout_transform_us, moved_bytes, tile_elements
from gpusim.graph.opgraph import DTYPE_BYTES, HALF_DTYPES
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.hw.spec_io import figure_line
from validation.fit.fit_triton import RESULTS, emit_figures, spec_fit_parser

SWEEPS = os.path.join(os.path.dirname(RESULTS), "sweeps")
TO_NHWC, TO_NCHW = "nchwToNhwc", "nhwcToNchw"


def conv_facts(p: dict) -> dict:
    """:func:`gpusim.lower.conv.conv_info`'s fields of a sweep point."""
    k, s = p["k"], p.get("stride", 1)
    pad = p.get("padding", k // 2)
    ho = (p["HW"] + 2 * pad - k) // s + 1
    return {"N": p["N"], "Cin": p["Cin"], "Cout": p["Cout"], "H": p["HW"], "W": p["HW"], "kh": k, "kw": k,
            "Ho": ho, "Wo": ho, "groups": p.get("groups", 1), "dtype": p["dtype"]}


def transforms(p: dict, kernels: list, src: str, state: str) -> list[dict]:
    """The transform points of one conv call: ``{c, variant, us, src, state}``."""
    c = conv_facts(p)
    ins = [k for k in kernels if TO_NHWC in k["name"]]
    outs = [k for k in kernels if TO_NCHW in k["name"]]
    found = []
    if ins:
        found.append(("to_nhwc", ins[0]["us"]))
    if len(ins) > 1 and c["kh"] * c["kw"] > 1:
        found.append(("weight_to_nhwc", ins[1]["us"]))
    if outs:
        found.append(("to_nchw", outs[-1]["us"]))
    return [{"c": c, "variant": v, "us": us, "src": src, "state": state} for v, us in found]


def _jsonl(path: str, kind: str, envs: dict) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        rows = list(map(json.loads, f))
    envs[os.path.basename(path)] = next((r for r in rows if r.get("kind") == "environment"), {})
    return [r for r in rows if r.get("kind") == kind and not r.get("failed")]


def load_points(gpu: str, envs: dict | None = None) -> list[dict]:
    """Every transform point of the GPU's sweeps (module docstring); ``envs`` gets each file's
    environment (GPU name, UTC)."""
    pts = []
    envs = {} if envs is None else envs
    for name, key in ((f"{gpu}.json", "conv2d"), (f"{gpu}-cnn.json", "cnn")):
        path = os.path.join(SWEEPS, name)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            d = json.load(f)
            envs[name] = d.get("env") or {}
            for p in d["sweeps"].get(key, []):
                if p.get("layout") == "nchw" and p.get("kernels") and p.get("op", "conv2d") == "conv2d":
                    pts += transforms(p, p["kernels"], name, "cold")
    for p in _jsonl(os.path.join(RESULTS, gpu, "cnn_convs.jsonl"), "cnn_convs", envs):
        if "Cin" in p and p.get("kernels") and not p.get("benchmark"):
            pts += transforms(p, p["kernels"], "cnn_convs", "cold")
    for p in _jsonl(os.path.join(RESULTS, gpu, "cnn_chain.jsonl"), "cnn_chain", envs):
        if p["layout"] != "nchw" or p["chain"] == "bnr":
            continue
        k = 3 if p["chain"] == "cbr" else 1
        q = {"N": p["N"], "Cin": p["C"], "Cout": p["C"], "HW": p["HW"], "k": k, "dtype": p["dtype"]}
        pts += transforms(q, p["kernels"], "cnn_chain", "chain")
        for state in ("cold", "warm"):
            pts += transforms(q, p[state]["conv"], "cnn_chain", state)
    return pts


def model_like(p: dict) -> bool:
    """Whether a point's tensors stand as a model's do (module docstring): fitted on."""
    if p["c"]["groups"] > 1 or p["state"] == "warm":
        return False
    return p["variant"] != "to_nhwc" or p["state"] == "chain" or p["c"]["Cin"] < 8


def l2_cap(spec) -> float:
    return spec.l2_resident_fraction * spec.l2_bytes


def fit(points: list[dict], spec) -> dict:
    """The law's four figures on ``points`` (module docstring)."""
    cap = l2_cap(spec)
    small = [p for p in points if moved_bytes(p["c"], p["variant"]) / 2 <= cap]
    y = np.array([p["us"] for p in small])
    tiles = np.array([tile_elements(p["c"], p["variant"]) for p in small], dtype=float)
    best = None
    for rate in np.geomspace(50.0, 5000.0, 400):       # G tile elements / s
        t = tiles / (rate * 1e3)
        a = float(np.median(y - t))
        err = float(np.median(np.abs((a + t) / y - 1)))
        if best is None or err < best[0]:
            best = (err, a, float(rate))
    out = {"layout_transform_us": best[1], "layout_transform_gelems": best[2]}
    for name, half in (("layout_transform_dram_efficiency", False), ("layout_transform_dram_efficiency_16bit", True)):
        big = [p for p in points if moved_bytes(p["c"], p["variant"]) / 2 > cap
               and (p["c"]["dtype"] in HALF_DTYPES) == half and p["us"] > best[1]]
        if big:
            out[name] = statistics.median(moved_bytes(p["c"], p["variant"]) / (spec.bandwidth * (p["us"] - best[1]) * 1e-6)
                                          for p in big)
    return out


def stream_us(p: dict, spec) -> float:
    """The law before: the byte stream at ``layout_transform_efficiency``, over the floor."""
    eff = spec.layout_transform_efficiency or spec.mem_efficiency
    return max(spec.kernel_min_us, spec.kernel_fixed_us + moved_bytes(p["c"], p["variant"]) / (eff * spec.bandwidth) * 1e6)


def errors(points: list[dict], spec, figs: dict | None) -> list[float]:
    """Relative errors of the law with ``figs`` (None: the stream before)."""
    if figs is None:
        return [stream_us(p, spec) / p["us"] - 1 for p in points]
    s = dataclasses.replace(spec, **figs)
    return [layout_transform_us(p["c"], p["variant"], s) / p["us"] - 1 for p in points]


def summary(e: list[float]) -> str:
    if not e:
        return "-"
    return f"{100 * statistics.median(map(abs, e)):.1f}% ({100 * statistics.median(e):+.1f}%)"


def group_key(p: dict) -> str:
    dt = "16-bit" if p["c"]["dtype"] in HALF_DTYPES else "fp32"
    kind = "stem " + p["variant"] if p["c"]["Cin"] < 8 else p["variant"]
    g = " grouped" if p["c"]["groups"] > 1 else ""
    return f"{p['state']} {kind} {dt}{g}"


def table(points: list[dict], spec, figs: dict) -> list[str]:
    lines = ["| points (state, transform, dtype) | n | fitted on | before | after |", "|---|---|---|---|---|"]
    groups: dict[str, list] = {}
    for p in points:
        groups.setdefault(group_key(p), []).append(p)
    for k in sorted(groups):
        ps = groups[k]
        lines.append(f"| {k} | {len(ps)} | {'yes' if model_like(ps[0]) else 'no'} | "
                     f"{summary(errors(ps, spec, None))} | {summary(errors(ps, spec, figs))} |")
    return lines


def leave_out(points: list[dict], spec) -> list[str]:
    """Each sweep file, dtype size and transform left out: figures fitted on the rest, the
    left-out points' error."""
    keys = {"src": lambda p: p["src"], "dtype": lambda p: "16-bit" if p["c"]["dtype"] in HALF_DTYPES else "fp32",
            "transform": lambda p: p["variant"]}
    out = []
    for name, key in keys.items():
        for v in sorted({key(p) for p in points}):
            rest = [p for p in points if key(p) != v]
            own = [p for p in points if key(p) == v]
            figs = fit(rest, spec)
            if len(figs) < len(FIGURES):
                continue
            out.append(f"leave {name}={v} out ({len(own)} points): {figs['layout_transform_us']:.3f} us, "
                       f"{figs['layout_transform_gelems']:.0f} G/s, dram {figs['layout_transform_dram_efficiency']:.3f} / "
                       f"{figs['layout_transform_dram_efficiency_16bit']:.3f}; its points {summary(errors(own, spec, None))} "
                       f"-> {summary(errors(own, spec, figs))}")
    return out


def main(argv=None) -> int:
    a = spec_fit_parser("fit_layout").parse_args(argv)
    spec = load_spec(calibrated_name(a.gpu))
    spec = dataclasses.replace(spec, **{f: None for f in FIGURES})
    envs: dict = {}
    pts = load_points(a.gpu, envs)
    fitted = [p for p in pts if model_like(p)]
    figs = fit(fitted, spec)
    if len(figs) < len(FIGURES) or len(fitted) < 20:
        print(f"fit_layout: too few transform points for {a.gpu} ({len(fitted)})", file=sys.stderr)
        return 2
    head = (f"layout_transform_us = {figs['layout_transform_us']:.3f}, layout_transform_gelems = "
            f"{figs['layout_transform_gelems']:.1f}, dram efficiency {figs['layout_transform_dram_efficiency']:.4f} (fp32) / "
            f"{figs['layout_transform_dram_efficiency_16bit']:.4f} (16-bit), on {len(fitted)} of {len(pts)} transform points")
    fit_err = f"fitted points, gpusim median abs (signed) error: {summary(errors(fitted, spec, None))} -> {summary(errors(fitted, spec, figs))}"
    print("\n".join([head, fit_err, ""] + table(pts, spec, figs) + [""] + leave_out(fitted, spec)))
    gpu_name = next((e.get("gpu_name") for e in envs.values() if e.get("gpu_name")), a.gpu)
    dates = ", ".join(f"{n} {(e.get('utc') or '')[:10]}" for n, e in sorted(envs.items()) if any(p["src"] in n for p in pts))
    ref = (f"{gpu_name}, sweeps {dates}; python3 -m validation.fit.fit_layout --gpu {a.gpu} (cuDNN nchwToNhwc / "
           f"nhwcToNchw kernels of NCHW tensor-core convs, tile-element law gpusim.cost.layout); {fit_err}")
    emit_figures(spec.path, [figure_line(f, figs[f], "measured", ref, ".4f") for f in FIGURES],
                 tuple(f + " =" for f in FIGURES), a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
