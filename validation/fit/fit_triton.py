"""Fit the Triton-kernel law's figures (:mod:`gpusim.cost.triton`) on one GPU's ``triton_bench`` sweep.

``python3 -m validation.fit.fit_triton --gpu h100 [--sweep FILE.jsonl]`` prints the spec lines
(``triton_* = { value, source, ref }``) for ``hwspecs/<gpu>-calibrated.toml`` and, per case class,
the sweep's median |error| before (the plain roofline) and after.

Each case (:mod:`validation.measure.triton_cases`) is captured here on meta tensors and lowered the
way Inductor does; its measured Triton kernels are paired in launch order with the predicted
generated kernels (a case whose counts differ is left out and listed). A chain, one graph here and
two on the GPU (a graph break), is priced as its two stages. Only the sweep is fitted, never a model:

1. ``triton_mem_efficiency``, ``triton_fixed_us``: the pointwise streams (one to sixteen inputs,
   2^10 .. 2^26 elements): the pair minimising sum((predicted - measured)^2 / measured);
   ``triton_min_us``: the shortest pointwise kernel measured;
2. ``triton_<class>_cycles`` (erf, tanh, exp, sqrt, div): the class's chain of 6-8 ops per element
   (erf8, tanh8, sigmoid8, rsqrt6, div6), fp32 and bf16: SM cycles per element of one op, from its
   time past the fixed cost (median over the dtypes where it is compute-bound, at least 1.15x its
   stream; where neither is, over both: an upper bound);
3. ``triton_red_efficiency``: the memory-bound looped reductions' bytes over their time past the
   fixed cost (median);
The chains' consumers are printed with the rate at which each reads the intermediate the L2 rule
credits (bytes over the time left once the fixed cost and the DRAM bytes are paid); too noisy to fit
``triton_l2_bandwidth_gbs`` (1 .. 170 TB/s on the H100, from differences of a few microseconds), the
spec keeps the calibrated L2 bandwidth.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys

from gpusim.capture.tracing import capture
from gpusim.cost.kernel import estimate_kernel
from gpusim.cost.triton import HEAVY_CLASSES, heavy_elements
from gpusim.hw.schema import TRITON_FIGURES
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.hw.spec_io import figure_line
from gpusim.lower.lowering import Kernel
from gpusim.predict.pipeline import lower
from validation.measure.triton_cases import FUNCS, make_inputs

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")


def read_sweep(path: str, kind: str = "triton_case", need: tuple = ("kernels",)) -> tuple[dict, list[dict]]:
    """A sweep's environment line and its measured records of ``kind`` (failed ones dropped, and
    those missing a field of ``need``); every spec fit reads its sweep this way."""
    env, rows = {}, []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "environment":
                env = r
            elif r.get("kind") == kind and not r.get("failed") and all(r.get(k) for k in need):
                rows.append(r)
    return env, rows


def predicted_kernels(case: dict, spec) -> tuple:
    """``(graph, [Kernel])``: the generated kernels gpusim predicts for ``case`` in launch order
    (a chain: its two stages, split where the first stage's nodes end)."""
    args = tuple(make_inputs(case, "meta"))
    fn = FUNCS[case["fn"]]
    graph = capture(fn, args)
    stages = getattr(fn, "stages", None)
    if stages:
        k1 = len(capture(FUNCS[stages[0]], args).compute_nodes)
        nodes = list(graph.compute_nodes)
        return graph, [Kernel(tuple(nodes[:k1]), "generated"), Kernel(tuple(nodes[k1:]), "generated")]
    return graph, [k for k in lower(graph, "compiled", spec=spec).kernels if k.impl == "generated"]


def kernel_rows(cases: list[dict], spec) -> tuple[list[dict], list[str]]:
    """One row per paired kernel: case, class, stage, measured us, and the kernel to price."""
    rows, unpaired = [], []
    for case in cases:
        graph, ks = predicted_kernels(case, spec)
        meas = [k for k in case["kernels"] if k["name"].startswith("triton_")]
        if len(meas) != len(ks):
            unpaired.append(f"{case['case']}: {len(meas)} measured, {len(ks)} predicted")
            continue
        for i, (m, k) in enumerate(zip(meas, ks)):
            est = estimate_kernel(graph, k, spec)
            rows.append({"case": case["case"], "cls": case["cls"], "stage": i, "name": m["name"], "us": m["us"],
                         "graph": graph, "kernel": k, "bytes": est.bytes, "l2": est.bytes_read_l2,
                         "heavy": heavy_elements(graph, k.ops) if k.role == "main" else dict.fromkeys(HEAVY_CLASSES, 0.0),
                         "looped": m["name"].startswith("triton_red_")})
    return rows, unpaired


def fit_stream(rows: list[dict], spec) -> dict:
    """``triton_mem_efficiency``, ``triton_fixed_us``, ``triton_min_us`` from the pointwise streams:
    the floor is the shortest kernel; efficiency (0.700 .. 1.000 by 0.005) and fixed cost (0 .. 4 us
    by 0.05) minimise sum((predicted - measured)^2 / measured) over every pointwise stream, between
    a least-squares line (the large kernels rule it) and a relative error (the small ones do)."""
    pts = [(r["bytes"], r["us"]) for r in rows if r["cls"] in ("poi", "poi_inputs") and r["l2"] == 0]
    floor = min(t for _, t in pts)
    best = None
    for i in range(61):
        eff = 0.7 + 0.005 * i
        for j in range(81):
            fixed = 0.05 * j
            err = sum((max(floor, fixed + b / (eff * spec.bandwidth) * 1e6) - t) ** 2 / t for b, t in pts)
            if best is None or err < best[0]:
                best = (err, eff, fixed)
    return {"triton_mem_efficiency": round(best[1], 4), "triton_fixed_us": round(best[2], 3),
            "triton_min_us": round(floor, 3)}


#: the compute-bound case of each heavy-op class (validation/measure/triton_cases.py)
HEAVY_CASES = {"erf8": "erf", "tanh8": "tanh", "sigmoid8": "exp", "rsqrt6": "sqrt", "div6": "div"}


def heavy_cycles(rows: list[dict], spec, eff: float, fixed: float) -> list[tuple[str, str, float, bool]]:
    """Per heavy-op case: (case, class, SM cycles per element of one op of the class, whether
    compute-bound: its time past the fixed cost at least 1.15x its stream)."""
    out = []
    for r in rows:
        c = HEAVY_CASES.get(r["case"].split(":")[0])
        if c and r["heavy"][c]:
            body, mem = r["us"] - fixed, r["bytes"] / (eff * spec.bandwidth) * 1e6
            out.append((r["case"], c, body * 1e-6 * spec.sm_count * spec.boost_clock_mhz * 1e6 / r["heavy"][c],
                        body > 1.15 * mem))
    return out


def chain_rates(rows: list[dict], spec, eff: float, fixed: float) -> list[tuple[str, float, float]]:
    """Per chain consumer whose intermediate the L2 rule credits: (case, credited MB, GB/s reached)."""
    out = []
    for r in rows:
        if r["cls"] == "chain" and r["stage"] == 1 and r["l2"] > 0:
            left = r["us"] - fixed - (r["bytes"] - r["l2"]) / (eff * spec.bandwidth) * 1e6
            out.append((r["case"], r["l2"] / 1e6, r["l2"] / max(left, 0.05) / 1e3))
    return out


def fit_rest(rows: list[dict], spec, figs: dict) -> dict:
    """The heavy-op cycles, the looped-reduction efficiency and the chains' L2 rate, given the stream."""
    eff, fixed = figs["triton_mem_efficiency"], figs["triton_fixed_us"]
    out = {}
    cases = heavy_cycles(rows, spec, eff, fixed)
    for cls in HEAVY_CLASSES:
        # a class whose case stays memory-bound in both dtypes costs at most this: an upper bound
        cyc = [c for _, k, c, bound in cases if k == cls and bound] or [c for _, k, c, _ in cases if k == cls]
        if cyc:
            out[f"triton_{cls}_cycles"] = round(statistics.median(cyc), 4)
    clock = spec.sm_count * spec.boost_clock_mhz * 1e6
    red = [r["bytes"] / ((r["us"] - fixed) * 1e-6 * spec.bandwidth) for r in rows
           if r["looped"] and r["cls"] in ("red", "red_few") and r["l2"] == 0 and r["us"] > 3 * fixed
           # a memory-bound one: its heavy ops (a softmax's exp) take under half its time
           and sum(e * out.get(f"triton_{c}_cycles", 0.0) for c, e in r["heavy"].items()) / clock * 1e6
           < 0.5 * (r["us"] - fixed)]
    if red:
        out["triton_red_efficiency"] = round(min(1.0, statistics.median(red)), 4)
    return out


def errors(rows: list[dict], spec) -> dict:
    """Per case class: the |error| (%) of each kernel's prediction on ``spec``."""
    out: dict = {}
    for r in rows:
        p = estimate_kernel(r["graph"], r["kernel"], spec).us
        out.setdefault(r["cls"], []).append(abs(p - r["us"]) / r["us"] * 100)
    return out


def sweep_path(prog: str, gpu: str, sweep: str | None, name: str, measure: str) -> str | None:
    """The sweep a fit reads: ``sweep`` or ``validation/results/<gpu>/<name>``; None, with one line on
    stderr saying which measurement to run, when the file is not there."""
    path = sweep or os.path.join(RESULTS, gpu, name)
    if os.path.exists(path):
        return path
    print(f"{prog}: no sweep {path}: run python3 -m validation.measure.{measure} --out {path} on the GPU",
          file=sys.stderr)
    return None


def write_figures(path: str, lines: list[str], prefixes: tuple[str, ...] = ("triton_",)) -> None:
    """Replace the lines of the spec file ``path`` (its [model] section is the last) that start with
    one of ``prefixes`` (the fit's figures: ``triton_*`` here) by ``lines``."""
    with open(path) as f:
        keep = [ln for ln in f.read().splitlines() if not ln.startswith(prefixes)]
    while keep and not keep[-1].strip():
        keep.pop()
    with open(path, "w") as f:
        f.write("\n".join(keep + lines) + "\n")


def spec_fit_parser(prog: str, sweep: str | None = None, gpu: str = "h200") -> argparse.ArgumentParser:
    """The arguments of a fit that writes figures into a GPU's calibrated spec: ``--gpu``
    (default ``gpu``), ``--sweep`` where it reads one sweep file (``validation/results/<gpu>/<sweep>``;
    None: a fit that finds its own files), ``--write``."""
    ap = argparse.ArgumentParser(prog=f"python3 -m validation.fit.{prog}")
    ap.add_argument("--gpu", default=gpu)
    if sweep is not None:
        ap.add_argument("--sweep", default=None, help=f"default validation/results/<gpu>/{sweep}")
    ap.add_argument("--write", action="store_true", help="write the figures into the GPU's calibrated spec")
    return ap


def emit_measured(spec_path: str, names: tuple[str, ...], figs: dict, ref: str, fmt: str, write: bool) -> None:
    """A fit's measured figures ``figs`` (those of ``names`` it has), each with ``ref`` and its value
    in ``fmt`` (:func:`gpusim.hw.spec_io.figure_line`), through :func:`emit_figures`."""
    lines = [figure_line(k, figs[k], "measured", ref, fmt) for k in names if k in figs]
    emit_figures(spec_path, lines, names, write)


def left_out(pts: list[dict], key: str, fit, min_rest: int = 5):
    """``(value, its points, fit(the others))`` for each value of ``pts``' ``key`` whose other points number at
    least ``min_rest``: a fit's error with each group left out."""
    for v in sorted({p[key] for p in pts}):
        rest = [p for p in pts if p[key] != v]
        if len(rest) >= min_rest:
            yield v, [p for p in pts if p[key] == v], fit(rest)


def emit_fitted(spec_path: str, lines: list[tuple], ref: str, write: bool) -> None:
    """A fit's ``(name, value, fmt)`` figures, each measured with ``ref``, through :func:`emit_figures`."""
    emit_figures(spec_path, [figure_line(k, v, "measured", ref, f) for k, v, f in lines],
                 tuple(k for k, _, _ in lines), write)


def spec_fit_args(prog: str, measure: str, argv=None) -> tuple[argparse.Namespace, str | None]:
    """A spec fit's parsed arguments (:func:`spec_fit_parser`) and the sweep it reads
    (:func:`sweep_path`: ``validation/results/<gpu>/<measure>.jsonl``, written by
    ``python3 -m validation.measure.<measure>``), None when that file is missing."""
    a = spec_fit_parser(prog, f"{measure}.jsonl").parse_args(argv)
    return a, sweep_path(prog, a.gpu, a.sweep, f"{measure}.jsonl", measure)


def emit_figures(spec_path: str, lines: list[str], prefixes: tuple[str, ...], write: bool) -> None:
    """A fit's figure lines: written into the spec file (:func:`write_figures`) with ``write``,
    else printed."""
    if write:
        write_figures(spec_path, lines, prefixes)
        print(f"wrote {', '.join(prefixes)} into {os.path.relpath(spec_path)}")
    else:
        print("\n".join(lines))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.fit.fit_triton")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--sweep", default=None, help="default validation/results/<gpu>/triton_bench.jsonl")
    ap.add_argument("--write", action="store_true", help="replace the triton_* lines of the GPU's calibrated spec")
    ap.add_argument("--out", default=None, help="also write the figure lines to this TOML file ([model] section)")
    a = ap.parse_args(argv)
    path = sweep_path("fit_triton", a.gpu, a.sweep, "triton_bench.jsonl", "triton_bench")
    if path is None:
        return 2
    env, cases = read_sweep(path)
    base = dataclasses.replace(load_spec(calibrated_name(a.gpu)), **{k: None for k in TRITON_FIGURES})
    rows, unpaired = kernel_rows(cases, base)
    figs = fit_stream(rows, base)
    figs.update(fit_rest(rows, base, figs))
    ref = (f"{env.get('gpu_name', a.gpu)}, {(env.get('utc') or '')[:10]}, {env.get('command', 'triton_bench')} "
           f"-> {os.path.relpath(path)}; fitted by python3 -m validation.fit.fit_triton --gpu {a.gpu} "
           f"({len(rows)} kernels of {len(cases)} cases, gpusim.cost.triton)")
    lines = [figure_line(k, v, "measured", ref) for k, v in figs.items()]
    print("\n".join(lines))
    if a.write:
        write_figures(load_spec(calibrated_name(a.gpu)).path, lines)
    if a.out:
        with open(a.out, "w") as f:
            f.write(f"# Triton-kernel figures for {calibrated_name(a.gpu)}: python3 -m validation.fit.fit_triton --gpu {a.gpu}"
                    " (not yet in the spec: --write puts them there)\n[model]\n" + "\n".join(lines) + "\n")
    before, after = errors(rows, base), errors(rows, dataclasses.replace(base, **figs))
    for cls in sorted(before):
        print(f"# {cls:<11} n={len(before[cls]):3d}  median |error| {statistics.median(before[cls]):6.1f}% -> "
              f"{statistics.median(after[cls]):5.1f}%   max {max(before[cls]):6.1f}% -> {max(after[cls]):6.1f}%")
    for case, cls, c, bound in heavy_cycles(rows, base, figs["triton_mem_efficiency"], figs["triton_fixed_us"]):
        print(f"# {cls:<5} ops  {case:<44} {c:7.3f} SM cycles per op-element{'' if bound else '  (memory-bound)'}")
    for case, mb, gbs in chain_rates(rows, base, figs["triton_mem_efficiency"], figs["triton_fixed_us"]):
        print(f"# chain      {case:<44} {mb:7.1f} MB credited, read at {gbs:8.0f} GB/s")
    for u in unpaired:
        print(f"# unpaired: {u}")
    return 0 if not math.isnan(figs["triton_mem_efficiency"]) else 1


if __name__ == "__main__":
    sys.exit(main())
