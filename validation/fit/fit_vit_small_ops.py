"""ViT blocks' small memory-bound ATen kernels, fitted on the vit_small_ops sweep
(``validation.measure.vit_small_ops``; issue 35). Three laws, each a line through two or more
sweep points, each kept to the sweep's domain (gpusim.cost.small_ops):

- the gather ``table[index]`` (BEiT's relative-position bias): ATen runs
  ``vectorized_gather_kernel`` when a gathered row is a multiple of 16 bytes and
  ``index_elementwise_kernel`` otherwise. The vectorized one costs ``gather_vec_us`` plus
  ``gather_vec_index_ns`` per index (one row each, whatever its width); the elementwise one costs
  ``gather_elem_us`` plus ``gather_elem_ps`` per element written.
- layer-scale ``gamma * x``, a (C,) vector broadcast over (B, S, C) (ATen's non-vectorised
  ``elementwise_kernel<128,4>``): ``bcast_mul_us[_16bit]`` plus ``bcast_mul_ps[_16bit]`` per
  output element.
- the layer norm's floor by row width: ``layer_norm_floor_us[_16bit]`` plus
  ``layer_norm_floor_ch_ns`` per channel (fitted on the sweep's norms of up to 257 rows, where
  the floor holds; the per-row law above it is unchanged).

Each is least squares on the points it names; printed: the figures and each point's error.

    python3 -m validation.fit.fit_vit_small_ops [--gpu h200] [--sweep F] [--write]

``--write`` puts the figures, with the sweep's provenance, into the GPU's calibrated spec.
"""

from __future__ import annotations

import json
import os
import sys

from gpusim.hw.spec import calibrated_name, load_spec
from validation.fit.fit_triton import emit_measured, spec_fit_args

GATHER = ("gather_vec_us", "gather_vec_index_ns", "gather_elem_us", "gather_elem_ps")
BCAST = ("bcast_mul_us", "bcast_mul_ps", "bcast_mul_us_16bit", "bcast_mul_ps_16bit")
NORM = ("layer_norm_floor_us", "layer_norm_floor_us_16bit", "layer_norm_floor_ch_ns")
FIGURES = GATHER + BCAST + NORM
#: the layer norms the floor is fitted on: up to this many rows (past it the per-row law rules)
FLOOR_ROWS = 257


def read(path: str) -> tuple[dict, list[dict]]:
    env, rows = {}, []
    for line in open(path):
        r = json.loads(line)
        if r.get("kind") == "environment":
            env = r
        elif r.get("kind") == "vit_small_ops" and "failed" not in r and r.get("kernels"):
            rows.append(r)
    return env, rows


def line_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) by least squares."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def fit(rows: list[dict]) -> tuple[dict, list[str]]:
    figs, lines = {}, []

    def one(name_a, name_b, pts, scale, what):
        unit = "ns" if scale == 1e3 else "ps"
        a, b = line_fit([p[0] for p in pts], [p[1] for p in pts])
        figs[name_a], figs[name_b] = a, b * scale
        errs = [((a + b * x) / y - 1) * 100 for x, y in pts]
        lines.append(f"{what}: {a:.3f} us + {b * scale:.4f} {unit} x n on {len(pts)} points; "
                     f"err {', '.join(f'{e:+.1f}' for e in errs)}")

    vec, elem = [], []
    for r in rows:
        if r["op"] != "gather":
            continue
        k = r["kernels"][0]
        n = r["S"] * r["S"]
        if "vectorized_gather" in k["name"]:
            vec.append((float(n), k["us"]))
        elif "index_elementwise" in k["name"]:
            elem.append((float(n * r["H"]), k["us"]))
    one("gather_vec_us", "gather_vec_index_ns", vec, 1e3, "vectorized_gather (per index)")
    one("gather_elem_us", "gather_elem_ps", elem, 1e6, "index_elementwise (per element)")
    for dt, sfx in (("float32", ""), ("bfloat16", "_16bit")):
        pts = [(float(r["B"] * r["S"] * r["C"]), r["kernels"][0]["us"]) for r in rows
               if r["op"] == "layer_scale" and r["dtype"] == dt and r["S"] * r["B"] > 1
               and r["kernels"][0]["name"].startswith("void at::native::elementwise_kernel")]
        one(f"bcast_mul_us{sfx}", f"bcast_mul_ps{sfx}", pts, 1e6, f"layer-scale broadcast multiply, {dt} (per element)")
    # the norm's floor: intercept per dtype, one slope over channels (both dtypes' points)
    norm = [r for r in rows if r["op"] == "layer_norm" and r["B"] * r["S"] <= FLOOR_ROWS]
    mean = {dt: sum(r["kernels"][0]["us"] for r in norm if r["dtype"] == dt) / sum(r["dtype"] == dt for r in norm)
            for dt in ("float32", "bfloat16")}
    mc = {dt: sum(r["C"] for r in norm if r["dtype"] == dt) / sum(r["dtype"] == dt for r in norm) for dt in mean}
    sxy = sum((r["C"] - mc[r["dtype"]]) * (r["kernels"][0]["us"] - mean[r["dtype"]]) for r in norm)
    slope = sxy / sum((r["C"] - mc[r["dtype"]]) ** 2 for r in norm)
    figs["layer_norm_floor_ch_ns"] = slope * 1e3
    figs["layer_norm_floor_us"] = mean["float32"] - slope * mc["float32"]
    figs["layer_norm_floor_us_16bit"] = mean["bfloat16"] - slope * mc["bfloat16"]
    errs = [((figs["layer_norm_floor_us" + ("_16bit" if r["dtype"] == "bfloat16" else "")] + slope * r["C"])
             / r["kernels"][0]["us"] - 1) * 100 for r in norm]
    lines.append(f"layer norm floor (<= {FLOOR_ROWS} rows): fp32 {figs['layer_norm_floor_us']:.3f} us, 16-bit "
                 f"{figs['layer_norm_floor_us_16bit']:.3f} us + {slope * 1e3:.4f} ns per channel on {len(norm)} points; "
                 f"err {', '.join(f'{e:+.1f}' for e in errs)}")
    return figs, lines


def main(argv=None) -> int:
    a, path = spec_fit_args("fit_vit_small_ops", "vit_small_ops", argv)
    if path is None:
        return 2
    env, rows = read(path)
    figs, lines = fit(rows)
    print("\n".join(lines))
    spec = load_spec(calibrated_name(a.gpu))
    ref = (f"{env.get('gpu_name', a.gpu)}, {env.get('utc') or 'dated in validation/results/README.md'}, python3 -m validation.measure.vit_small_ops --out F "
           f"--budget-s 110 -> {os.path.relpath(path)}; fitted by python3 -m validation.fit.fit_vit_small_ops "
           f"--gpu {a.gpu} ({len(rows)} points)")
    emit_measured(spec.path, FIGURES, figs, ref, ".4f", a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
