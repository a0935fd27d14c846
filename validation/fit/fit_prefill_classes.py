"""The prefill's ATen classes on warm operands, fitted on the prefill_classes sweep
(:mod:`validation.measure.prefill_classes`), never on the prefill records they are checked against
(validation/results/generate/*-prefill.jsonl):

* ``aten_strided_min_us``: the floor of ATen's non-vectorised elementwise kernel on 16-bit outputs
  (``elementwise_kernel<128, 4, ...>``: RMSNorm's bf16 weight multiply, RoPE's multiplies and
  negation of a transposed projection): the median of those kernels in the sweep's smallest cases
  (128 rows);
* ``reduction_col_ns``: a last-dim row reduction's walk per column of one row
  (:func:`gpusim.cost.roofline.row_walk_us`): the median over RMSNorm's ``mean`` kernels at up to
  1,024 rows (where the bytes are a few MB and the walk is the time) of (us - kernel_fixed_us) / cols;
* ``aten_cat_strided_efficiency``: CatArrayBatchedCopy over strided inputs (RoPE's ``rotate_half``
  cat and DynamicCache's cat of the transposed values), bytes read + written over (us -
  kernel_fixed_us), of ``mem_efficiency x bandwidth``, on cats of at least 4 MB.

    python3 -m validation.fit.fit_prefill_classes [--gpu h200] [--sweep FILE] [--write]

Printed: each figure and the points it comes from; ``--write`` puts them, with the sweep's
provenance, into the GPU's calibrated spec."""

from __future__ import annotations

import os
import statistics
import sys

from gpusim.hw.schema import PREFILL_FIGURES
from gpusim.hw.spec import calibrated_name, load_spec
from validation.fit.fit_triton import emit_measured, read_sweep, spec_fit_args

MIN_CAT_BYTES = 4e6
MAX_WALK_ROWS = 1024
MIN_CAUSAL_S = 1024


def read(path: str) -> tuple[dict, list[dict]]:
    """The sweep's environment line and its measured cases (:func:`fit_triton.read_sweep`)."""
    return read_sweep(path, "prefill_class", need=())


def _legacy(name: str) -> bool:
    """ATen's non-vectorised elementwise kernel on 16-bit outputs (unroll 4: ``<128, 4>``); the fp32
    one (``<128, 2>``) is not floored (gpusim.cost.roofline.aten_floor)."""
    n = name.replace("void ", "").replace("at::native::", "")
    return n.startswith("elementwise_kernel<128, 4,")


def strided_floor(rows: list[dict]) -> list[float]:
    """Durations of the non-vectorised elementwise kernels of the smallest RMSNorm and RoPE cases."""
    small = [r for r in rows if r["case"] in ("rmsnorm", "rope") and r["rows"] == min(x["rows"] for x in rows
                                                                                      if "rows" in x)]
    return [k["us"] for r in small for k in r["kernels"] if _legacy(k["name"])]


def walk_points(rows: list[dict], spec) -> list[tuple[int, int, float]]:
    """(rows, cols, ns per column) of RMSNorm's mean kernels at up to MAX_WALK_ROWS rows."""
    out = []
    for r in rows:
        if r["case"] != "rmsnorm" or r["rows"] > MAX_WALK_ROWS:
            continue
        for k in r["kernels"]:
            if "reduce_kernel" in k["name"]:
                out.append((r["rows"], r["cols"], (k["us"] - spec.kernel_fixed_us) / r["cols"] * 1e3))
    return out


def cat_points(rows: list[dict], spec) -> list[tuple[str, int, float, float]]:
    """(case, rows, bytes, fraction of a copy's bandwidth) of the strided cats of at least MIN_CAT_BYTES."""
    out = []
    for r in rows:
        if r["case"] == "rope":
            cats = [k for k in r["kernels"] if "CatArrayBatchedCopy" in k["name"]]
            nbytes = 2.0 * r["rows"] * r["heads"] * r["d"] * 2          # bf16, read + written
        elif r["case"] == "kv_cat":
            cats = [k for k in r["kernels"] if "CatArrayBatchedCopy" in k["name"]][1:]   # the values'
            nbytes = 2.0 * r["rows"] * r["heads"] * r["d"] * 2
        else:
            continue
        if nbytes < MIN_CAT_BYTES:
            continue
        for k in cats:
            rate = nbytes / max(k["us"] - spec.kernel_fixed_us, 1e-3) * 1e6
            out.append((r["case"], r["rows"], nbytes, rate / (spec.mem_efficiency * spec.bandwidth)))
    return out


