"""Inductor's Triton kernels on the models: measured time against predicted, by kernel class and sub-class.

Per compiled record, the profiler's Triton kernels (``triton_poi_`` / ``triton_red_`` / ``triton_per_``)
and the compiled lowering's generated kernels, each classed the same way
(:func:`validation.score.inductor_classes`). Where a record's class has as many measured as predicted
kernels, they are paired in launch order, and each pair is tagged with the sub-classes the law may
miss: ``small`` (predicted under 5 us: the fixed cost and the tail of a wave), ``looped`` (a
``red`` kernel), ``math16`` (a 16-bit kernel with a transcendental: erf, tanh, exp, ...),
``inputs`` (more than 4 tensors read), ``l2`` (part of its reads credited to L2).

``python3 -m validation.score.triton_time [--gpu h100] [--set holdout|zoo|both] [--pairs FILE.jsonl]``
prints per record the measured / predicted Triton time per class, then the medians of
measured / predicted by sub-class over the paired kernels (time-weighted: sum over sum).
"""

from __future__ import annotations

import json
import statistics
import sys

from gpusim.cost.kernel import estimate_kernel
from gpusim.graph.opgraph import HALF_DTYPES, REDUCING_KINDS, group_io
from gpusim.graph.ops import packet_name
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.lower.inductor import UNROLL_REDUCTION
from gpusim.lower.legality import fusion_class
from gpusim.lower.reductions import channels_last, persistent, row_numel
from gpusim.predict.pipeline import lower
from validation.records.store import load_zoo_records, record_graph
from validation.score.inductor_classes import measured_class, record_set_args, record_sets

TRANSCENDENTAL = ("erf", "tanh", "exp", "sigmoid", "silu", "gelu", "log", "pow", "rsqrt", "sqrt", "sin", "cos",
                  "softplus", "mish", "elu", "hardswish")
TRITON = ("poi", "red", "per")


def kernel_class(graph, k, spec, nhwc) -> str:
    """``poi`` / ``red`` / ``per`` / ``extern`` of one lowered kernel (as :mod:`inductor_classes`)."""
    if k.impl != "generated":
        return "extern"
    if k.role == "aux":
        a = graph.g.nodes[k.ops[0]]
        red = a["kind"] in REDUCING_KINDS and len(k.ops) == 1 and a["kind"] not in ("conv", "matmul")
        return "per" if red and k.bytes == 2.0 * a["bytes_written"] else "poi"
    reds = [n for n in k.ops if fusion_class(graph, n) == "reduction" and row_numel(graph, n) >= UNROLL_REDUCTION]
    if not reds:
        return "poi"
    return "per" if all(persistent(graph, n, spec, nhwc) for n in reds) else "red"


def kernel_facts(graph, k, est) -> dict:
    """What the sub-classes are read from: dtype, transcendental ops, tensors read, L2 bytes."""
    nodes = [graph.g.nodes[n] for n in k.ops]
    ops = [packet_name(a["op"]) for a in nodes]
    half = any(a.get("dtype") in HALF_DTYPES for a in nodes)
    reads = len(group_io(graph, list(k.ops))[0]) if k.role == "main" else 1
    return {"ops": ops, "half": half, "math": any(any(t in o for t in TRANSCENDENTAL) for o in ops),
            "reads": reads, "l2_bytes": est.bytes_read_l2, "bytes": est.bytes, "pred_us": est.us}


def record_pairs(rec: dict, spec) -> tuple[dict, list[dict]]:
    """Per-class sums ``{cls: (measured, predicted)}`` and the paired kernels of one record."""
    graph = record_graph(rec)
    nhwc = channels_last(graph)
    pred = {c: [] for c in TRITON}
    for k in lower(graph, "compiled", spec=spec).kernels:
        c = kernel_class(graph, k, spec, nhwc)
        if c in pred:
            est = estimate_kernel(graph, k, spec)
            pred[c].append(kernel_facts(graph, k, est))
    meas = {c: [x for x in rec["kernels"] if measured_class(x["name"]) == c] for c in TRITON}
    sums = {c: (sum(x["us"] for x in meas[c]), sum(p["pred_us"] for p in pred[c])) for c in TRITON}
    pairs = []
    for c in TRITON:
        if len(meas[c]) != len(pred[c]):
            continue
        for m, p in zip(meas[c], pred[c]):
            pairs.append(dict(p, cls=c, name=m["name"], us=m["us"], model=rec["model"], family=rec["family"]))
    return sums, pairs


def subclasses(p: dict) -> list[str]:
    out = ["all", p["cls"]]
    if p["pred_us"] < 5:
        out.append("small")
    else:
        out.append("large")
    if p["half"] and p["math"]:
        out.append("math16")
    if p["reads"] > 4:
        out.append("inputs")
    if p["l2_bytes"] > 0:
        out.append("l2")
    return out


def ratio_table(pairs: list[dict]) -> list[tuple[str, int, float, float, float]]:
    """(sub-class, n, measured us, predicted us, median per-kernel ratio) over ``pairs``."""
    groups: dict[str, list[dict]] = {}
    for p in pairs:
        for s in subclasses(p):
            groups.setdefault(s, []).append(p)
    rows = []
    for s, ps in groups.items():
        rows.append((s, len(ps), sum(p["us"] for p in ps), sum(p["pred_us"] for p in ps),
                     statistics.median(p["us"] / p["pred_us"] for p in ps)))
    return sorted(rows, key=lambda r: -r[2])


def main(argv=None) -> int:
    ap = record_set_args("python3 -m validation.score.triton_time")
    ap.add_argument("--pairs", help="write the paired kernels here (JSONL)")
    a = ap.parse_args(argv)
    spec = load_spec(calibrated_name(a.gpu))
    all_pairs, ratios = [], []
    print("| model | family | " + " | ".join(f"{c} meas/pred us" for c in TRITON) + " | Triton ratio |")
    print("|---|---|" + "---|" * (len(TRITON) + 1))
    for s in record_sets(a.set):
        for rec in load_zoo_records(a.results, a.gpu, s):
            if rec["run"] != "compiled":
                continue
            sums, pairs = record_pairs(rec, spec)
            all_pairs += pairs
            tm, tp = sum(v[0] for v in sums.values()), sum(v[1] for v in sums.values())
            ratios.append(tm / tp if tp else float("nan"))
            cells = " | ".join(f"{m:.0f} / {p:.0f}" for m, p in sums.values())
            print(f"| {rec['model']} | {rec['family']} | {cells} | {ratios[-1]:.2f} |", flush=True)
    print(f"\nmedian measured/predicted Triton time per record: {statistics.median(ratios):.3f} ({len(ratios)} records)")
    print(f"\n| sub-class | kernels | measured us | predicted us | sum ratio | median kernel ratio |\n|---|---|---|---|---|---|")
    for s, n, m, p, med in ratio_table(all_pairs):
        print(f"| {s} | {n} | {m:.0f} | {p:.0f} | {m / p:.2f} | {med:.2f} |")
    if a.pairs:
        with open(a.pairs, "w") as f:
            for p in all_pairs:
                f.write(json.dumps(p) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
