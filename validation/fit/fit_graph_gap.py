"""The device's gap between consecutive kernels of a replayed CUDA graph, ``graph_kernel_gap_us`` (a GPU
figure: :data:`gpusim.hw.schema.GRAPH_FIGURES`), fitted on the graph_gap microbenchmark
(``python3 -m validation.measure.graph_gap micro``: graphs of 32-2000 nodes of adds, skinny GEMMs, norms,
Triton kernels and their mixes; validation/results/<gpu>/graph_gap/).

Each graph's gap is its replay's span (CUDA events, the launch covered by a sleep, no profiler) less the
same kernels' run times (the profiler's sum of the sequence run eagerly: what gpusim's kernel laws are
fitted on), over the kernels between: ``(span - sum) / (kernels - 1)``. The figure is the median gap of
the graphs that replay a decoder layer's kernels (:data:`MODEL_LIKE`: ``graph_gap.LAYER``, cuBLAS skinny
GEMMs with split-K, Triton norms and SiLU, adds; 40-2000 nodes): the others (one kernel repeated, two
alternating, up to 16 distinct elementwise kernels cycled, 1-65 µs kernels) run tighter, 0.10-0.40 µs,
printed beside it. Printed: every graph's gap and its span's error at the figure, leave-one-lease-out
(each request's model-like graphs priced by the figure of the other's) and the decoders' replays of
``graph_gap decoder`` (not fitted on: their span less their in-graph profiled kernels, against the same
difference of the model-like graphs).

    python3 -m validation.fit.fit_graph_gap [--gpu h200] [--write]
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys

from gpusim.hw.schema import GRAPH_FIGURES
from gpusim.hw.spec import calibrated_name, load_spec
from validation.fit.fit_triton import RESULTS, emit_measured, spec_fit_parser

#: the graphs a model's replay resembles: a decoder layer's kernels (graph_gap.LAYER)
MODEL_LIKE = "mix layer"


def read(gpu: str) -> tuple[dict, list[dict], list[dict], list[str]]:
    """(the first environment, the micro records, the decoder records, the files read)."""
    env, micro, dec, files = {}, [], [], sorted(glob.glob(os.path.join(RESULTS, gpu, "graph_gap", "**", "graph_gap_*.jsonl"),
                                                             recursive=True))
    for p in files:
        with open(p) as f:
            here = {}
            for line in f:
                r = json.loads(line)
                if r.get("kind") == "environment":
                    env, here = env or r, here or r
                elif r.get("kind") == "graph_gap" and r.get("eager_kernels", 0) > 1:
                    micro.append({**r, "lease": here.get("utc", "")[:13], "file": os.path.relpath(p, RESULTS)})
                elif r.get("kind") == "graph_gap_decoder" and r.get("graph_kernels"):
                    dec.append(r)
    return env, micro, dec, files


def gap(r: dict) -> float:
    """A micro record's gap between kernels (µs): event span less the eager kernel sum, per gap."""
    return (r["span_busy_us"]["median"] - r["eager_sum_us"]) / (r["eager_kernels"] - 1)


def distinct(r: dict) -> int:
    """Distinct kernels the graph cycles through (by the profiler's names of the eager run)."""
    return len(r.get("kernel_us") or {}) or r.get("distinct", 1)


def model_like(r: dict) -> bool:
    return r["config"] == MODEL_LIKE


def fit(rows: list[dict]) -> float:
    return statistics.median(gap(r) for r in rows if model_like(r))


def span_error(r: dict, g: float) -> float:
    """Signed % error of the graph's span priced as its eager kernel sum plus ``g`` per gap."""
    return ((r["eager_sum_us"] + g * (r["eager_kernels"] - 1)) / r["span_busy_us"]["median"] - 1) * 100


def held_out(rows: list[dict]) -> list[tuple[str, float, float, list]]:
    """Per lease (request) with model-like graphs: (lease, its gap, the figure fitted on the others, the
    span errors of its model-like graphs at that figure)."""
    out = []
    for lease in sorted({r["lease"] for r in rows if model_like(r)}):
        rest = [r for r in rows if r["lease"] != lease]
        mine = [r for r in rows if r["lease"] == lease and model_like(r)]
        if any(model_like(r) for r in rest):
            g = fit(rest)
            out.append((lease, statistics.median(gap(r) for r in mine), g, [span_error(r, g) for r in mine]))
    return out


