"""A decode step's eager ATen classes at 1-128 rows, fitted on the decode_classes sweep
(:mod:`validation.measure.decode_classes`), never on the generate records they are checked against
(validation/score/decode_kernels.py, validation/score/generate_accuracy.py's decode-host table):

* ``aten_cat_append_us``, ``aten_cat_append_efficiency``: DynamicCache's appending cat (``CatArrayBatchedCopy_vectorized``),
  the cache cold (``state: cold``): least squares of the kernel's time on its bytes read and written; the rate as a
  fraction of ``mem_efficiency x bandwidth`` (:func:`gpusim.cost.few_rows.append_cat_us`);
* ``aten_strided_lane_us``, ``aten_strided_elem_us``, ``aten_strided_grid_us``: ATen's non-vectorised 16-bit
  elementwise kernel (``elementwise_kernel<128, 4>``: rotary embedding's multiplies and negation, RMSNorm's weight
  multiply) of at most 65536
  elements, least squares on the elements a thread computes (``min(4, ceil(n / 128))``) and log2 of the blocks
  (:func:`gpusim.cost.few_rows.strided_floor_us`);
* ``aten_cat_strided_min_us``: ``CatArrayBatchedCopy`` over the strided halves of ``rotate_half``, the median of the
  rotary cats of at most 8192 elements;
* ``aten_cast_min_us``: the upcast's ``unrolled_elementwise_kernel<direct_copy>``, the median at 1-16 rows;
* ``layer_norm_wide_us``, ``layer_norm_wide_ns``: 16-bit ``F.layer_norm`` over 2048-4096 columns at 1-128 rows, a line
  in the columns (:func:`gpusim.cost.few_rows.layer_norm_wide_floor`).

Lines are least squares weighted by 1 / time (relative error).

Printed besides (no figure): RMSNorm's row ``mean`` against the row walk at ATen's block shape
(:func:`gpusim.cost.roofline.row_walk_share`, ``reduction_col_ns`` of the prefill sweep), and the layer norm.

    python3 -m validation.fit.fit_decode_classes [--gpu h200] [--sweep FILE] [--write]
"""

from __future__ import annotations

import math
import os
import statistics
import sys

from gpusim.hw.schema import DECODE_CLASS_FIGURES
from gpusim.hw.spec import calibrated_name, load_spec
from validation.fit.fit_triton import emit_measured, read_sweep, spec_fit_args

ONE_BLOCK = 512
SMALL_CAT = 4096
CAST_ROWS = 16


def _legacy(name: str) -> bool:
    n = name.replace("void ", "").replace("at::native::", "")
    return n.startswith("elementwise_kernel<128, 4,")


def _lstsq(cols: list[list[float]], ys: list[float], relative: bool = True) -> list[float]:
    """Least-squares coefficients of ``ys`` on the columns (a constant first); ``relative``: each point weighted by
    1 / y, so a line through 1-280 us points fits the small ones as closely as the large."""
    import numpy as np
    a, y = np.array(cols, dtype=float), np.array(ys, dtype=float)
    w = 1.0 / y if relative else np.ones_like(y)
    return [float(c) for c in np.linalg.lstsq(a * w[:, None], y * w, rcond=None)[0]]


def _errs(pred: list[float], ys: list[float]) -> str:
    e = sorted(abs(p / y - 1) * 100 for p, y in zip(pred, ys))
    return f"median |error| {statistics.median(e):.1f}%, max {e[-1]:.1f}%"


def append_points(rows: list[dict]) -> list[tuple[dict, float, float]]:
    """(point, bytes read + written, µs) of the cold appending cats."""
    out = []
    for r in rows:
        if r["case"] != "kv_cat" or r["state"] != "cold":
            continue
        ks = [k for k in r["kernels"] if "CatArrayBatchedCopy" in k["name"]]
        if ks:
            cache = r["B"] * r["Hk"] * r["S"] * r["D"] * 2
            out.append((r, 2.0 * cache + 2.0 * r["B"] * r["Hk"] * r["D"] * 2, ks[-1]["us"]))
    return out


