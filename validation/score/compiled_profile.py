"""Where a compiled call's host time goes, from the profiled host events of compiled zoo records
(``zoo_run --host-profile``: ``host_profile``, self CPU µs per call of the top host events), beside
what gpusim prices for the same program on a lease's host.

Each event is put in one part of the call (:func:`part_of`): Dynamo (cache look-up and guards,
the compiled region, pre-graph bytecode), AOTAutograd's runtime wrapper, the generated wrapper's
own Python (``## Call CompiledFxGraph``), Triton's launchers (``triton_*``), the driver launches
(``cuLaunchKernel`` for Triton, ``cuLaunchKernelEx``/``cudaLaunchKernel*`` for the libraries),
the extern library calls by class (GEMM, attention, convolution), allocations and views, other
CUDA runtime calls, and the profiler's own buffer requests (left out of the shares). The profiler
slows the host (1.4-2x), so the shares matter, not the sums: each part's share of the profiled
host time (the profiler's own left out) times the unprofiled wall gives its µs per call, for a
host-bound call.

    python3 -m validation.score.compiled_profile --records F.jsonl.gz [F2 ...] [--host LEASE.toml]
"""

from __future__ import annotations

import argparse
import sys

#: the parts of a compiled call, in the order the table shows them
PARTS = ("dynamo", "aot", "wrapper", "launcher", "cu_triton", "cu_library", "matmul", "attention",
         "conv", "alloc", "cuda_other", "other")

#: the table's groups of parts
GROUPS = {"Dynamo+AOT": ("dynamo", "aot"), "wrapper Python": ("wrapper",),
          "Triton": ("launcher", "cu_triton"), "library": ("matmul", "attention", "conv", "cu_library"),
          "alloc/views": ("alloc",), "other": ("cuda_other", "other")}

_EXACT = {"TorchDynamo Cache Lookup": "dynamo", "Pregraph bytecode": "dynamo",
          "cuLaunchKernel": "cu_triton", "cuLaunchKernelEx": "cu_library",
          "cudaLaunchKernel": "cu_library", "cudaLaunchKernelExC": "cu_library",
          "aten::addmm": "matmul", "aten::mm": "matmul", "aten::bmm": "matmul",
          "aten::baddbmm": "matmul", "aten::convolution": "conv", "aten::_convolution": "conv",
          "aten::cudnn_convolution": "conv", "aten::empty": "alloc", "aten::empty_strided": "alloc",
          "aten::empty_like": "alloc", "aten::as_strided": "alloc", "aten::expand": "alloc",
          "aten::view": "alloc", "aten::resize_": "alloc"}

#: the profiler's own events (its activity buffers), not the program's
PROFILER = ("Activity Buffer Request",)


def part_of(event: str) -> str | None:
    """The part of a compiled call a profiled host event belongs to (None: the profiler's own)."""
    if event in PROFILER:
        return None
    if event in _EXACT:
        return _EXACT[event]
    if event.startswith(("Torch-Compiled Region", "TorchDynamo")):
        return "dynamo"
    if event.startswith("AOTDispatcher"):
        return "aot"
    if event.startswith("## Call CompiledFxGraph"):
        return "wrapper"
    if event.startswith("triton_"):
        return "launcher"
    if "attention" in event:
        return "attention"
    if event.startswith("cuda") or event.startswith("cu"):
        return "cuda_other"
    return "other"


def breakdown(rec: dict) -> dict | None:
    """``{part: µs per call}`` of a compiled record's host: each part's share of the profiled
    host time (the profiler's own events left out; events below the record's top 30 are
    ``other``) times the unprofiled wall; None without a host profile."""
    hp = rec.get("host_profile") or {}
    ev = hp.get("self_cpu_us_per_call")
    if not ev or not rec.get("wall_us"):
        return None
    parts = {p: 0.0 for p in PARTS}
    prof = 0.0
    for k, v in ev.items():
        p = part_of(k)
        if p is None:
            prof += v
        else:
            parts[p] += v
    parts["other"] += max(hp.get("cpu_us_per_call", 0.0) - sum(ev.values()), 0.0)
    total = sum(parts.values())
    return {p: v / total * rec["wall_us"] for p, v in parts.items()} | {
        "_profiled_us": total, "_profiler_us": prof}


def counts(rec: dict) -> dict:
    """The program's launches by kind, from the record's host statistics."""
    h = rec.get("host") or {}
    top = h.get("aten_ops_top_counts") or {}
    lc = h.get("launch_calls") or {}
    return {"kernels": rec.get("kernel_count"),
            "triton": lc.get("cuLaunchKernel", 0),
            "matmul": sum(v for k, v in top.items() if k in ("aten::addmm", "aten::mm", "aten::bmm",
                                                               "aten::baddbmm")),
            "attention": sum(v for k, v in top.items() if "attention" in k),
            "conv": top.get("aten::convolution", 0)}