def report(micro: list[dict], dec: list[dict], g: float) -> str:
    lines = [f"{'graph':34s} {'lease':16s} {'nodes':>5s} {'kernels':>7s} {'distinct':>8s} {'kernel us':>9s} {'gap us':>7s} "
             f"{'span err at fig':>15s} {'at 0.05':>8s}"]
    for r in sorted(micro, key=lambda r: (model_like(r), r["config"], r["nodes"], r["lease"])):
        lines.append(f"{r['config']:34s} {r['lease']:16s} {r['nodes']:5d} {r['eager_kernels']:7d} {distinct(r):8d} "
                     f"{r['eager_sum_us'] / r['eager_kernels']:9.2f} {gap(r):7.3f} {span_error(r, g):+14.1f}% "
                     f"{span_error(r, 0.05):+7.1f}%")
    few = [gap(r) for r in micro if not model_like(r)]
    many = [gap(r) for r in micro if model_like(r)]
    lines.append(f"other graphs: gap median {statistics.median(few):.3f} us ({min(few):.3f}-{max(few):.3f}, {len(few)} graphs); "
                 f"{MODEL_LIKE!r}: median {statistics.median(many):.3f} ({min(many):.3f}-{max(many):.3f}, {len(many)} graphs)")
    like = [r for r in micro if model_like(r)]
    errs = [abs(span_error(r, g)) for r in like]
    lines.append(f"model-like graphs' span at the figure: |err| median {statistics.median(errs):.2f}%, max {max(errs):.2f}%"
                 f" (at 0.05 us: median {statistics.median(abs(span_error(r, 0.05)) for r in like):.2f}%)")
    for lease, mine, other, e in held_out(micro):
        lines.append(f"leave out lease {lease}: its gap {mine:.3f} us, fitted without it {other:.3f} us "
                     f"({(other / mine - 1) * 100:+.0f}%); its spans at that figure {', '.join(f'{x:+.2f}%' for x in e)}")
    # the decoders: in-graph profiled kernels, so set against the mixes' span less their in-graph profiled sum
    prof = [(r["span_busy_us"]["median"] - r["graph_prof_sum_us"]) / (r["graph_kernels"] - 1) for r in like]
    if dec and prof:
        lines.append(f"model-like graphs, span less the in-graph profiled sum: {statistics.median(prof):.3f} us a gap "
                     f"({min(prof):.3f}-{max(prof):.3f})")
        for r in dec:
            d = (r["span_busy_us"]["median"] - r["graph_prof_sum_us"]) / (r["graph_kernels"] - 1)
            lines.append(f"decoder {r['model']} b{r['batch']}: {r['graph_kernels']} kernels, span {r['span_busy_us']['median']:.1f} us, "
                         f"in-graph kernel sum {r['graph_prof_sum_us']:.1f}: {d:.3f} us a gap (held out; "
                         f"profiled gaps median {r['graph_prof_gap_us']['median']:.3f})")
    return "\n".join(lines)


def main(argv=None) -> int:
    a = spec_fit_parser("fit_graph_gap").parse_args(argv)
    env, micro, dec, files = read(a.gpu)
    if not micro:
        print(f"no graph_gap records under validation/results/{a.gpu}/graph_gap/: run python3 -m "
              "validation.measure.graph_gap micro --out FILE on the GPU", file=sys.stderr)
        return 2
    g = fit(micro)
    print(report(micro, dec, g))
    spec = load_spec(calibrated_name(a.gpu))
    n = sum(model_like(r) for r in micro)
    ref = (f"{env.get('gpu', a.gpu)}, {(env.get('utc') or '')[:10]}, python3 -m validation.measure.graph_gap micro -> "
           f"{', '.join(os.path.relpath(p) for p in files)}; fitted by python3 -m validation.fit.fit_graph_gap --gpu {a.gpu} "
           f"(median over {n} graphs of a decoder layer's kernels, 40-2000 nodes, of (event span - eager kernel sum) / gaps)")
    emit_measured(spec.path, GRAPH_FIGURES, {"graph_kernel_gap_us": g}, ref, ".4f", a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
