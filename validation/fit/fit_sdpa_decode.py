"""The decode-attention law (:mod:`gpusim.cost.decode_attention`), fitted on the sdpa_decode sweep
(``validation.measure.sdpa_decode``: one query row over 640-2048 keys, bf16, cuDNN on Hopper).

Each point is captured as gpusim captures it (meta tensors: the call's unique bytes, its CTAs), and
the law's figures are fitted by least squares on log(predicted / measured) of the attention
kernel: ``attention_decode_us``, ``attention_decode_dim_ns``, ``attention_decode_tbps``, ``attention_decode_key_ns_d{64,128,256}``,
``attention_decode_norm``, ``attention_decode_mask_factor``. The split rule's
``attention_decode_split_ctas`` is the largest CTA count (batch x key heads) at which the sweep
ran ``lean_reduction_kernel`` (printed with the smallest at which it did not: the rule holds only
if that one is larger); the reduction kernel's ``attention_decode_reduce_us`` and
``attention_decode_reduce_ns`` (per head-dim element) are a least-squares line over its times.
Printed: the fit's |error| (median, max) on the attention kernel and on the call (both kernels),
leave-one-head-dim-out, leave-one-length-out and leave-one-batch-out (each group predicted by
figures fitted on the others).

    python3 -m validation.fit.fit_sdpa_decode [--gpu h200] [--write]
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys

import numpy as np
from scipy.optimize import least_squares

from gpusim.capture.tracing import capture
from gpusim.cost.decode_attention import decode_attention_us, reduce_us
from gpusim.hw.schema import DECODE_ATTENTION_FIGURES
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.lower.dispatch import decode_ctas
from validation.fit.fit_triton import emit_measured, read_sweep, spec_fit_args
from validation.measure.sdpa_decode import make

LEAN = "lean_reduction"
#: the fitted figures, their start and bounds
LAW = (("attention_decode_us", 4.0, 0.0, 50.0), ("attention_decode_dim_ns", 10.0, 0.0, 100.0),
       ("attention_decode_tbps", 4.3, 0.5, 20.0),
       ("attention_decode_key_ns_d64", 4.0, 0.1, 300.0), ("attention_decode_key_ns_d128", 7.0, 0.1, 300.0),
       ("attention_decode_key_ns_d256", 30.0, 0.1, 300.0), ("attention_decode_norm", 3.0, 1.0, 20.0),
       ("attention_decode_mask_factor", 1.03, 1.0, 1.5))


def node(row: dict) -> dict:
    """The attention node's attributes of a sweep point, as gpusim captures it."""
    fn, args = make(row, "meta")
    g = capture(fn, args)
    return next(g.g.nodes[n] for n in g.compute_nodes if g.g.nodes[n]["kind"] == "attention")


def points(rows: list[dict]) -> list[dict]:
    """Per point: its node, mask, attention kernel µs and reduction kernel µs (0: none)."""
    out = []
    for r in rows:
        main = sum(k["us"] for k in r["kernels"] if LEAN not in k["name"])
        lean = sum(k["us"] for k in r["kernels"] if LEAN in k["name"])
        out.append({"row": r, "a": node(r), "masked": r["mask"] != "none", "main": main, "lean": lean})
    return out


def law_spec(spec, x) -> object:
    return dataclasses.replace(spec, **{name: float(v) for (name, *_), v in zip(LAW, x)})


def fit_law(pts: list[dict], spec) -> object:
    """The spec with the law's figures fitted on ``pts``."""
    t = np.array([p["main"] for p in pts])

    def res(x):
        s = law_spec(spec, x)
        return np.log([decode_attention_us(p["a"], s, p["masked"]) for p in pts]) - np.log(t)
    x = least_squares(res, [v for _, v, _, _ in LAW], bounds=([lo for *_, lo, _ in LAW], [hi for *_, hi in LAW])).x
    return law_spec(spec, x)


