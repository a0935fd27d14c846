"""cuDNN's layout transforms conv by conv (issue 35): which convolutions the lowering wraps in
``nchwToNhwc`` / ``nhwcToNchw`` kernels that never ran, and which ran ones it does not launch.

``python3 -m validation.reports.cnn_transforms [--gpu h200] [--set zoo|holdout] [--family cnn]
[--by KEY,...] [--rows N]``; ``--sweep FILE.jsonl`` scores a conv sweep instead (``cnn_dispatch``,
``cnn_convs``): per op, the points whose transform count the lowering matches.

Each eager record is lowered as :mod:`validation.reports.cnn_kernels` does and its kernels are lined
up with the measured ones (:func:`validation.reports.cnn_kernels.matched_indices`). For every NCHW
convolution whose main kernel is matched, the measured layout kernels right before it (input and
weight transforms) and right after it (the output transform) are counted, and so are the
predicted ones: the lowering's ``to_nhwc`` / ``weight_to_nhwc`` / ``weight_transform`` before the
conv and ``to_nchw`` after it. Rows group the convolutions by their dispatch facts (dtype, 1x1,
stride, batch, input channels, map size) and show predicted vs measured counts and µs. Zoo records
are where a dispatch rule may be read from; held-out records only test it.
"""

from __future__ import annotations

import collections
import sys

from gpusim.cost.kernel import estimate_kernel
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.lower.conv import conv_info, conv_stride
from gpusim.predict.pipeline import lower
from validation.records.store import record_graph
from validation.reports.cnn_kernels import matched_indices, record_args, selected_records

LAYOUT = ("nchwToNhwc", "nhwcToNchw", "tensorTransform")
BEFORE = ("to_nhwc", "weight_to_nhwc", "weight_transform")


def _is_layout(name: str) -> bool:
    return any(k in name for k in LAYOUT)


def conv_rows(rec: dict, spec) -> list[dict]:
    """One dict a matched NCHW convolution of the record: its facts and predicted / measured
    transforms before and after it (counts and µs)."""
    g = record_graph(rec)
    ks = lower(g, "eager", spec=spec).kernels
    mi = {b: a for a, b in matched_indices(rec, g, ks).items()}
    meas = rec["kernels"]
    rows = []
    for b, k in enumerate(ks):
        n = k.ops[0]
        if k.role != "main" or g.g.nodes[n].get("kind") != "conv" or b not in mi:
            continue
        c = conv_info(g, n)
        if c is None or c.get("backward") or c["layout"] != "nchw":
            continue
        a = mi[b]
        mb, ma = [], []
        i = a - 1
        while i >= 0 and _is_layout(meas[i]["name"]):
            mb.append(meas[i]["us"])
            i -= 1
        i = a + 1
        while i < len(meas) and _is_layout(meas[i]["name"]):
            ma.append(meas[i]["us"])
            i += 1
        pb, pa = [], []
        j = b - 1
        while j >= 0 and ks[j].ops[0] == n and ks[j].variant in BEFORE:
            pb.append(estimate_kernel(g, ks[j], spec).us)
            j -= 1
        j = b + 1
        while j < len(ks) and ks[j].ops[0] == n and ks[j].variant == "to_nchw":
            pa.append(estimate_kernel(g, ks[j], spec).us)
            j += 1
        rows.append({"case": rec["case_id"], "dtype": c["dtype"], "N": c["N"], "Cin": c["Cin"],
                     "Cout": c["Cout"], "k": c["kh"], "s": conv_stride(c), "H": c["H"],
                     "g": c["groups"], "kernel": meas[a]["name"][:60], "variant": k.variant,
                     "pb": pb, "pa": pa, "mb": mb, "ma": ma})
    return rows


def _key(r: dict, by: list[str]) -> tuple:
    f = {"dtype": r["dtype"], "N": r["N"], "k": r["k"], "s": r["s"], "H": r["H"], "g": r["g"] > 1,
         "cin": "<128" if r["Cin"] < 128 else ">=128", "Cin": r["Cin"], "Cout": r["Cout"],
         "kernel": r["kernel"][:40], "variant": r["variant"]}
    return tuple(f[b] for b in by)


def summarise(rows: list[dict], by: list[str]) -> list[tuple]:
    """Rows grouped by ``by``, only groups where a predicted and a measured count differ:
    ``(key, convs, pred before, meas before, pred after, meas after, pred µs, meas µs)``."""
    agg = collections.defaultdict(lambda: [0, 0, 0, 0, 0, 0.0, 0.0])
    for r in rows:
        e = agg[_key(r, by)]
        e[0] += 1
        e[1] += len(r["pb"])
        e[2] += len(r["mb"])
        e[3] += len(r["pa"])
        e[4] += len(r["ma"])
        e[5] += sum(r["pb"]) + sum(r["pa"])
        e[6] += sum(r["mb"]) + sum(r["ma"])
    return sorted(((k, *v) for k, v in agg.items()), key=lambda t: -abs(t[6] - t[7]))


def sweep_agreement(path: str, spec) -> dict:
    """``{op: [points, matched]}``: a conv sweep's NCHW points (JSONL, ``validation.measure.cnn_dispatch``
    or ``cnn_convs``) whose measured layout-kernel count the lowering's equals."""
    import json
    from validation.fit.fit_dispatch import conv_point_graph
    out = collections.defaultdict(lambda: [0, 0])
    with open(path) as f:
        pts = [json.loads(line) for line in f]
    for p in pts:
        if p.get("kind") in ("environment", "summary") or "Cin" not in p or not p.get("kernels"):
            continue
        p = dict(p, layout=p.get("layout", "nchw"), groups=p.get("groups", 1))
        g = conv_point_graph(p)
        ks = lower(g, "eager", spec=spec).kernels
        pred = sum(1 for k in ks if k.variant in BEFORE + ("to_nchw",))
        meas = sum(1 for k in p["kernels"] if _is_layout(k["name"]))
        key = f"{p['op']} {p['dtype']}"
        out[key][0] += 1
        out[key][1] += pred == meas
    return dict(out)


def main(argv=None) -> int:
    ap = record_args("cnn_transforms", "zoo")
    ap.add_argument("--by", default="dtype,k,s,N,cin")
    ap.add_argument("--rows", type=int, default=40)
    ap.add_argument("--all", action="store_true", help="also groups whose counts agree")
    ap.add_argument("--sweep", help="score this conv sweep (JSONL) instead of the records")
    a = ap.parse_args(argv)
    spec = load_spec(calibrated_name(a.gpu))
    if a.sweep:
        for key, (n, ok) in sorted(sweep_agreement(a.sweep, spec).items()):
            print(f"{key}: {ok} of {n} points' transform counts matched")
        return 0
    _, recs = selected_records(a)
    rows = [row for r in recs for row in conv_rows(r, spec)]
    by = a.by.split(",")
    print(f"{a.gpu} {a.set} {a.family}: {len(recs)} records, {len(rows)} matched NCHW convs")
    print(f"| {' | '.join(by)} | convs | pred before | meas before | pred after | meas after | pred µs | meas µs |")
    print("|" + "---|" * (len(by) + 7))
    shown = 0
    for t in summarise(rows, by):
        if not a.all and t[2] == t[3] and t[4] == t[5]:
            continue
        key = " | ".join(str(x) for x in t[0])
        print(f"| {key} | {t[1]} | {t[2]} | {t[3]} | {t[4]} | {t[5]} | {t[6]:.0f} | {t[7]:.0f} |")
        shown += 1
        if shown >= a.rows:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
