"""fp32 attention's memory-efficient kernel by waves of key blocks (gpusim.cost.vit_kernels; issue 35), fitted
on the dispatch sweep's fp32 ``sdpa`` points (validation/sweeps/<gpu>.json, ``python3 -m validation.measure.microbench``:
six shapes, B 1-32, heads 6-32, S 16-1024, head dim 64-128, each without a mask, with a float, padded-float and
bool mask, and causal).

- ``attention_fp32_ctas_per_sm``: the CTAs an SM runs at once, the one of 1-4 whose waves make the unmasked
  points' time per (wave x key block) most alike (least relative spread);
- ``attention_fp32_block_us`` / ``_wide``: the median time per wave and key block of the unmasked points with
  head dim <= 64 (keys in blocks of 64) / above (blocks of 128);
- ``attention_fp32_mask_factor``: the median ratio of a masked point's kernel (float, padded float, bool: the
  mask reaches the kernel as an fp32 bias) to the same shape's unmasked one.

Causal points and those under one key block are not fitted (the law leaves such calls to the FLOP law). Printed: the figures, each point's
error and the leave-one-shape-out error (each shape predicted from figures fitted without it).

    python3 -m validation.fit.fit_attention_fp32 [--gpu h200] [--write]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

from gpusim.cost.vit_kernels import KEY_TILE, QUERY_TILE
from gpusim.hw.spec import calibrated_name, load_spec
from validation.fit.fit_triton import emit_measured

FIGURES = ("attention_fp32_block_us", "attention_fp32_block_us_wide", "attention_fp32_ctas_per_sm",
           "attention_fp32_mask_factor")
MASKS = ("float", "float_pad", "bool")


def points(sweep: dict) -> list[dict]:
    """The fp32 sdpa points' shapes, mask and memory-efficient kernel time."""
    out = []
    for p in sweep["sweeps"]["sdpa"]:
        ks = [k for k in p.get("kernels") or [] if "fmha_cutlassF_f32" in k["name"]]
        if p.get("dtype") != "float32" or not ks:
            continue
        out.append({"bh": p["B"] * p["H"], "S": p["S"], "D": p["D"], "mask": p["mask"], "us": ks[0]["us"],
                    "shape": (p["B"], p["H"], p["S"], p["D"])})
    return out


def units(p: dict, sms: int, per_sm: int) -> int:
    """Waves x key blocks of a point."""
    wide = p["D"] > 64
    return math.ceil(p["bh"] * math.ceil(p["S"] / QUERY_TILE) / (sms * per_sm)) * math.ceil(p["S"] / KEY_TILE[wide])


def fit(pts: list[dict], sms: int) -> dict:
    plain = [p for p in pts if p["mask"] == "none"]

    def spread(per_sm):
        errs = []
        for wide in (False, True):
            r = [p["us"] / units(p, sms, per_sm) for p in plain if (p["D"] > 64) == wide]
            if r:
                m = statistics.median(r)
                errs += [abs(x / m - 1) for x in r]
        return statistics.mean(errs)
    per_sm = min((1, 2, 3, 4), key=spread)
    figs = {"attention_fp32_ctas_per_sm": float(per_sm)}
    for wide, name in ((False, "attention_fp32_block_us"), (True, "attention_fp32_block_us_wide")):
        r = [p["us"] / units(p, sms, per_sm) for p in plain if (p["D"] > 64) == wide]
        if r:
            figs[name] = statistics.median(r)
    base = {p["shape"]: p["us"] for p in plain}
    ratios = [p["us"] / base[p["shape"]] for p in pts if p["mask"] in MASKS and p["shape"] in base]
    if ratios:
        figs["attention_fp32_mask_factor"] = statistics.median(ratios)
    return figs


def predict(p: dict, figs: dict, sms: int) -> float | None:
    blk = figs.get("attention_fp32_block_us_wide" if p["D"] > 64 else "attention_fp32_block_us")
    if not blk:
        return None
    mask = figs.get("attention_fp32_mask_factor", 1.0) if p["mask"] in MASKS else 1.0
    return units(p, sms, int(figs["attention_fp32_ctas_per_sm"])) * blk * mask


def main(argv=None) -> int:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(prog="python3 -m validation.fit.fit_attention_fp32")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--write", action="store_true", help="put the figures into the GPU's calibrated spec")
    a = ap.parse_args(argv)
    path = os.path.join(root, "validation", "sweeps", f"{a.gpu}.json")
    sweep = json.load(open(path))
    spec = load_spec(calibrated_name(a.gpu))
    # the law's domain: not causal, at least one whole key block (gpusim.cost.vit_kernels)
    pts = [p for p in points(sweep) if p["mask"] != "causal" and p["S"] >= KEY_TILE[p["D"] > 64]]
    figs = fit(pts, spec.sm_count)
    print(", ".join(f"{k} = {v:.4g}" for k, v in figs.items()))
    errs, loo = [], []
    for p in pts:
        e = (predict(p, figs, spec.sm_count) / p["us"] - 1) * 100
        rest = fit([q for q in pts if q["shape"] != p["shape"]], spec.sm_count)
        pl = predict(p, rest, spec.sm_count)
        errs.append(e)
        if pl:
            loo.append((pl / p["us"] - 1) * 100)
        print(f"  B x H {p['bh']:4d} S {p['S']:5d} D {p['D']:4d} {p['mask']:9s} {p['us']:7.1f} us  err {e:+6.1f}%"
              + (f"  leave-shape-out {loo[-1]:+6.1f}%" if pl else "  leave-shape-out -"))
    print(f"in-sample median |err| {statistics.median(abs(e) for e in errs):.1f}%, leave-one-shape-out "
          f"{statistics.median(abs(e) for e in loo):.1f}% ({len(loo)} points)")
    env = sweep.get("env") or {}
    ref = (f"{env.get('gpu_name', env.get('gpu', a.gpu))}, {env.get('utc') or env.get('date') or 'dated in the sweep'}, "
           f"{os.path.relpath(path, root)} (fp32 sdpa points); fitted by python3 -m validation.fit.fit_attention_fp32 "
           f"--gpu {a.gpu} ({len(pts)} points, leave-one-shape-out {statistics.median(abs(e) for e in loo):.1f}% median)")
    emit_measured(spec.path, FIGURES, figs, ref, ".4f", a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