def causal_points(rows: list[dict], spec) -> list[tuple[int, int, float, float]]:
    """(batch, S, causal / full time past the fixed cost, key tile it implies) of the attention pairs
    at S >= MIN_CAUSAL_S: a kernel that computes (n + 1) / 2n of n key tiles takes r = (n + 1) / 2n
    of the full time, so n = 1 / (2r - 1) and the tile is S / n (None where r >= 1: no skipping)."""
    full = {(r["B"], r["S"]): r["kernel_sum_us"] for r in rows if r["case"] == "sdpa" and not r["causal"]}
    out = []
    for r in rows:
        if r["case"] != "sdpa" or not r["causal"] or r["S"] < MIN_CAUSAL_S or (r["B"], r["S"]) not in full:
            continue
        ratio = (r["kernel_sum_us"] - spec.kernel_fixed_us) / (full[(r["B"], r["S"])] - spec.kernel_fixed_us)
        out.append((r["B"], r["S"], ratio, r["S"] * (2 * ratio - 1) if 0.5 < ratio < 1 else None))
    return out


def fit(rows: list[dict], spec) -> tuple[dict, list[str]]:
    lines, figs = [], {}
    fl = strided_floor(rows)
    if fl:
        figs["aten_strided_min_us"] = statistics.median(fl)
        lines.append(f"non-vectorised elementwise floor: {len(fl)} kernels, median {figs['aten_strided_min_us']:.3f} us "
                     f"(min {min(fl):.3f}, max {max(fl):.3f})")
    wk = walk_points(rows, spec)
    if wk:
        figs["reduction_col_ns"] = statistics.median(p[2] for p in wk)
        lines.append(f"row walk: {len(wk)} mean kernels, median {figs['reduction_col_ns']:.4f} ns per column")
        lines += [f"  rows {r:6d} cols {c:5d}: {ns:.4f} ns/col" for r, c, ns in wk]
    ct = cat_points(rows, spec)
    if ct:
        figs["aten_cat_strided_efficiency"] = statistics.median(p[3] for p in ct)
        lines.append(f"strided cat: {len(ct)} kernels, median {figs['aten_cat_strided_efficiency']:.4f} of a copy")
        lines += [f"  {c:7s} rows {r:6d} {b / 1e6:7.2f} MB: {f:.4f}" for c, r, b, f in ct]
    cz = causal_points(rows, spec)
    tiles = [p[3] for p in cz if p[3]]
    if cz:
        lines.append(f"causal attention: {len(cz)} causal/full pairs at S >= {MIN_CAUSAL_S}")
        lines += [f"  B {b} S {s_:5d}: causal/full {r:.3f}" + (f" -> key tile {t:.0f}" if t else " (no skipping)")
                  for b, s_, r, t in cz]
    if tiles and len(tiles) * 2 > len(cz):         # most pairs skip: the kernel does
        figs["attention_causal_tile"] = statistics.median(tiles)
    return figs, lines


def main(argv=None) -> int:
    a, path = spec_fit_args("fit_prefill_classes", "prefill_classes", argv)
    if path is None:
        return 2
    env, rows = read(path)
    spec = load_spec(calibrated_name(a.gpu))
    figs, lines = fit(rows, spec)
    print("\n".join(lines))
    ref = (f"{env.get('gpu', a.gpu)}, {(env.get('utc') or '')[:10]}, python3 -m validation.measure.prefill_classes "
           f"-> {os.path.relpath(path)}; fitted by python3 -m validation.fit.fit_prefill_classes --gpu {a.gpu}")
    emit_measured(spec.path, PREFILL_FIGURES, figs, ref, ".4f", a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
