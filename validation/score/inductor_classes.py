"""Compiled kernel counts by class: what Inductor really launched (the profiler's kernel names
in a compiled record) against what :mod:`gpusim.lower.inductor` predicts, per model.

Inductor names its kernels after what they are: ``triton_poi_`` (pointwise), ``triton_red_``
(a looped reduction; a split reduction's first stage), ``triton_per_`` (a persistent
reduction: the whole row in registers, also a split reduction's second stage),
``triton_tem_`` (a template); every other name is a library ("extern") kernel: cuBLAS,
cuDNN, attention, or an ATen fallback. The predicted kernels are classed the same way from
the lowering: a generated kernel with a reduction member is ``red`` or ``per`` by
:func:`gpusim.lower.reductions.persistent`, any other generated kernel ``poi``.

``python3 -m validation.score.inductor_classes [--gpu h100] [--set holdout|zoo|both]``
prints one line per compiled record: measured / predicted count per class.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

from gpusim.graph.opgraph import REDUCING_KINDS
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.lower.inductor import UNROLL_REDUCTION
from gpusim.lower.legality import fusion_class
from gpusim.lower.reductions import channels_last, persistent, row_numel
from gpusim.predict.pipeline import lower
from validation.records.store import load_zoo_records, record_graph

CLASSES = ("extern", "poi", "red", "per", "tem")


def measured_class(name: str) -> str:
    """A profiler kernel name's class (``extern`` for anything not Triton)."""
    for c in ("poi", "red", "per", "tem"):
        if name.startswith(f"triton_{c}_"):
            return c
    return "extern"


def predicted_classes(graph, spec) -> Counter:
    """Counts per class of the compiled lowering of ``graph`` on ``spec``."""
    out: Counter = Counter()
    nhwc = channels_last(graph)
    for k in lower(graph, "compiled", spec=spec).kernels:
        if k.impl != "generated":
            out["extern"] += 1
        elif k.role == "aux":
            # a layout/pad copy or a peeled conv bias is pointwise; the second stage of a
            # split reduction (its op is the reduction) reduces the partials in registers
            red = graph.g.nodes[k.ops[0]]["kind"] in REDUCING_KINDS and len(k.ops) == 1 \
                and graph.g.nodes[k.ops[0]]["kind"] not in ("conv", "matmul")
            out["per" if red and k.bytes == 2.0 * graph.g.nodes[k.ops[0]]["bytes_written"]
                else "poi"] += 1
        else:
            reds = [n for n in k.ops if fusion_class(graph, n) == "reduction"
                    and row_numel(graph, n) >= UNROLL_REDUCTION]
            if not reds:
                out["poi"] += 1
            else:
                out["per" if all(persistent(graph, n, spec, nhwc) for n in reds) else "red"] += 1
    return out


def class_rows(records: list[dict], spec) -> list[dict]:
    """``{"model", "family", "meas": {class: n}, "pred": {class: n}}`` per compiled record."""
    rows = []
    for r in records:
        if r["run"] != "compiled":
            continue
        meas = Counter(measured_class(k["name"]) for k in r["kernels"])
        rows.append({"model": r["model"], "family": r["family"], "meas": meas,
                     "pred": predicted_classes(record_graph(r), spec)})
    return rows


def markdown(rows: list[dict]) -> str:
    head = "| model | family | " + " | ".join(CLASSES) + " | total |"
    lines = [head, "|" + "---|" * (len(CLASSES) + 3)]
    for r in rows:
        cells = [f"{r['meas'][c]} / {r['pred'][c]}" for c in CLASSES]
        tm, tp = sum(r["meas"].values()), sum(r["pred"].values())
        lines.append(f"| {r['model']} | {r['family']} | " + " | ".join(cells)
                     + f" | {tm} / {tp} ({(tp - tm) / tm * 100:+.1f}%) |")
    return "\n".join(lines)


def record_set_args(prog: str) -> argparse.ArgumentParser:
    """The arguments of the scorers of compiled zoo records (this module's and
    :mod:`validation.score.triton_time`): the results folder, the GPU, the record set."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("--results", default=os.path.join(root, "validation", "results"))
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--set", default="both", choices=("holdout", "zoo", "both"))
    return ap


def record_sets(choice: str) -> tuple[str, ...]:
    """The record sets ``--set`` names (``both``: held-out, then zoo)."""
    return ("holdout", "zoo") if choice == "both" else (choice,)


def main(argv=None) -> int:
    a = record_set_args("python3 -m validation.score.inductor_classes").parse_args(argv)
    spec = load_spec(calibrated_name(a.gpu))
    for s in record_sets(a.set):
        print(f"\n{a.gpu} {s}: compiled kernels by class, measured / predicted\n")
        print(markdown(class_rows(load_zoo_records(a.results, a.gpu, s), spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
