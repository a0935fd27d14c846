"""Fit the cross-generation rules' constants on the green-context sweeps and write them,
with provenance, to ``hwspecs/arch/rules.toml``.

    python3 -m validation.fit.fit_sm_scaling [--check]

Input: ``validation/sweeps/{h100,h200}-sm-scaling.json`` (``python3 -m validation.measure.sm_scaling``:
each kernel class timed on 8 to 132 of the GPU's SMs, the whole memory system behind them).

* **Bandwidth-SM rule** (:data:`gpusim.hw.arch.BANDWIDTH_LATENCY_RULE`): a memory-bound class on
  ``n`` SMs reaches ``A = ((e B)^-p + (n f k)^-p)^(-1/p)``, ``B`` the calibrated stream
  (``mem_efficiency`` x datasheet bandwidth), ``f`` the clock, ``k`` the class's bytes per
  SM-cycle and ``e`` its access pattern's share of the stream, taken as 1 (a datasheet GPU's
  class is derived from one full-GPU fraction per calibrated GPU: one unknown, ``k``). The
  exponent ``p`` is shared by every class: it is the one figure that decides how a class
  fitted on one GPU moves to a GPU with another balance of SMs to bandwidth. Fitted on both
  GPUs' curves (``k`` per class and GPU, ``p`` shared, on a 0.25 grid), and scored fitted on
  one GPU's curve and predicting the other's (1.43x the bandwidth, the same SMs), against
  the series law (``p = 1``) the rule used before.
* **Tensor-load rule** (:data:`gpusim.hw.arch.TENSOR_LOAD_RULE`): a large tensor-core GEMM
  reaches ``e0`` of the peak of the SMs it runs on when few SMs are busy, and less as the
  whole GPU's tensor rate ``R`` grows (the curves fall from 0.95 on 8 SMs to 0.77 on 132,
  the same on both GPUs: not DRAM, which the H200 has 1.43x of): ``1/e = 1/e0 + R/C``.
  Fitted on the bf16 8192^3 GEMM, the cleanest compute-bound point, on both GPUs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tomllib

import numpy as np
from scipy.optimize import least_squares

from gpusim.hw.spec import load_spec
from gpusim.hw.spec_io import figure_line
from gpusim.hw.schema import builtin_dir

GPUS = {"h100": "h100-sxm-calibrated", "h200": "h200-sxm-calibrated"}
#: classes whose figure of merit is bytes per second (the rest are FLOP-bound)
COMPUTE = {"gemm", "gemm_simt", "conv", "depthwise_aten", "depthwise_16bit"}
TENSOR_POINT = "gemm_bf16_8192"
#: the exponent the derivation uses: the series law, not (yet) the fitted one, and why
ADOPTED_EXPONENT = 1.0
ADOPTED_REF = ("the series law (p = 1), kept although the green-context curves fit p = "
               "fitted_exponent better: derived with the fitted exponent, the datasheet H100 "
               "and H200 specs (each from the other's calibration) predict the measured zoo and "
               "broad sample worse (zoo eager device time of the H100 13.0% -> 13.3% median, "
               "28.2% -> 29.9% p90; broad sample p90 25.2% -> 27.5%; measured 2026-11-25), "
               "because the classes the rule derives move toward the calibrated GPU's own "
               "figures while errors elsewhere (small CNNs predicted 20-55% fast by the "
               "calibrated spec too) no longer cancel; it also took the RTX 3090's published "
               "rows from 17% to 10% (validation only, not a fit). Rechecked 2026-11-27 after "
               "the small-CNN depthwise laws and the eval batch-norm law: still worse on this "
               "project's own measurements (broad sample, datasheet H100, 7.4% / 20.8% -> "
               "9.2% / 23.5%, past its guard; zoo datasheet H100 10.2% -> 11.9% median, H200 "
               "13.6% -> 12.3%; leave one GPU out H100 7.6% -> 7.9%, H200 7.9% -> 7.6%); the "
               "published rows, validation only: RTX 3090 13.4% -> 9.6%, RTX 4090 13.6% -> "
               "8.5%, A100 9.4% -> 10.4%, V100 7.5% -> 11.4%, T4 11.7% -> 14.4%")
CMD = "python3 -m validation.measure.sm_scaling --out validation/sweeps/{g}-sm-scaling.json"


def sweeps() -> dict:
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "sweeps"
    return {g: json.loads((root / f"{g}-sm-scaling.json").read_text()) for g in GPUS}


def curve(doc, name, per="bytes"):
    p = next(q for q in doc["points"] if q["name"] == name)
    xs, ys = [], []
    for r in doc["runs"]:
        x = r["results"].get(name, {})
        if "us" in x:
            xs.append(r["sms"])
            ys.append(p[per] / (x["us"] * 1e-6))
    return np.array(xs, float), np.array(ys)


def law(n, f, k, e_b, p):
    return (e_b ** -p + (n * f * k) ** -p) ** (-1.0 / p)


def _stream(spec):
    return spec.mem_efficiency * spec.bandwidth_gbs * 1e9, spec.boost_clock_mhz * 1e6


def fit_class(doc, spec, name, p) -> float:
    """The class's k on ``doc``'s curve (e = 1)."""
    n, y = curve(doc, name)
    b, f = _stream(spec)
    r = least_squares(lambda t: np.log(law(n, f, t[0], b, p) / y), [10.0], bounds=([0.1], [1e4]))
    return float(r.x[0])


def memory_classes(doc):
    return [q["name"] for q in doc["points"] if q["class"] not in COMPUTE
            and len(curve(doc, q["name"])[0]) >= 6]


def transfer_error(docs, specs, src, dst, p) -> float:
    """Median over classes of the median |error| on ``dst``'s curve, fitted on ``src``'s."""
    errs = []
    for name in memory_classes(docs[src]):
        k = fit_class(docs[src], specs[src], name, p)
        n, y = curve(docs[dst], name)
        if len(n) < 6:
            continue
        b, f = _stream(specs[dst])
        errs.append(float(np.median(np.abs(law(n, f, k, b, p) / y - 1))))
    return statistics.median(errs) * 100


def fit_exponent(docs, specs) -> float:
    """The shared p that fits both GPUs' memory-class curves best (median log error)."""
    grid = np.round(np.arange(1.0, 4.01, 0.25), 2)

    def cost(p):
        errs = []
        for g in docs:
            for name in memory_classes(docs[g]):
                k = fit_class(docs[g], specs[g], name, p)
                n, y = curve(docs[g], name)
                b, f = _stream(specs[g])
                errs.append(float(np.median(np.abs(np.log(law(n, f, k, b, p) / y)))))
        return statistics.median(errs)
    return float(min(grid, key=cost))