def split_limit(pts: list[dict]) -> tuple[int, int | None]:
    """(largest CTA count that ran the reduction, smallest that did not)."""
    yes = [decode_ctas(p["a"]) for p in pts if p["lean"]]
    no = [decode_ctas(p["a"]) for p in pts if not p["lean"]]
    return max(yes), (min(no) if no else None)


def fit_reduce(pts: list[dict]) -> tuple[float, float]:
    """(µs, ns per head-dim element): least squares over the reduction kernels."""
    d = np.array([p["a"]["sdpa"]["head_dim"] for p in pts if p["lean"]], dtype=float)
    y = np.array([p["lean"] for p in pts if p["lean"]])
    c = np.linalg.lstsq(np.c_[np.ones_like(d), d], y, rcond=None)[0]
    return float(c[0]), float(c[1]) * 1e3


def errors(pts: list[dict], spec, whole: bool = False) -> list[float]:
    """Signed % errors of the attention kernel (``whole``: of both kernels, the reduction where
    the rule says so)."""
    out = []
    for p in pts:
        us = decode_attention_us(p["a"], spec, p["masked"])
        meas = p["main"]
        if whole:
            meas += p["lean"]
            us += (reduce_us(p["a"], spec) or 0.0) if decode_ctas(p["a"]) <= spec.attention_decode_split_ctas else 0.0
        out.append((us / meas - 1) * 100)
    return out


def summary(e: list[float]) -> str:
    return f"|err| median {statistics.median(map(abs, e)):.1f}%, max {max(map(abs, e)):.1f}%"


def held_out(pts: list[dict], spec, key: str) -> list[float]:
    out = []
    for v in sorted({p["row"][key] for p in pts}):
        s = fit_law([p for p in pts if p["row"][key] != v], spec)
        out += errors([p for p in pts if p["row"][key] == v], s)
    return out


def main(argv=None) -> int:
    a, path = spec_fit_args("fit_sdpa_decode", "sdpa_decode", argv)
    if path is None:
        return 2
    env, rows = read_sweep(path, "sdpa_decode")
    base = load_spec(calibrated_name(a.gpu))
    pts = points(rows)
    yes, no = split_limit(pts)
    if no is not None and no <= yes:
        print(f"no CTA threshold separates the reduction kernel: it ran at {yes} CTAs and not at {no}")
        return 1
    r0, r1 = fit_reduce(pts)
    spec = dataclasses.replace(fit_law(pts, base), attention_decode_split_ctas=float(yes),
                               attention_decode_reduce_us=r0, attention_decode_reduce_ns=r1)
    print(f"{len(pts)} points; reduction kernel at <= {yes} CTAs (batch x key heads), none from {no}")
    print(f"attention kernel: {summary(errors(pts, spec))}; call (both kernels): {summary(errors(pts, spec, True))}")
    for key, what in (("D", "head dim"), ("S", "length"), ("B", "batch")):
        note = " (the held-out tile's key_ns is then its start value: no data fits it)" if key == "D" else ""
        print(f"leave one {what} out: {summary(held_out(pts, base, key))}{note}")
    worst = sorted(zip(errors(pts, spec), pts), key=lambda e: -abs(e[0]))[:5]
    print("worst: " + "; ".join(f"B{p['row']['B']} H{p['row']['H']} S{p['row']['S']} D{p['row']['D']} "
                                f"{p['row']['mask']} {e:+.1f}%" for e, p in worst))
    ref = (f"{env.get('gpu_name', a.gpu)}, {(env.get('utc') or '')[:10]}, python3 -m validation.measure.sdpa_decode "
           f"-> {os.path.relpath(path)}; fitted by python3 -m validation.fit.fit_sdpa_decode --gpu {a.gpu} "
           f"({len(pts)} points, law gpusim.cost.decode_attention)")
    figs = {f: getattr(spec, f) for f in DECODE_ATTENTION_FIGURES}
    emit_measured(spec.path, DECODE_ATTENTION_FIGURES, figs, ref, ".4f", a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