def strided_points(rows: list[dict]) -> list[tuple[dict, int, float]]:
    """(point, elements, µs) of the non-vectorised 16-bit kernels: the rotary points' (``neg`` of a half: half the
    elements) and RMSNorm's weight multiply (a (cols,) weight broadcast over 2 rows and more)."""
    out = []
    for r in rows:
        if r["case"] == "rope":
            n = r["B"] * r["H"] * r["D"]
            out += [(r, n // 2 if "neg" in k["name"] else n, k["us"]) for k in r["kernels"] if _legacy(k["name"])]
        elif r["case"] == "rmsnorm":
            out += [(r, r["rows"] * r["cols"], k["us"]) for k in r["kernels"] if _legacy(k["name"])]
    return out


def strided_columns(n: int) -> list[float]:
    """The strided law's terms (:func:`gpusim.cost.few_rows.strided_floor_us`): 1, elements a thread, log2 blocks."""
    return [1.0, float(min(4, -(-n // 128))), math.log2(max(1.0, n / 512))]


def cat_points(rows: list[dict]) -> list[tuple[dict, int, float]]:
    return [(r, r["B"] * r["H"] * r["D"], k["us"]) for r in rows if r["case"] == "rope"
            for k in r["kernels"] if "CatArrayBatchedCopy" in k["name"]]


def cast_points(rows: list[dict]) -> list[tuple[dict, float]]:
    return [(r, k["us"]) for r in rows if r["case"] == "rmsnorm" for k in r["kernels"]
            if "unrolled_elementwise_kernel" in k["name"] and "direct_copy" in k["name"]]


def fit(rows: list[dict], spec) -> tuple[dict, list[str]]:
    from gpusim.cost.few_rows import CAT_FLOOR_MAX_ELEMENTS, LAYER_NORM_COLS, LAYER_NORM_MAX_ROWS, LEGACY_MAX_ELEMENTS
    from gpusim.cost.roofline import row_walk_share
    figs, lines = {}, []
    ap = append_points(rows)
    if len(ap) >= 3:
        a, b = _lstsq([[1.0, p[1]] for p in ap], [p[2] for p in ap])
        figs["aten_cat_append_us"] = a
        figs["aten_cat_append_efficiency"] = 1.0 / (b * 1e-6 * spec.mem_efficiency * spec.bandwidth)
        lines.append(f"appending cat (cold): {len(ap)} points, {a:.3f} us + bytes at "
                     f"{figs['aten_cat_append_efficiency']:.4f} of a copy ({1e-6 / b:.2f} TB/s); "
                     + _errs([a + b * p[1] for p in ap], [p[2] for p in ap]))
        for r, nb, us in ap:
            lines.append(f"  B {r['B']:2d} Hk {r['Hk']:2d} D {r['D']:3d} S {r['S']:4d} {nb / 1e6:8.2f} MB: {us:7.2f} us "
                         f"(line {a + b * nb:7.2f})")
        warm = {(r["B"], r["Hk"], r["D"], r["S"]): k["us"] for r in rows if r["case"] == "kv_cat" and r["state"] == "warm"
                for k in r["kernels"][-1:]}
        lines.append("  warm / cold: " + ", ".join(f"{warm[(r['B'], r['Hk'], r['D'], r['S'])] / us:.2f}" for r, _, us in ap
                                                   if (r["B"], r["Hk"], r["D"], r["S"]) in warm))
    sp = [p for p in strided_points(rows) if p[1] <= LEGACY_MAX_ELEMENTS]
    if len(sp) >= 3:
        c = _lstsq([strided_columns(n) for _, n, _ in sp], [us for _, _, us in sp])
        figs["aten_strided_lane_us"], figs["aten_strided_elem_us"], figs["aten_strided_grid_us"] = c
        pred = [min(spec.aten_strided_min_us or 9e9, sum(x * y for x, y in zip(c, strided_columns(n)))) for _, n, _ in sp]
        lines.append(f"non-vectorised elementwise, <= {LEGACY_MAX_ELEMENTS} elements: {len(sp)} kernels, {c[0]:.3f} us + "
                     f"{c[1]:.3f} us per element a thread + {c[2]:.3f} us per doubling of blocks; "
                     + _errs(pred, [us for _, _, us in sp]))
        lines.append("  " + ", ".join(f"{n}:{us:.2f}/{p:.2f}" for (_, n, us), p in sorted(zip(sp, pred), key=lambda q: q[0][1])))
    cp = [p for p in cat_points(rows) if p[1] <= CAT_FLOOR_MAX_ELEMENTS]
    if cp:
        figs["aten_cat_strided_min_us"] = statistics.median(us for _, _, us in cp)
        lines.append(f"rotary cat <= {CAT_FLOOR_MAX_ELEMENTS} elements: {len(cp)} kernels, median "
                     f"{figs['aten_cat_strided_min_us']:.3f} us; all: "
                     + ", ".join(f"{n}:{us:.2f}" for _, n, us in sorted(cat_points(rows), key=lambda p: p[1])))
    cs = [us for r, us in cast_points(rows) if r["rows"] <= CAST_ROWS]
    if cs:
        figs["aten_cast_min_us"] = statistics.median(cs)
        lines.append(f"upcast (unrolled direct_copy) at <= {CAST_ROWS} rows: {len(cs)} kernels, median {figs['aten_cast_min_us']:.3f} "
                     f"us; all: " + ", ".join(f"{r['rows']}x{r['cols']}:{us:.2f}" for r, us in cast_points(rows)))
    ln = [(r, k["us"]) for r in rows if r["case"] == "layernorm" for k in r["kernels"] if "layer_norm" in k["name"]
          and LAYER_NORM_COLS[0] < r["cols"] <= LAYER_NORM_COLS[1] and r["rows"] <= LAYER_NORM_MAX_ROWS]
    if len(ln) >= 3:
        a, b = _lstsq([[1.0, r["cols"]] for r, _ in ln], [us for _, us in ln])
        figs["layer_norm_wide_us"], figs["layer_norm_wide_ns"] = a, b * 1e3
        lines.append(f"layer norm, {len(ln)} points: {a:.3f} us + {b * 1e3:.3f} ns per column; "
                     + _errs([a + b * r["cols"] for r, _ in ln], [us for _, us in ln]) + "; "
                     + ", ".join(f"{r['rows']}x{r['cols']}:{us:.2f}" for r, us in ln))
    if spec.reduction_col_ns:
        lines.append("RMSNorm mean: rows x cols: measured / row walk at ATen's block shape (no figure fitted)")
        walk = []
        for r in rows:
            for k in r["kernels"] if r["case"] == "rmsnorm" else ():
                if "reduce_kernel" in k["name"]:
                    w = r["cols"] * spec.reduction_col_ns * 1e-3 * row_walk_share(r["rows"], r["cols"])
                    walk.append((r, k["us"], max(spec.reduction_min_us or 0.0, spec.kernel_fixed_us + w)))
        lines.append("  " + _errs([p for _, _, p in walk], [m for _, m, _ in walk]) + "; "
                     + ", ".join(f"{r['rows']}x{r['cols']}:{m:.2f}/{p:.2f}" for r, m, p in walk))
    return figs, lines


def main(argv=None) -> int:
    a, path = spec_fit_args("fit_decode_classes", "decode_classes", argv)
    if path is None:
        return 2
    env, rows = read_sweep(path, "decode_class")
    spec = load_spec(calibrated_name(a.gpu))
    figs, lines = fit(rows, spec)
    print("\n".join(lines))
    ref = (f"{env.get('gpu') or env.get('gpu_name') or a.gpu}, {(env.get('utc') or env.get('date') or '')[:10]}, python3 -m "
           f"validation.measure.decode_classes -> {os.path.relpath(path)}; fitted by python3 -m "
           f"validation.fit.fit_decode_classes --gpu {a.gpu}")
    emit_measured(spec.path, DECODE_CLASS_FIGURES, figs, ref, ".4f", a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
