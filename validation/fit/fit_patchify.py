"""ViT patch embeddings' law (gpusim.cost.vit_kernels.patchify_us; issue 35), fitted on a GPU's patchify points:
``validation/results/<gpu>/vit_patchify.jsonl`` (``python3 -m validation.measure.vit_patchify``: patch 8-32, 96-1280
channels, batch 1-128, three dtypes) where the GPU ran that sweep, else (``--source dispatch``) the dispatch sweep's
16x16 / 768 points at batch 1 and 32 (validation/sweeps/<gpu>.json, ``kind: patch16``, NCHW).

The time fitted is cuDNN's main kernel (its NCHW <-> NHWC transforms are priced apart, as aux kernels).
- 16-bit from 512 channels: the first wave ``patchify_wave_us_16bit`` + ``patchify_wave_tap_ns_16bit`` per k x k tap
  (least squares on relative error over the one-wave points), each further wave ``patchify_next_wave_16bit`` of it
  (the median over the others); waves by gpusim.cost.vit_kernels.patchify_waves (128 x 128 tiles: the kernel's name);
- 16-bit below 512 channels (patch <= 16): ``patchify_narrow_tap_ns_16bit`` per tap (the median at batch 1), else
  ``patchify_narrow_ps_16bit`` per output element and tap (the median past 1.5x that floor);
- fp32 (the CUDA-core NCHW kernel's shapes, gpusim.cost.vit_kernels.FP32_MAX_*): ``patchify_tap_ns`` per tap +
  FLOPs at ``patchify_tflops``, least squares on relative error.
Printed: the figures, in-sample and leave-one-shape-out (patch size x channels) median errors.

    python3 -m validation.fit.fit_patchify [--gpu h200] [--write]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from types import SimpleNamespace

import numpy as np

from gpusim.cost.vit_kernels import COUT_RANGE, FP32_MAX_COUT, FP32_MAX_M, MAX_M, PATCH_RANGE, WIDE_COUT, patchify_us, patchify_waves
from gpusim.hw.spec import calibrated_name, load_spec
from validation.fit.fit_triton import emit_measured

FIGURES = ("patchify_wave_us_16bit", "patchify_wave_tap_ns_16bit", "patchify_next_wave_16bit", "patchify_narrow_tap_ns_16bit",
           "patchify_narrow_ps_16bit", "patchify_tap_ns", "patchify_tflops")
TRANSFORMS = ("nchwToNhwc", "nhwcToNchw", "AddPadding", "convertTensor")


def _point(p: dict) -> dict | None:
    main = [k for k in p.get("kernels") or [] if not any(t in k["name"] for t in TRANSFORMS)]
    if not main or p.get("failed"):
        return None
    k, g = p["k"], p["HW"] // p["k"]
    m = p["N"] * g * g
    if not (PATCH_RANGE[0] <= k <= PATCH_RANGE[1] and COUT_RANGE[0] <= p["Cout"] <= COUT_RANGE[1] and m <= MAX_M):
        return None
    return {"dtype": p["dtype"], "k": k, "cout": p["Cout"], "m": m, "us": sum(x["us"] for x in main), "N": p["N"],
            "flops": 2.0 * m * p["Cout"] * p.get("Cin", 3) * k * k, "shape": (k, p["Cout"]), "kernel": main[0]["name"]}


def points(path: str, source: str) -> tuple[dict, list[dict]]:
    """The environment and the NCHW patchify points of a sweep file (``dispatch``: the 16x16 / 768 points)."""
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


def _rel_lstsq(cols: list[list[float]], ys: list[float]) -> np.ndarray:
    a = np.array(cols, dtype=float).T / np.array(ys)[:, None]
    return np.linalg.lstsq(a, np.ones(len(ys)), rcond=None)[0]


def in_law(p: dict) -> bool:
    """A point the law prices (gpusim.cost.vit_kernels.patchify_us: 16-bit narrow embeddings up to patch 16)."""
    if p["dtype"] == "float32":
        return p["k"] >= 14 and p["cout"] <= FP32_MAX_COUT and p["m"] <= FP32_MAX_M
    return p["cout"] >= WIDE_COUT or p["k"] <= 16


def fit(pts: list[dict], sms: int) -> dict:
    """The figures, each least squares on relative error (the narrow floor: the median per tap at batch 1)."""
    figs = {}
    wide = [p for p in pts if p["dtype"] in ("bfloat16", "float16") and p["cout"] >= WIDE_COUT]
    one = [p for p in wide if patchify_waves(p["m"], p["cout"], sms) == 1]
    if len({p["k"] for p in one}) >= 2:
        a, b = _rel_lstsq([[1.0] * len(one), [float(p["k"] ** 2) for p in one]], [p["us"] for p in one])
        more = [(p["us"] / (a + b * p["k"] ** 2) - 1) / (w - 1) for p in wide
                for w in [patchify_waves(p["m"], p["cout"], sms)] if w > 1]
        figs.update(patchify_wave_us_16bit=float(a), patchify_wave_tap_ns_16bit=float(b) * 1e3)
        if more:
            figs["patchify_next_wave_16bit"] = statistics.median(more)
    narrow = [p for p in pts if p["dtype"] in ("bfloat16", "float16") and p["cout"] < WIDE_COUT and p["k"] <= 16]
    if narrow:
        floor = statistics.median(p["us"] / p["k"] ** 2 for p in narrow if p["N"] == 1) * 1e3
        busy = [p for p in narrow if p["us"] > 1.5 * floor * p["k"] ** 2 * 1e-3]
        if busy:
            rate = statistics.median(p["us"] / (p["m"] * p["cout"] * p["k"] ** 2) for p in busy) * 1e6
            figs.update(patchify_narrow_tap_ns_16bit=floor, patchify_narrow_ps_16bit=rate)
    full = [p for p in pts if p["dtype"] == "float32"]
    if len({p["k"] for p in full}) >= 2:
        a, b = _rel_lstsq([[float(p["k"] ** 2) for p in full], [p["flops"] for p in full]], [p["us"] for p in full])
        if b > 0:
            figs.update(patchify_tap_ns=float(a) * 1e3, patchify_tflops=1e-6 / float(b))
    return figs


def predict(p: dict, figs: dict, sms: int) -> float | None:
    spec = SimpleNamespace(sm_count=sms, **{f: figs.get(f) for f in FIGURES})
    g = int(round(math.sqrt(p["m"] / p["N"])))
    c = {"N": p["N"], "Cin": 3, "Cout": p["cout"], "H": g * p["k"], "W": g * p["k"], "kh": p["k"], "kw": p["k"],
         "groups": 1, "Ho": g, "Wo": g, "layout": "nchw", "dtype": p["dtype"]}
    return patchify_us(c, spec)


def errors(pts: list[dict], figs: dict, sms: int) -> list[float]:
    return [(v / p["us"] - 1) * 100 for p in pts for v in [predict(p, figs, sms)] if v]


def _cell(e: list[float]) -> str:
    a = [abs(x) for x in e]
    return f"{statistics.median(a):.1f}% median, p90 {float(np.percentile(a, 90)):.1f}% ({len(a)})" if a else "-"


def main(argv=None) -> int:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(prog="python3 -m validation.fit.fit_patchify")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--write", action="store_true", help="put the figures into the GPU's calibrated spec")
    a = ap.parse_args(argv)
    path = os.path.join(root, "validation", "results", a.gpu, "vit_patchify.jsonl")
    if not os.path.exists(path):
        print(f"no {path}", file=sys.stderr)
        return 2
    env, pts = points(path, "vit_patchify")
    pts = [p for p in pts if in_law(p)]
    spec = load_spec(calibrated_name(a.gpu))
    sms = spec.sm_count
    figs = fit(pts, sms)
    print(", ".join(f"{k} = {v:.4g}" for k, v in figs.items()))
    summary = []
    for label, sel in (("16-bit wide", [p for p in pts if p["dtype"] != "float32" and p["cout"] >= WIDE_COUT]),
                       ("16-bit narrow", [p for p in pts if p["dtype"] != "float32" and p["cout"] < WIDE_COUT]),
                       ("fp32", [p for p in pts if p["dtype"] == "float32"])):
        loo = []
        for k in {p["k"] for p in sel}:       # leave one patch size out: fit without it, predict it
            loo += errors([p for p in sel if p["k"] == k], fit([p for p in pts if p["k"] != k], sms), sms)
        summary.append(f"{label}: in-sample {_cell(errors(sel, figs, sms))}, leave-one-patch-size-out {_cell(loo)}")
    for g in ("h100", "h200"):              # the dispatch sweeps' 16x16 / 768 points, not fitted
        d = os.path.join(root, "validation", "sweeps", f"{g}.json")
        if os.path.exists(d):
            summary.append(f"{g} dispatch sweep patch16 points: {_cell(errors(points(d, 'dispatch')[1], figs, sms))}")
    print("\n".join(summary))
    ref = (f"{env.get('gpu_name', a.gpu)}, {env.get('utc') or 'dated in the sweep'}, python3 -m validation.measure."
           f"vit_patchify -> {os.path.relpath(path, root)}; fitted by python3 -m validation.fit.fit_patchify --gpu {a.gpu} "
           f"({'; '.join(summary)})")
    emit_measured(spec.path, FIGURES, figs, ref, ".4f", a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
