"""Fit the after-a-convolution law (:mod:`gpusim.cost.sequence`) on the chain sweep.

``python3 -m validation.fit.fit_chain [--gpu h200] [--sweep FILE] [--write]``

Reads ``validation/results/<gpu>/cnn_chain.jsonl`` (:mod:`validation.measure.cnn_chain`): conv ->
batch norm -> ReLU (-> add) chains, each timed as a chain (back to back, as a model runs) and as
the same chain with a spin kernel between stages (``gap``). A kernel's ``extra`` is its time in the
chain less its time in the gap chain (same tensors, same kernel, the previous kernel a spin kernel
instead): what the kernel before it costs it. Memory-bound kernels (ATen elementwise and batch
norm, cuDNN's batch norm and layout transforms) are split by their predecessor in the chain: a
convolution (``lib``: any library's, cuDNN, cuBLAS or ATen's depthwise) or a memory-bound kernel
(``mem``). The law
``after_conv_us x max(0, 1 - bytes / after_conv_bytes)`` is fitted in least squares on the
``lib`` kernels' extras (bytes: gpusim's bytes of the kernel matched in launch order, the broad
fit's matcher); ``after_conv_bytes`` by a grid (none: no taper). Reported: the extras by
predecessor, dtype, layout and size; leave one chain / dtype / layout out; and each chain's device
time as gpusim predicts it (captured on meta tensors) against the measured chain, without and
with the law. No held-out, zoo or published record is read.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import difflib
import re
import statistics
import sys

import numpy as np
import torch
import torch.nn.functional as F

from gpusim.capture.tracing import capture
from gpusim.cost.kernel import estimate_kernel
from gpusim.cost.sequence import after_conv
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.predict.pipeline import lower
from validation.fit.fit_broad import kernel_class, measured_class
from validation.fit.fit_triton import emit_figures, read_sweep, sweep_path

FIGURES = ("after_conv_us", "after_conv_bytes")
#: measured kernels that are not a convolution (the chains run no other GEMM)
MEMORY = re.compile(r"elementwise|copy|batch_norm|bn_fw|nchwToNhwc|nhwcToNchw|reduce|pool|CatArray|spin_kernel")
SPIN = "spin_kernel"
#: taper spans tried (bytes); None: no taper
SPANS = (None,) + tuple(float(2 ** e) for e in range(20, 29))


def is_memory(name: str) -> bool:
    return bool(MEMORY.search(name))


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


def kernel_rows(recs: list[dict], spec) -> tuple[list[dict], list[dict]]:
    """``(rows, chains)``: one row per measured memory-bound chain kernel after the first
    (point, name, ``after`` lib|mem, chain and gap µs, extra, gpusim's bytes and µs of the matched
    kernel); one row per point (measured chain µs, predicted without and with ``spec``'s law)."""
    rows, chains = [], []
    for r in recs:
        ch = r["kernels"]
        gap = [k for k in r.get("gap") or [] if SPIN not in k["name"]]
        g = chain_graph(r)
        ks = lower(g, "eager", spec=spec).kernels
        est = [estimate_kernel(g, k, spec) for k in ks]
        chains.append({"p": r, "meas": sum(k["us"] for k in ch), "pred": sum(e.us for e in est),
                       "pred_law": sum(e.us for e in after_conv(est, spec))})
        if [k["name"] for k in gap] != [k["name"] for k in ch]:
            continue
        sm = difflib.SequenceMatcher(None, [measured_class(k["name"]) for k in ch],
                                     [kernel_class(g, k) for k in ks], autojunk=False)
        match = {b.a + j: b.b + j for b in sm.get_matching_blocks() for j in range(b.size)}
        for i in range(1, len(ch)):
            if not is_memory(ch[i]["name"]) or i not in match:
                continue
            e = est[match[i]]
            rows.append({"p": r, "name": ch[i]["name"], "after": "mem" if is_memory(ch[i - 1]["name"]) else "lib",
                         "chain_us": ch[i]["us"], "gap_us": gap[i]["us"], "extra": ch[i]["us"] - gap[i]["us"],
                         "bytes": e.bytes, "pred_us": e.us})
    return rows, chains


def fit(rows: list[dict]) -> tuple[float, float | None, float]:
    """``(us, span, rms)``: least squares of the ``lib`` rows' extras on the tapered law, the span
    chosen from :data:`SPANS`."""
    lib = [r for r in rows if r["after"] == "lib"]
    y = np.array([r["extra"] for r in lib])
    best = None
    for span in SPANS:
        x = np.array([1.0 if span is None else max(0.0, 1.0 - r["bytes"] / span) for r in lib])
        a = float(x @ y / (x @ x)) if x @ x > 0 else 0.0
        rms = float(np.sqrt(np.mean((y - a * x) ** 2)))
        if best is None or rms < best[2] - 1e-9:
            best = (a, span, rms)
    return best


def size_bucket(b: float) -> str:
    mb = b / 1e6
    return next(lab for lim, lab in ((1, "<1 MB"), (4, "1-4 MB"), (16, "4-16 MB"), (64, "16-64 MB"),
                                     (1e12, ">=64 MB")) if mb < lim)


def extras_table(rows: list[dict]) -> list[str]:
    """Median extra (chain - gap) and chain µs by predecessor, dtype, layout and size."""
    by = collections.defaultdict(list)
    for r in rows:
        by[(r["after"], r["p"]["dtype"], r["p"]["layout"], size_bucket(r["bytes"]))].append(r)
    out = ["| after | dtype | layout | kernel bytes | kernels | median chain us | median gap us | median extra us |",
           "|---|---|---|---|---|---|---|---|"]
    order = ["<1 MB", "1-4 MB", "4-16 MB", "16-64 MB", ">=64 MB"]
    for k in sorted(by, key=lambda k: (k[0], k[1], k[2], order.index(k[3]))):
        v = by[k]
        out.append(f"| {' | '.join(k)} | {len(v)} | {statistics.median(r['chain_us'] for r in v):.2f} | "
                   f"{statistics.median(r['gap_us'] for r in v):.2f} | {statistics.median(r['extra'] for r in v):+.2f} |")
    return out


def _errs(chains, key) -> str:
    e = np.abs([(c[key] - c["meas"]) / c["meas"] * 100 for c in chains])
    s = np.median([(c[key] - c["meas"]) / c["meas"] * 100 for c in chains])
    return f"{np.median(e):.1f}% / {np.percentile(e, 90):.1f}% (signed median {s:+.1f}%)"


def lofo(rows: list[dict]) -> list[str]:
    """Each chain, dtype and layout left out: figures fitted on the rest, rms of the left-out
    ``lib`` extras under them and under no law."""
    out = []
    for key in ("chain", "dtype", "layout"):
        for v in sorted({r["p"][key] for r in rows}):
            rest = [r for r in rows if r["p"][key] != v]
            own = [r for r in rows if r["p"][key] == v and r["after"] == "lib"]
            if not own or not any(r["after"] == "lib" for r in rest):
                continue
            a, span, _ = fit(rest)
            pred = [a * (1.0 if span is None else max(0.0, 1 - r["bytes"] / span)) for r in own]
            rms = np.sqrt(np.mean([(r["extra"] - q) ** 2 for r, q in zip(own, pred)]))
            rms0 = np.sqrt(np.mean([r["extra"] ** 2 for r in own]))
            out.append(f"leave {key}={v} out ({len(own)} kernels after a convolution): {a:.3f} us, span "
                       f"{span or 0:.0f} B; its extras' rms {rms0:.2f} us (no law) -> {rms:.2f} us")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.fit.fit_chain")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--sweep", default=None)
    ap.add_argument("--write", action="store_true", help="write the figures into the GPU's calibrated spec")
    a = ap.parse_args(argv)
    path = sweep_path("fit_chain", a.gpu, a.sweep, "cnn_chain.jsonl", "cnn_chain")
    if path is None:
        return 2
    env, recs = read_sweep(path, "cnn_chain", ("kernels", "gap"))
    base = dataclasses.replace(load_spec(calibrated_name(a.gpu)), after_conv_us=None, after_conv_bytes=None)
    rows, _ = kernel_rows(recs, base)
    if not any(r["after"] == "lib" for r in rows):
        print(f"fit_chain: no kernel after a convolution in {path}", file=sys.stderr)
        return 2
    us, span, rms = fit(rows)
    law = dataclasses.replace(base, after_conv_us=us, after_conv_bytes=span)
    _, chains = kernel_rows(recs, law)
    lib = [r for r in rows if r["after"] == "lib"]
    mem = [r for r in rows if r["after"] == "mem"]
    lines = [f"{len(recs)} chains, {len(lib)} memory-bound kernels after a convolution, {len(mem)} after a "
             f"memory-bound one: median extra (chain - gap) {statistics.median(r['extra'] for r in lib):+.2f} / "
             f"{statistics.median(r['extra'] for r in mem):+.2f} us",
             f"fit: after_conv_us = {us:.3f}, after_conv_bytes = {span or 0:.0f} (rms {rms:.2f} us)",
             f"chain device time, median / p90 abs error: order-free laws {_errs(chains, 'pred')}; "
             f"with the law {_errs(chains, 'pred_law')}"]
    print("\n".join(lines + [""] + extras_table(rows) + [""] + lofo(rows)))
    ref = (f"{env.get('gpu_name', a.gpu)}, {(env.get('utc') or '')[:10]}, {env.get('command', 'cnn_chain')}; fitted by "
           f"python3 -m validation.fit.fit_chain --gpu {a.gpu} ({lines[0]}; {lines[2]})")
    figs = [f'after_conv_us = {{ value = {us:.3f}, source = "measured", ref = "{ref}" }}']
    if span:
        figs.append(f'after_conv_bytes = {{ value = {span:.0f}, source = "measured", ref = "{ref}" }}')
    emit_figures(load_spec(calibrated_name(a.gpu)).path, figs, FIGURES, a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
