"""Fit the cold-parameter term of eval batch norm (``bn_cold_us``, :func:`gpusim.cost.laws.bn_eval`)
on the chain sweep, and show what the kernel before a memory-bound kernel does to it.

``python3 -m validation.fit.fit_chain [--gpu h200] [--sweep FILE] [--write]``

Reads ``validation/results/<gpu>/cnn_chain.jsonl`` (:mod:`validation.measure.cnn_chain`): conv ->
batch norm -> ReLU (-> add) chains and batch norm -> ReLU chains, each timed as a chain (L2 flushed
before the call, as the model records), as the same chain with a spin kernel before each stage
(``gap``), and stage by stage alone, L2-flushed (``cold``) and back to back (``warm``).

- The kernel before: each memory-bound kernel's time in the chain less its time in the gap chain
  (same tensors; the kernel before it a spin kernel instead of a convolution or a memory-bound
  kernel), by predecessor, dtype, layout and activation size.
- The batch-norm stage (cuDNN's one kernel in fp32; ATen's prologue copy, inverse-std and
  transform kernels in bf16): in the chain its input is what the kernel before just wrote (L2-warm)
  and its parameters are cold; in the ``warm`` sweep, as the batch-norm laws' sweeps
  (``--no-flush``), everything is L2-resident. ``bn_cold_us`` is the median of chain - warm over
  the stage's kernels, every point; reported: that difference by dtype, layout and size, gpusim's
  batch-norm stage against the chain's without and with the figure, and each chain kind, dtype and
  layout left out (figure fitted on the rest, the left-out stages' error).

No held-out, zoo or published record is read.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import re
import statistics
import sys

import numpy as np
import torch
import torch.nn.functional as F

from gpusim.capture.tracing import capture
from gpusim.cost.kernel import estimate_kernel
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.hw.spec_io import figure_line
from gpusim.predict.pipeline import lower
from validation.fit.fit_triton import emit_figures, read_sweep, sweep_path

FIGURES = ("bn_cold_us",)
#: measured kernels that are not a convolution (the chains run no other GEMM)
MEMORY = re.compile(r"elementwise|copy|batch_norm|bn_fw|nchwToNhwc|nhwcToNchw|reduce|pool|CatArray|spin_kernel")
SPIN = "spin_kernel"
SIZES = ((2e6, "<2 MB"), (16e6, "2-16 MB"), (64e6, "16-64 MB"), (float("inf"), ">=64 MB"))


def size_bucket(b: float) -> str:
    return next(lab for lim, lab in SIZES if b < lim)


def chain_graph(p: dict):
    """The OpGraph of one chain point (meta tensors, as measured: dtype, layout, stages)."""
    dt = getattr(torch, p["dtype"])
    fmt = torch.channels_last if p["layout"] == "cl" else torch.contiguous_format
    c, k = p["C"], 3 if p["chain"] == "cbr" else 1
    x0 = torch.empty(p["N"], c, p["HW"], p["HW"], device="meta", dtype=dt).contiguous(memory_format=fmt)
    w = torch.empty(c, c, k, k, device="meta", dtype=dt).contiguous(memory_format=fmt)
    vecs = tuple(torch.empty(c, device="meta", dtype=dt) for _ in range(4))

    def fn(x0, w, mean, var, g, b):
        x = x0 * 1.0
        y = F.conv2d(x, w, None, 1, k // 2) if p["chain"] != "bnr" else x
        y = F.batch_norm(y, mean, var, g, b, False, 0.1, 1e-5)
        if p["chain"] == "cbar":
            y = y.add_(x)
        return torch.relu_(y)
    return capture(fn, (x0, w) + vecs)


def predecessor_rows(recs: list[dict]) -> list[dict]:
    """One row per memory-bound chain kernel after the first: ``after`` (conv | mem), chain, gap
    and ``extra`` (chain - gap) µs."""
    rows = []
    for r in recs:
        ch, gap = r["kernels"], [k for k in r.get("gap") or [] if SPIN not in k["name"]]
        if [k["name"] for k in gap] != [k["name"] for k in ch]:
            continue
        for i in range(1, len(ch)):
            if MEMORY.search(ch[i]["name"]):
                rows.append({"p": r, "after": "mem" if MEMORY.search(ch[i - 1]["name"]) else "conv",
                             "chain_us": ch[i]["us"], "gap_us": gap[i]["us"], "extra": ch[i]["us"] - gap[i]["us"]})
    return rows


def bn_rows(recs: list[dict], spec) -> list[dict]:
    """One row per point: the batch-norm stage's µs in the chain, alone warm and cold, and as
    gpusim predicts it with ``spec`` (its batch-norm kernels, figure off)."""
    spec = dataclasses.replace(spec, bn_cold_us=None)
    rows = []
    for r in recs:
        pos = 0
        for s in r["stages"]:
            if s == "bn":
                break
            pos += len(r["warm"][s])
        n = len(r["warm"]["bn"])
        seg = r["kernels"][pos:pos + n]
        if [k["name"] for k in seg] != [k["name"] for k in r["warm"]["bn"]]:
            continue
        g = chain_graph(r)
        pred = sum(estimate_kernel(g, k, spec).us for k in lower(g, "eager", spec=spec).kernels
                   if "batch_norm" in g.g.nodes[k.ops[0]]["op"])
        rows.append({"p": r, "chain": sum(k["us"] for k in seg), "warm": sum(k["us"] for k in r["warm"]["bn"]),
                     "cold": sum(k["us"] for k in r["cold"]["bn"]), "pred": pred, "kernels": n})
    return rows


def fit(rows: list[dict]) -> float:
    """``bn_cold_us``: the median of chain - warm over the batch-norm stages."""
    return float(statistics.median(r["chain"] - r["warm"] for r in rows))


def errs(rows: list[dict], cold: float) -> str:
    e = [(r["pred"] + cold - r["chain"]) / r["chain"] * 100 for r in rows]
    return f"{np.median(np.abs(e)):.1f}% / {np.percentile(np.abs(e), 90):.1f}% (signed median {np.median(e):+.1f}%)"


def predecessor_table(rows: list[dict]) -> list[str]:
    by = collections.defaultdict(list)
    for r in rows:
        by[(r["after"], r["p"]["dtype"], r["p"]["layout"], size_bucket(r["p"]["bytes"]))].append(r)
    order = [lab for _, lab in SIZES]
    out = ["| after | dtype | layout | activation | kernels | median chain us | median gap us | median chain - gap |",
           "|---|---|---|---|---|---|---|---|"]
    for k in sorted(by, key=lambda k: (k[0], k[1], k[2], order.index(k[3]))):
        v = by[k]
        out.append(f"| {' | '.join(k)} | {len(v)} | {statistics.median(r['chain_us'] for r in v):.2f} | "
                   f"{statistics.median(r['gap_us'] for r in v):.2f} | {statistics.median(r['extra'] for r in v):+.2f} |")
    return out


def bn_table(rows: list[dict], cold: float) -> list[str]:
    by = collections.defaultdict(list)
    for r in rows:
        by[(r["p"]["dtype"], r["p"]["layout"], size_bucket(r["p"]["bytes"]))].append(r)
    order = [lab for _, lab in SIZES]
    out = ["| dtype | layout | activation | stages | kernels | median chain | warm | cold | chain - warm | "
           "gpusim before | after |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for k in sorted(by, key=lambda k: (k[0], k[1], order.index(k[2]))):
        v = by[k]
        m = {f: statistics.median(r[f] for r in v) for f in ("chain", "warm", "cold", "pred")}
        out.append(f"| {' | '.join(k)} | {len(v)} | {v[0]['kernels']} | {m['chain']:.2f} | {m['warm']:.2f} | "
                   f"{m['cold']:.2f} | {statistics.median(r['chain'] - r['warm'] for r in v):+.2f} | "
                   f"{errs(v, 0.0).split(' (')[0]} | {errs(v, cold).split(' (')[0]} |")
    return out


def lofo(rows: list[dict]) -> list[str]:
    out = []
    for key in ("chain", "dtype", "layout"):
        for v in sorted({r["p"][key] for r in rows}):
            rest = [r for r in rows if r["p"][key] != v]
            own = [r for r in rows if r["p"][key] == v]
            c = fit(rest)
            out.append(f"leave {key}={v} out ({len(own)} stages): bn_cold_us {c:.3f}; its stages' error "
                       f"{errs(own, 0.0)} -> {errs(own, c)}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.fit.fit_chain")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--sweep", default=None)
    ap.add_argument("--write", action="store_true", help="write the figure into the GPU's calibrated spec")
    a = ap.parse_args(argv)
    path = sweep_path("fit_chain", a.gpu, a.sweep, "cnn_chain.jsonl", "cnn_chain")
    if path is None:
        return 2
    env, recs = read_sweep(path, "cnn_chain", ("kernels", "gap", "warm"))
    spec = load_spec(calibrated_name(a.gpu))
    pre, bn = predecessor_rows(recs), bn_rows(recs, spec)
    if not bn:
        print(f"fit_chain: no batch-norm stage in {path}", file=sys.stderr)
        return 2
    cold = fit(bn)
    med = {w: statistics.median([r["extra"] for r in pre if r["after"] == w] or [0.0]) for w in ("conv", "mem")}
    lines = [f"{len(recs)} chains; memory-bound kernels after a convolution: {sum(r['after'] == 'conv' for r in pre)}, "
             f"median chain - gap {med['conv']:+.2f} us; after a memory-bound kernel: "
             f"{sum(r['after'] == 'mem' for r in pre)}, {med['mem']:+.2f} us",
             f"bn_cold_us = {cold:.3f} (median chain - warm over {len(bn)} batch-norm stages)",
             f"batch-norm stage in the chain, gpusim median / p90 abs error: {errs(bn, 0.0)} -> {errs(bn, cold)}"]
    print("\n".join(lines + [""] + predecessor_table(pre) + [""] + bn_table(bn, cold) + [""] + lofo(bn)))
    ref = (f"{env.get('gpu_name', a.gpu)}, {(env.get('utc') or '')[:10]}, python3 -m validation.measure.cnn_chain "
           f"--budget-s 160 -> {'validation/results/' + a.gpu + '/cnn_chain.jsonl'}; fitted by python3 -m "
           f"validation.fit.fit_chain --gpu {a.gpu} ({lines[1]}; {lines[2]})")
    emit_figures(spec.path, [figure_line("bn_cold_us", cold, "measured", ref, ".3f")],
                 FIGURES, a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