def fit_tensor_load(docs):
    """(e0, C TFLOP/s) of ``1/e = 1/e0 + R/C`` over both GPUs' bf16 GEMM curves."""
    rs, es = [], []
    for g, doc in docs.items():
        peak = load_spec(GPUS[g]).peak_tflops["bf16_tc"]
        n, t = curve(doc, TENSOR_POINT, per="flops")
        full = max(r["sms"] for r in doc["runs"])
        r = peak * n / full
        rs += list(r)
        es += list(t / 1e12 / r)
    rs, es = np.array(rs), np.array(es)
    sol = least_squares(lambda x: 1 / x[0] + rs / x[1] - 1 / es, [0.95, 4000.0],
                        bounds=([0.5, 100.0], [1.0, 1e6]))
    e0, c = sol.x
    err = np.abs(1 / (1 / e0 + rs / c) / es - 1)
    return float(e0), float(c), float(np.median(err) * 100), float(err.max() * 100)


def rules_text() -> str:
    docs = sweeps()
    specs = {g: load_spec(s) for g, s in GPUS.items()}
    p = fit_exponent(docs, specs)
    e_p = [transfer_error(docs, specs, "h100", "h200", p), transfer_error(docs, specs, "h200", "h100", p)]
    e_1 = [transfer_error(docs, specs, "h100", "h200", 1.0), transfer_error(docs, specs, "h200", "h100", 1.0)]
    e0, c, med, mx = fit_tensor_load(docs)
    dates = {g: d["env"].get("utc", "")[:10] for g, d in docs.items()}
    src = (f"NVIDIA H100 80GB HBM3 ({dates['h100']}) and NVIDIA H200 ({dates['h200']}), CUDA "
           f"green contexts of 8-132 SMs, {CMD.format(g='{h100,h200}')}; fitted by "
           f"python3 -m validation.fit.fit_sm_scaling")
    ref_p = (f"{src}: the shared exponent that fits both GPUs' {len(memory_classes(docs['h100']))} "
             f"memory-bound class curves best (each class its own k, e = 1); fitted on one GPU, "
             f"the other's curves are off by a median {e_p[0]:.1f}% (H100 -> H200) and "
             f"{e_p[1]:.1f}% (H200 -> H100), against {e_1[0]:.1f}% and {e_1[1]:.1f}% for the "
             f"series law (p = 1)")
    ref_e0 = (f"{src}: {TENSOR_POINT} (nvjet sm90 kernel) on n SMs, 1/e = 1/e0 + R/C with R the "
              f"active SMs' share of the bf16 dense peak; both GPUs' 22 points off by a median "
              f"{med:.1f}% (max {mx:.1f}%, the persistent kernels' partial waves on 112-128 SMs)")
    lines = ["# Constants of the cross-generation rules (gpusim/hw/arch.py), fitted on this project's own",
             "# measurements of kernel classes on a slice of the GPU's SMs (validation/measure/sm_scaling.py).",
             "# Written by python3 -m validation.fit.fit_sm_scaling: do not edit by hand.", "",
             "[bandwidth_sm]", figure_line("fitted_exponent", round(p, 2), "measured", ref_p),
             figure_line("exponent", ADOPTED_EXPONENT, "assumed", ADOPTED_REF), "",
             "[tensor_load]", figure_line("e0", round(e0, 4), "measured", ref_e0),
             figure_line("shared_tflops", round(c, 1), "measured", ref_e0), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.fit.fit_sm_scaling")
    ap.add_argument("--check", action="store_true", help="exit 1 if rules.toml is stale")
    a = ap.parse_args(argv)
    path = builtin_dir() / "arch" / "rules.toml"
    text = rules_text()
    old = path.read_text() if path.exists() else ""
    if a.check:
        print("stale" if text != old else "up to date", file=sys.stderr)
        return 1 if text != old else 0
    path.write_text(text)
    print(text)
    tomllib.loads(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
