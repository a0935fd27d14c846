"""An eager decode step's device time, kernel by kernel: each H200 generate record's profiled decode steps
(``profiled.kernel_seq``: every kernel in start order; validation/measure/generate_run.py) matched in launch order
against the kernels gpusim predicts for the same step (:func:`gpusim.predict.generate.generate_runs`, the last
sampled step, eager with a DynamicCache), and the error summed by kernel class.

A step in the record runs from its embedding gather (``indexSelect``) to the LM head (the segment's last GEMM);
generate's own per-token kernels after it are left out. Measured times are medians per position over the
record's steps. The two sequences are aligned on coarse classes (GEMM, attention, cat, ...; difflib), so a kernel
one side has and the other lacks shows as unmatched instead of shifting every pair after it.

    python3 -m validation.score.decode_kernels [--records validation/results/generate/h200-2026-11-28f.jsonl]
"""

from __future__ import annotations

import argparse
import difflib
import json
import statistics
import sys

from validation.score.decode_accuracy import GPUS, HOSTS

RECORDS = "validation/results/generate/h200-2026-11-28f.jsonl"
#: the coarse classes the alignment anchors on; everything else is "ew" (elementwise, norms, copies)
ANCHORS = ("gemm", "splitk", "attention", "lean", "cat", "gather")
#: an LM head: a product with at least this many output columns (vocabularies are 32k-256k)
LM_HEAD_N = 30000


def measured_class(name: str) -> str:
    """The coarse class of a profiled kernel, by its name."""
    if "splitKreduce" in name:
        return "splitk"
    if "nvjet" in name or "gemm" in name.lower() or "cutlass" in name:
        return "gemm"
    if "lean_reduction" in name:
        return "lean"
    if "sdpa" in name or "flash" in name or "fmha" in name:
        return "attention"
    if "CatArray" in name:
        return "cat"
    if "indexSelect" in name:
        return "gather"
    return "ew"


def predicted_class(k) -> str:
    """The coarse class of a predicted kernel (a :class:`~gpusim.cost.roofline.KernelEstimate`)."""
    ops = " ".join(k.op_types)
    if k.variant == "lean_reduction":
        return "lean"
    if k.role == "aux" and "linear" in ops:
        return "splitk"
    if "scaled_dot_product" in ops:
        return "attention"
    if k.kind in ("matmul", "bmm", "linear") or k.variant == "gemm":
        return "gemm"
    if "cat" in k.op_types or "stack" in k.op_types:
        return "cat"
    if "embedding" in ops:
        return "gather"
    return "ew"


def detail_class(k) -> str:
    """The class a predicted kernel's error is reported under (issue 34's list)."""
    c = predicted_class(k)
    ops = set(k.op_types)
    shape = tuple(k.shape) if k.shape and not isinstance(k.shape[0], tuple) else ()
    if c == "gemm":
        n = shape[-1] if shape else 0
        if n >= LM_HEAD_N:
            return "GEMM, LM head"
        rows = 1
        for s in shape[:-1]:
            rows *= s
        w = k.bytes_read / 1e6            # the weight, streamed, is nearly all of it
        return f"GEMM, {rows} rows, weight {'< 8' if w < 8 else '>= 8'} MB"
    if c == "splitk":
        return "cuBLAS split-K reduce"
    if c == "attention":
        return "attention, one query row"
    if c == "lean":
        return "cuDNN lean reduction"
    if c == "cat":
        return "cat, rotary halves" if len(shape) == 4 and shape[-2] == 1 else "cat, KV cache append"
    if c == "gather":
        return "embedding gather"
    if ops & {"mean", "pow", "rsqrt", "layer_norm"} or (ops == {"add"} and shape[-1:] == (1,)):
        return "norm (mean, pow, rsqrt, layer_norm)"
    if ops & {"to", "_to_copy"}:
        return "dtype casts"
    if len(shape) == 4 and shape[-2] == 1:
        return "rotary elementwise (B, H, 1, D)"
    return "elementwise, other"


def steps(r: dict) -> list[list[tuple[str, float]]]:
    """The record's profiled decode steps: from each embedding gather to the segment's last GEMM."""
    pr = r["profiled"]
    names, seq = pr["kernel_names"], pr["kernel_seq"]
    starts = [i for i, (k, _) in enumerate(seq) if measured_class(names[k]) == "gather"]
    out = []
    for a, b in zip(starts, starts[1:]):
        seg = [(names[k], us) for k, us in seq[a:b]]
        last = max(i for i, (n, _) in enumerate(seg) if measured_class(n) == "gemm")
        out.append(seg[:last + 1])
    return out


def match(pred: list, meas: list[tuple[str, float]]) -> list[tuple[str, float, float]]:
    """``(class, predicted µs, measured µs)`` per kernel: pairs aligned on the coarse classes, then what
    either side has alone (``"unmatched ..."``)."""
    a = [predicted_class(k) for k in pred]
    b = [measured_class(n) for n, _ in meas]
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            out += [(detail_class(pred[i]), pred[i].us, meas[j][1]) for i, j in zip(range(i1, i2), range(j1, j2))]
            continue
        out += [(f"unmatched predicted: {detail_class(pred[i])}", pred[i].us, 0.0) for i in range(i1, i2)]
        out += [(f"unmatched measured: {b[j]}", 0.0, meas[j][1]) for j in range(j1, j2)]
    return out


def record_rows(env: dict, r: dict) -> tuple[list, float, float]:
    """(matched rows, predicted step µs, measured step µs) of one generate record."""
    from gpusim.predict.generate import generate_runs
    segs = steps(r)
    n = min(len(s) for s in segs)
    segs = [s for s in segs if len(s) == n]
    meas = [(segs[0][i][0], statistics.median(s[i][1] for s in segs)) for i in range(n)]
    g = generate_runs(r["model"], [("dynamic", "eager")], r["batch"], r["prompt"], r["new"], gpu=GPUS[env["gpu"]],
                      host=HOSTS[env["gpu"]], samples=1)[0]
    step = list(g.parts["steps"].values())[-1]
    return match(list(step.kernels), meas), step.device_us, sum(us for _, us in meas)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", default=RECORDS)
    ap.add_argument("--json", help="also write the per-class sums here")
    a = ap.parse_args(argv)
    env, dump = None, []
    for line in open(a.records):
        r = json.loads(line)
        if r["kind"] == "environment":
            env = r
        if r["kind"] != "generate" or r["mode"] != "eager" or "kernel_seq" not in (r.get("profiled") or {}):
            continue
        rows, p_step, m_step = record_rows(env, r)
        by: dict = {}
        for c, p, m in rows:
            x = by.setdefault(c, [0, 0.0, 0.0])
            x[0] += 1
            x[1] += p
            x[2] += m
        print(f"\n{r['model']} batch {r['batch']}, context {r['prompt']}+: step {p_step:.0f} / {m_step:.0f} µs "
              f"({(p_step / m_step - 1) * 100:+.1f}%)\n")
        print("| class | kernels | predicted µs | measured µs | error µs |\n|---|---|---|---|---|")
        for c, (n, p, m) in sorted(by.items(), key=lambda kv: -abs(kv[1][1] - kv[1][2])):
            print(f"| {c} | {n} | {p:.1f} | {m:.1f} | {p - m:+.1f} |")
        dump.append({"model": r["model"], "batch": r["batch"], "step_pred_us": p_step, "step_meas_us": m_step,
                     "classes": {c: {"kernels": n, "pred_us": p, "meas_us": m} for c, (n, p, m) in by.items()}})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dump, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
