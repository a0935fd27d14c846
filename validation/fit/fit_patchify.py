"""ViT patch embeddings' law (gpusim.cost.vit_kernels.patchify_us; issue 35), fitted on a GPU's patchify points:
``validation/results/<gpu>/vit_patchify.jsonl`` (``python3 -m validation.measure.vit_patchify``: patch 8-32, 96-1280
channels, batch 1-128, three dtypes) where the GPU ran that sweep, else (``--source dispatch``) the dispatch sweep's
16x16 / 768 points at batch 1 and 32 (validation/sweeps/<gpu>.json, ``kind: patch16``, NCHW).

The time fitted is cuDNN's main kernel (its NCHW <-> NHWC transforms are priced apart, as aux kernels).
- 16-bit: waves of ``patchify_tile_16bit`` x ``patchify_tile_16bit`` CTAs (128: the kernel's name,
  ``..._128x128_32x5_...``), ``patchify_ctas_per_sm_16bit`` (1 or 2: the one whose fit has the smaller error), each
  wave ``patchify_wave_us_16bit`` + ``patchify_wave_tap_ns_16bit`` per k x k tap, least squares on relative error
  (one patch size: no tap term, and the law holds at that size only, gpusim.cost.vit_kernels.ONE_PATCH);
- fp32: ``patchify_us`` + FLOPs at ``patchify_tflops``, least squares on relative error.
Printed: the figures, in-sample and leave-one-shape-out (patch size x channels) median errors.

    python3 -m validation.fit.fit_patchify [--gpu h200] [--source vit_patchify|dispatch] [--write]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

import numpy as np

from gpusim.cost.vit_kernels import COUT_RANGE, MAX_M, PATCH_RANGE
from gpusim.hw.spec import calibrated_name, load_spec
from validation.fit.fit_triton import emit_measured

FIGURES = ("patchify_tile_16bit", "patchify_ctas_per_sm_16bit", "patchify_wave_us_16bit", "patchify_wave_tap_ns_16bit",
           "patchify_us", "patchify_tflops")
TILE = 128
TRANSFORMS = ("nchwToNhwc", "nhwcToNchw", "AddPadding", "convertTensor")


def _point(p: dict) -> dict | None:
    main = [k for k in p.get("kernels") or [] if not any(t in k["name"] for t in TRANSFORMS)]
    if not main or p.get("failed"):
        return None
    k, g = p["k"], p["HW"] // p["k"]
    m = p["N"] * g * g
    if not (PATCH_RANGE[0] <= k <= PATCH_RANGE[1] and COUT_RANGE[0] <= p["Cout"] <= COUT_RANGE[1] and m <= MAX_M):
        return None
    return {"dtype": p["dtype"], "k": k, "cout": p["Cout"], "m": m, "us": sum(x["us"] for x in main),
            "flops": 2.0 * m * p["Cout"] * p.get("Cin", 3) * k * k, "shape": (k, p["Cout"])}


def points(path: str, source: str) -> tuple[dict, list[dict]]:
    """The environment and the NCHW patchify points of a sweep file."""
    if source == "dispatch":
        d = json.load(open(path))
        raw = [p for p in d["sweeps"]["conv2d"] if p.get("kind") == "patch16" and p.get("layout") == "nchw"]
        return d.get("env") or {}, [x for x in map(_point, raw) if x]
    env, out = {}, []
    for line in open(path):
        r = json.loads(line)
        if r.get("kind") == "environment":
            env = r
        elif r.get("kind") == "vit_patchify" and r.get("op") == "patchify":
            x = _point(r)
            if x:
                out.append(x)
    return env, out


def waves(p: dict, sms: int, per_sm: int) -> int:
    return math.ceil(math.ceil(p["m"] / TILE) * math.ceil(p["cout"] / TILE) / (sms * per_sm))


def _rel_lstsq(cols: list[list[float]], ys: list[float]) -> np.ndarray:
    a = np.array(cols, dtype=float).T / np.array(ys)[:, None]
    return np.linalg.lstsq(a, np.ones(len(ys)), rcond=None)[0]


def fit(pts: list[dict], sms: int) -> dict:
    figs = {}
    half = [p for p in pts if p["dtype"] in ("bfloat16", "float16")]
    if half:
        best = None
        for per_sm in (1, 2):
            w = [waves(p, sms, per_sm) for p in half]
            taps = len({p["k"] for p in half}) > 1
            cols = [w, [wi * p["k"] ** 2 for wi, p in zip(w, half)]] if taps else [w]
            c = _rel_lstsq(cols, [p["us"] for p in half])
            a, b = float(c[0]), float(c[1]) if taps else 0.0
            err = statistics.median(abs(wi * (a + b * p["k"] ** 2) / p["us"] - 1) for wi, p in zip(w, half))
            if best is None or err < best[0]:
                best = (err, per_sm, a, b)
        figs.update(patchify_tile_16bit=float(TILE), patchify_ctas_per_sm_16bit=float(best[1]),
                    patchify_wave_us_16bit=best[2], patchify_wave_tap_ns_16bit=best[3] * 1e3 if best[3] else None)
    full = [p for p in pts if p["dtype"] == "float32"]
    if len({p["flops"] for p in full}) >= 2:
        c = _rel_lstsq([[1.0] * len(full), [p["flops"] for p in full]], [p["us"] for p in full])
        figs.update(patchify_us=float(c[0]), patchify_tflops=1e-6 / float(c[1]) if c[1] > 0 else None)
    return figs


def predict(p: dict, figs: dict, sms: int) -> float | None:
    if p["dtype"] == "float32":
        return figs["patchify_us"] + p["flops"] / (figs["patchify_tflops"] * 1e12) * 1e6 if figs.get("patchify_tflops") else None
    if figs.get("patchify_wave_us_16bit") is None:
        return None
    w = waves(p, sms, int(figs["patchify_ctas_per_sm_16bit"]))
    return w * (figs["patchify_wave_us_16bit"] + p["k"] ** 2 * (figs.get("patchify_wave_tap_ns_16bit") or 0.0) * 1e-3)


def main(argv=None) -> int:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(prog="python3 -m validation.fit.fit_patchify")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--source", choices=("vit_patchify", "dispatch"), default="vit_patchify")
    ap.add_argument("--write", action="store_true", help="put the figures into the GPU's calibrated spec")
    a = ap.parse_args(argv)
    path = (os.path.join(root, "validation", "sweeps", f"{a.gpu}.json") if a.source == "dispatch"
            else os.path.join(root, "validation", "results", a.gpu, "vit_patchify.jsonl"))
    if not os.path.exists(path):
        print(f"no {path}", file=sys.stderr)
        return 2
    env, pts = points(path, a.source)
    spec = load_spec(calibrated_name(a.gpu))
    figs = fit(pts, spec.sm_count)
    print(", ".join(f"{k} = {v:.4g}" for k, v in figs.items() if v is not None))
    summary = []
    for label, dts in (("16-bit", ("bfloat16", "float16")), ("fp32", ("float32",))):
        sel = [p for p in pts if p["dtype"] in dts]
        ins = [abs(predict(p, figs, spec.sm_count) / p["us"] - 1) * 100 for p in sel if predict(p, figs, spec.sm_count)]
        loo = []
        for shape in {p["shape"] for p in sel}:
            rest = fit([p for p in pts if p["shape"] != shape], spec.sm_count)
            loo += [abs(v / p["us"] - 1) * 100 for p in sel if p["shape"] == shape
                    for v in [predict(p, rest, spec.sm_count)] if v]
        if ins:
            summary.append(f"{label} {len(sel)} points: in-sample {statistics.median(ins):.1f}% median "
                           f"(p90 {float(np.percentile(ins, 90)):.1f}%), leave-one-shape-out "
                           + (f"{statistics.median(loo):.1f}%" if loo else "- (one shape)"))
    print("\n".join(summary))
    rel = os.path.relpath(path, root)
    ref = (f"{env.get('gpu_name', a.gpu)}, {env.get('utc') or 'dated in the sweep'}, {rel} "
           f"({'python3 -m validation.measure.vit_patchify' if a.source == 'vit_patchify' else 'patch16 points'}); "
           f"fitted by python3 -m validation.fit.fit_patchify --gpu {a.gpu} --source {a.source} ({'; '.join(summary)})")
    emit_measured(spec.path, FIGURES, {k: v for k, v in figs.items() if v is not None}, ref, ".4f", a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