def predicted_split(rec: dict, spec, host) -> dict:
    """gpusim's compiled prediction of ``rec`` on ``host``: end to end, host, and the host split
    (:func:`validation.score.compiled_forward.host_split`, call = the rest)."""
    from gpusim.predict.pipeline import predict
    from validation.records.store import record_graph
    from validation.score.compiled_forward import host_split
    p = predict(record_graph(rec), gpu=spec, mode="compiled", host=host)
    split = host_split(p.timeline.kernels, host, p.kernel_count)
    split["call"] = p.timeline.host_us - sum(split.values())
    return {"e2e_us": p.end_to_end_us, "host_us": p.timeline.host_us, **split}


def rows(records: list[dict], spec=None, host=None) -> list[dict]:
    out = []
    for r in records:
        if r.get("run") != "compiled" or r.get("failed"):
            continue
        b = breakdown(r)
        if b is None:
            continue
        row = {"case": r["case_id"].split("__")[0], "wall_us": r["wall_us"],
               "kernel_sum_us": r["kernel_sum_us"], "counts": counts(r), "measured": b}
        if spec is not None:
            row["predicted"] = predicted_split(r, spec, host)
        out.append(row)
    return out


def markdown(rs: list[dict]) -> str:
    lines = ["Measured host µs per call by part (profiled shares x unprofiled wall; Triton = its launchers + "
             "cuLaunchKernel; library = the extern aten calls' self time + cuLaunchKernelEx/cudaLaunchKernel):", "",
             "| case | wall | kernels (Triton/GEMM/attn/conv) | " + " | ".join(GROUPS) + " |",
             "|---|---|---|" + "---|" * len(GROUPS)]
    for r in rs:
        c, m = r["counts"], r["measured"]
        lines.append(f"| {r['case']} | {r['wall_us']:.0f} | {c['kernels']} ({c['triton']}/{c['matmul']}/"
                     f"{c['attention']}/{c['conv']}) | " +
                     " | ".join(f"{sum(m[p] for p in ps):.0f} ({sum(m[p] for p in ps) / r['wall_us'] * 100:.0f}%)"
                                for ps in GROUPS.values()) + " |")
    lines += ["", "Per launch (µs): wrapper Python per kernel; library call (aten self + its driver launch) "
              "per extern call; Triton (launcher + cuLaunchKernel) per Triton kernel; Dynamo+AOT per call:", "",
              "| case | wrapper/kernel | extern/call | Triton/kernel | Dynamo+AOT |", "|---|---|---|---|---|"]
    for r in rs:
        c, m = r["counts"], r["measured"]
        ext = c["matmul"] + c["attention"] + c["conv"]
        lib = m["matmul"] + m["attention"] + m["conv"] + m["cu_library"]
        tri = m["launcher"] + m["cu_triton"]
        lines.append(f"| {r['case']} | {m['wrapper'] / c['kernels']:.1f} | {lib / max(ext, 1):.1f} | "
                     f"{tri / max(c['triton'], 1):.1f} | {m['dynamo'] + m['aot']:.0f} |")
    if any("predicted" in r for r in rs):
        lines += ["", "gpusim on the host given (µs per call):", "",
                  "| case | wall | predicted e2e | host | call | Triton | matmul | attention | conv | aux |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rs:
            p = r.get("predicted")
            if p:
                lines.append(f"| {r['case']} | {r['wall_us']:.0f} | {p['e2e_us']:.0f} | {p['host_us']:.0f} | " +
                             " | ".join(f"{p[k]:.0f}" for k in ("call", "triton", "matmul", "attention",
                                                                 "conv", "aux")) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.score.compiled_profile")
    ap.add_argument("--records", nargs="+", required=True, help="zoo_run records with host_profile")
    ap.add_argument("--host", default=None, help="a lease's host calibration (<gpu>/host/*.toml)")
    ap.add_argument("--gpu", default="h200")
    a = ap.parse_args(argv)
    from validation.records.store import read_records
    recs = [r for f in a.records for r in read_records(f)]
    spec = host = None
    if a.host:
        from gpusim.hw.spec import calibrated_name, load_spec
        from validation.score.zoo_accuracy import lease_setup
        spec, host = lease_setup(load_spec(calibrated_name(a.gpu)), a.host)
    print(markdown(rows(recs, spec, host)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
