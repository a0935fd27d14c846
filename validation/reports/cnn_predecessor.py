"""CNN records' memory-bound kernels by the kernel before them (issue 35): in a model, is a batch
norm, ReLU, add or layout transform slower after a library GEMM or convolution than after another
memory-bound kernel?

``python3 -m validation.reports.cnn_predecessor [--gpu h200] [--set holdout|zoo] [--family cnn]``

Each eager record is re-captured and lowered, its profiled kernels matched to the predicted ones
in launch order (:func:`validation.reports.cnn_kernels.matched_indices`), and every matched
memory-bound kernel (fine classes :data:`MEMORY_CLASSES`) is summed by its fine class, the
measured kernel before it (``lib``: a GEMM or convolution of any library, ATen's depthwise
included; ``mem``: anything else) and its predicted bytes: measured and predicted µs, and the
measured excess per kernel. Records are only read here: a diagnosis, nothing is fitted on them.
"""

from __future__ import annotations

import collections
import sys

from gpusim.cost.kernel import estimate_kernel
from gpusim.predict.pipeline import lower
from validation.records.store import record_graph
from validation.reports.cnn_kernels import fine_class, matched_indices, record_args, selected_records

MEMORY_CLASSES = ("elementwise", "bn_cudnn", "bn_aten", "layout", "pool", "reduce", "cat", "layer_norm")
LIBRARY_CLASSES = ("conv_1x1_rtc", "dw_aten", "dw_cudnn", "fprop_sm90", "fprop_sm80_tc", "fprop_ffma", "fprop_other",
                   "gemm_xmma", "gemm_nvjet", "gemm_cutlass", "splitk")
SIZES = ((0.064, "<64 kB"), (1, "64 kB-1 MB"), (4, "1-4 MB"), (16, "4-16 MB"), (1e9, ">=16 MB"))


def rows(records: list[dict], spec) -> list[dict]:
    """One row per matched memory-bound kernel: fine class, ``after`` (lib | mem), bytes, µs."""
    out = []
    for r in records:
        g = record_graph(r)
        ks = lower(g, "eager", spec=spec).kernels
        match = matched_indices(r, g, ks)
        meas = r["kernels"]
        for i, j in match.items():
            c = fine_class(meas[i]["name"])
            if i == 0 or c not in MEMORY_CLASSES:
                continue
            e = estimate_kernel(g, ks[j], spec)
            out.append({"case": r["case_id"], "cls": c, "bytes": e.bytes, "meas": meas[i]["us"], "pred": e.us,
                        "after": "lib" if fine_class(meas[i - 1]["name"]) in LIBRARY_CLASSES else "mem"})
    return out


def table(rs: list[dict], total_us: float) -> str:
    by = collections.defaultdict(list)
    for r in rs:
        size = next(lab for lim, lab in SIZES if r["bytes"] / 1e6 < lim)
        by[(r["cls"], r["after"], size)].append(r)
    order = [lab for _, lab in SIZES]
    lines = ["| class | after | bytes | kernels | us meas | us pred | pred / meas | meas - pred per kernel |",
             "|---|---|---|---|---|---|---|---|"]
    for k in sorted(by, key=lambda k: (k[0], k[1], order.index(k[2]))):
        v = by[k]
        m, p = sum(r["meas"] for r in v), sum(r["pred"] for r in v)
        lines.append(f"| {' | '.join(k)} | {len(v)} | {m:.0f} | {p:.0f} | {p / m:.2f} | {(m - p) / len(v):+.2f} |")
    for after in ("lib", "mem"):
        v = [r for r in rs if r["after"] == after]
        if v:
            m, p = sum(r["meas"] for r in v), sum(r["pred"] for r in v)
            lines.append(f"| all | {after} | all | {len(v)} | {m:.0f} | {p:.0f} | {p / m:.2f} | {(m - p) / len(v):+.2f} "
                         f"({(m - p) / total_us * 100:+.1f}% of the measured total) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    a = record_args("cnn_predecessor").parse_args(argv)
    spec, recs = selected_records(a)
    rs = rows(recs, spec)
    total = sum(r["kernel_sum_us"] for r in recs)
    print(f"{a.gpu} {a.set} {a.family} eager: {len(recs)} records, {total:.0f} us measured, spec {spec.name}\n")
    print(table(rs, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
