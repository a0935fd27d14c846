"""``gpusim calibrate``: measure the GPU at hand and write a spec file (and the host's
profile beside it).

Microbenchmarks (``run_microbenchmarks``, needs CUDA) produce raw JSON; ``fit_spec``
(pure, runs anywhere) turns it into the ``[model]`` parameters of a spec, keeping the
datasheet peaks, and ``fit_host`` into the figures of a host profile (:mod:`gpusim.hw.host`;
``--host-only`` writes only that). Each fitted figure names the benchmark and the date.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import date

import numpy as np
import torch

from gpusim.util.atomic import atomic_write
from validation.fit.fit_dispatch import fit_dispatch
from gpusim.util.errors import GpusimError
from gpusim.hw.spec import GPUSpec, calibrated_name, datasheet_name, load_spec
from gpusim.hw.spec_io import dump_spec, with_provenance
from validation.measure.decode_host_probe import inforward_figures
from gpusim.hw.host import FIELDS as HOST_FIELDS, HostProfile, dump_host, host_names, load_host
from validation.measure import timing as measure
from validation.measure.microbench import run_sweeps
from validation.measure.aten_bench import aten_microbenchmarks, fit_aten
from validation.measure.host_bench import fastest_rounds, host_microbenchmarks, model_call_figures, python_law
from validation.measure.graph_gap import gap_figure, gap_probe
from validation.measure.reference_forwards import (compiled_reference_walls, fastest_walls, fit_forward,
                                                  reference_walls)
from gpusim.report.viz import check_target


def _log(msg):
    if sys.stderr.isatty():
        print(msg, file=sys.stderr, flush=True)


def run_microbenchmarks() -> dict:
    measure.require_cuda()
    raw = {"env": measure.env_info(), "copy": [], "add": [], "host": {}, "matmul": []}
    dev = "cuda"
    # a) copy bandwidth against size, cold and warm
    for e in range(10, 32, 1):
        nbytes = 1 << e
        n = nbytes // 4
        src = torch.randn(n, device=dev)
        dst = torch.empty_like(src)
        f = lambda: dst.copy_(src)  # noqa: E731
        cold = measure.time_device(f, flush=True, reps=15 if e < 28 else 8)
        warm = measure.time_device(f, flush=False, reps=15 if e < 28 else 8)
        prof = measure.profile_kernels(f, flush=True, reps=3)["kernels"]
        profw = measure.profile_kernels(f, flush=False, reps=3)["kernels"]
        raw["copy"].append({"bytes": 2 * nbytes, "cold_us": cold["median_us"], "warm_us": warm["median_us"],
                            "kernel_cold_us": sum(k["us"] for k in prof),
                            "kernel_warm_us": sum(k["us"] for k in profw)})
        _log(f"copy {nbytes} B: cold {cold['median_us']:.1f} us warm {warm['median_us']:.1f} us")
        del src, dst
    # b) x + 1, cold: fixed and minimum kernel time
    for e in range(10, 30, 2):
        x = torch.randn((1 << e) // 4, device=dev)
        t = measure.time_device(lambda: x + 1, flush=True, reps=15)
        pk = measure.profile_kernels(lambda: x + 1, flush=True, reps=3)["kernels"]
        raw["add"].append({"bytes": 2 * (1 << e), "cold_us": t["median_us"],
                           "kernel_cold_us": sum(k["us"] for k in pk)})
        del x
    # b2) ATen kernel classes against a plain stream of the same bytes and dtype
    raw["aten"] = aten_microbenchmarks()
    # c) host costs; the device's gap between a replayed graph's kernels (a GPU figure)
    raw["host"], raw["graph_gap"] = host_microbenchmarks(), gap_probe()
    # d) matmul throughput per dtype against shape
    shapes = [(256, 256, 256), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
              (8192, 8192, 8192), (4096, 4096, 128), (8192, 128, 8192), (1000, 1000, 1000),
              (4097, 4097, 4097), (16384, 1024, 1024), (128, 4096, 4096)]
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        for m, n, k in shapes:
            if dt == torch.float32 and m * n * k > 4096 ** 3:
                reps = 5
            else:
                reps = 10
            a = torch.randn(m, k, device=dev, dtype=dt)
            b = torch.randn(k, n, device=dev, dtype=dt)
            t = measure.time_device(lambda: a @ b, flush=True, reps=reps)
            raw["matmul"].append({"dtype": str(dt).replace("torch.", ""), "m": m, "n": n, "k": k,
                                  "us": t["median_us"],
                                  "tflops": 2 * m * n * k / t["median_us"] / 1e6})
            _log(f"mm {dt} {m}x{n}x{k}: {raw['matmul'][-1]['tflops']:.1f} TFLOP/s")
            del a, b
    return raw


def fit_host(h: dict, kmin: float) -> tuple[dict, dict]:
    """The [host] figures from ``host_microbenchmarks``' raw timings (``kmin``: the GPU's
    shortest kernel, subtracted from CUDA-graph gaps). Returns (spec fields, diagnostics)."""
    diag: dict = {}
    eager_op = (h["eager_100_ops_us"] - h["eager_1_op_us"]) / 99
    view = max(0.05, (h["views_100_us"] - h["views_1_us"]) / 99)
    comp = {int(k): v for k, v in h["compiled"].items()}
    k_lo, k_hi = min(comp), max(comp)
    per_kernel = (comp[k_hi]["wall_us"] - comp[k_lo]["wall_us"]) / max(1, comp[k_hi]["kernels"] - comp[k_lo]["kernels"])
    call = comp[k_lo]["wall_us"] - comp[k_lo]["kernels"] * per_kernel
    region = None
    if h.get("regions"):
        rg = {int(k): v for k, v in h["regions"].items()}
        r_lo, r_hi = min(rg), max(rg)
        region = (rg[r_hi]["wall_us"] - rg[r_lo]["wall_us"]) / (r_hi - r_lo) - per_kernel
        diag["region_call_us"] = region
    if h.get("module_calls"):
        mc = {int(k): v for k, v in h["module_calls"].items()}
        diag["module_call_us"] = (mc[max(mc)] - mc[min(mc)]) / (max(mc) - min(mc))
    if h.get("compiled_inputs"):
        ci = {int(k): v for k, v in h["compiled_inputs"].items()}
        lo, hi = min(ci), max(ci)
        diag["compiled_input_us"] = (ci[hi]["wall_us"] - ci[lo]["wall_us"] - per_kernel * (
            ci[hi]["kernels"] - ci[lo]["kernels"])) / (hi - lo)
    cg = {int(k): v for k, v in h["cudagraph"].items()}
    g_lo, g_hi = min(cg), max(cg)
    cg_kernel = (cg[g_hi]["device_us"] - cg[g_lo]["device_us"]) / (g_hi - g_lo)
    cg_kernel = max(0.05, cg_kernel - kmin)       # the gap between kernels, not their run time
    cg_call = max(0.5, cg[g_lo]["wall_us"] - cg[g_lo]["device_us"])
    diag.update(eager_op_us=eager_op, compiled_per_kernel_us=per_kernel, compiled_call_us=call)
    lib = h.get("library_ops")
    if lib:
        diag["library_ops_us"] = lib
    out = dict(
        eager_op_us=float(max(0.5, eager_op)), eager_view_us=float(view),
        compiled_call_us=float(max(0.5, call)), compiled_kernel_us=float(max(0.5, per_kernel)),
        cudagraph_call_us=float(cg_call), cudagraph_kernel_us=float(cg_kernel),
        compiled_region_us=float(max(0.5, region)) if region else None,
        eager_library_op_us=float(max(0.5, float(np.median(list(lib.values()))))) if lib else None,
        eager_module_us=float(max(0.05, diag["module_call_us"])) if "module_call_us" in diag else None,
        compiled_input_us=float(max(0.0, diag["compiled_input_us"])) if "compiled_input_us" in diag else None)
    if h.get("sync"):
        sy = h["sync"]
        diag["sync"] = sy
        out["sync_us"] = float(max(0.5, sy["item_us"] - sy["no_item_us"]))
    if h.get("op_kinds"):
        diag["op_kinds_us"] = h["op_kinds"]
    if h.get("compiled_split"):
        split = split_launch_figures(h["compiled_split"])
        diag["compiled_split"] = h["compiled_split"]
        out.update(split)
    if h.get("launch_api_us") and h["launch_api_us"] == h["launch_api_us"]:
        out["kernel_launch_us"] = float(max(0.5, h["launch_api_us"]))
    if h.get("compiled_library") and out.get("compiled_extern_us"):
        diag["compiled_library"] = h["compiled_library"]
        out.update(library_call_figures(h["compiled_library"], out.get("compiled_triton_us"),
                                        out.get("kernel_launch_us")))
    ro = h.get("reduce_overhead")
    if ro:
        # wall = call + kernels x gap (tiny kernels) + inputs x copy; from 1x1, 8x1, 1x16
        base1, k8, i16 = ro["1x1"]["wall_us"], ro["8x1"]["wall_us"], ro["1x16"]["wall_us"]
        out["cudagraph_tree_input_us"] = float(max(0.0, (i16 - base1) / 15))
        out["cudagraph_tree_call_us"] = float(max(0.5, base1 - out["cudagraph_tree_input_us"]))
        diag["reduce_overhead"] = ro
        diag["reduce_overhead_per_kernel_us"] = (k8 - base1) / 7
        out.update(model_call_figures(h.get("model_call"), out, diag))
    gl = h.get("cudagraph_launch")
    if gl and len(gl) >= 2:
        pts = sorted((int(k), w) for k, w in gl.items())
        (k0, w0), (k1, w1) = pts[0], pts[-1]
        out["cudagraph_launch_node_us"] = float(max(0.0, (w1 - w0) / (k1 - k0)))
        diag["cudagraph_launch"] = gl
    st = h.get("stream")
    if st and st.get("kernel_sum_us"):
        # a full stream's wall over its kernel sum; never below 1 (a kernel cannot run
        # faster back to back than alone, beyond the timing's noise). A GPU figure: it
        # goes to the GPU spec (fit_spec), not to the host profile
        diag["stream_busy_factor"] = float(max(1.0, st["wall_us"] / st["kernel_sum_us"]))
        diag["stream"] = st
    if h.get("machine"):
        diag["machine"] = h["machine"].get("summary")
    return out, diag


UNIT_OF = {"float32": "fp32", "float16": "fp16_tc", "bfloat16": "bf16_tc"}


def fit_spec(raw: dict, base: GPUSpec, name: str | None = None) -> tuple[GPUSpec, dict]:
    """Fit the [model] and [host] parameters of ``base`` from raw microbenchmarks."""
    diag: dict = {}
    env = raw.get("env", {})
    l2 = float(env.get("l2_bytes") or base.l2_bytes)
    copies = raw["copy"]
    # Kernel durations as the profiler reports them (what per-kernel accuracy compares
    # with). DRAM regime: cold copies well past L2; t = fixed + bytes / bw_eff.
    key = "kernel_cold_us" if all("kernel_cold_us" in c for c in copies) else "cold_us"
    big = [c for c in copies if c["bytes"] >= 8 * l2]
    slope, icpt = np.polyfit([c["bytes"] for c in big], [c[key] for c in big], 1)
    bw_eff = 1.0 / slope * 1e6                   # bytes/s
    mem_eff = min(1.0, bw_eff / base.bandwidth)
    diag["copy_bandwidth_gbs"] = bw_eff / 1e9
    diag["dram_fit_intercept_us"] = float(icpt)
    adds = raw.get("add") or []
    akey = "kernel_cold_us" if adds and all("kernel_cold_us" in a for a in adds) else "cold_us"
    kmin = min(a[akey] for a in adds) if adds else base.kernel_min_us
    small = [c[key] for c in copies if c["bytes"] <= 64 * 1024]
    fixed = float(np.median(small)) if small else max(icpt, 0.5)
    # L2: warm copies that fit in half the L2; the slope is the L2 bandwidth
    wkey = "kernel_warm_us" if all("kernel_warm_us" in c for c in copies) else "warm_us"
    warm = [c for c in copies if 1 << 20 <= c["bytes"] <= l2 / 2]
    l2_bw = base.l2_bandwidth
    if len(warm) >= 2:
        s2, _ = np.polyfit([c["bytes"] for c in warm], [c[wkey] for c in warm], 1)
        if s2 > 0:
            l2_bw = 1.0 / s2 * 1e6
    l2_bw = max(l2_bw, bw_eff * 1.05)
    diag["l2_bandwidth_gbs"] = l2_bw / 1e9
    # the largest copy whose warm run is still clearly faster than its cold run
    resident = [c["bytes"] / 2 for c in copies
                if c[wkey] > 0 and c["bytes"] >= 1 << 20 and c[key] / c[wkey] > 1.3]
    frac = min(1.0, max(resident) / l2) if resident else base.l2_resident_fraction
    # matmul efficiency: best large-square rate against the unit's peak, per dtype
    effs = {}
    for dt, unit in UNIT_OF.items():
        rates = [r["tflops"] for r in raw.get("matmul", []) if r["dtype"] == dt and r["m"] == r["n"] == r["k"] >= 4096]
        if rates and unit in base.peak_tflops:
            effs[dt] = max(rates) / base.peak_tflops[unit]
    diag["matmul_efficiency_by_dtype"] = effs
    mm_eff = float(np.median(list(effs.values()))) if effs else base.matmul_efficiency
    host_changes, host_diag = fit_host(raw["host"], kmin)
    diag.update(host_diag)
    diag["host_changes"] = host_changes
    changes = dict(
        name=name or f"{base.name}-calibrated", source="measured",
        measured_on=str(env.get("gpu_name", "unknown GPU")), measured_date=date.today().isoformat(),
        mem_efficiency=float(mem_eff), kernel_fixed_us=float(max(0.5, fixed)),
        kernel_min_us=float(max(0.5, kmin)), l2_bandwidth_gbs=float(l2_bw / 1e9),
        l2_resident_fraction=float(max(0.05, frac)), matmul_efficiency=float(min(1.0, mm_eff)))
    if "stream_busy_factor" in host_diag:
        changes["stream_busy_factor"] = host_diag["stream_busy_factor"]
    changes.update(gap_figure(raw.get("graph_gap")))
    if raw.get("aten"):
        fitted = fit_aten(raw["aten"])
        diag["aten"] = fitted
        changes.update({k: float(v) for k, v in fitted.items()})
    if raw.get("sweeps"):             # eager kernel classes (gpusim.lower.dispatch)
        fitted = fit_dispatch(raw["sweeps"], base.replace(**changes))
        diag["dispatch"] = fitted
        changes.update({k: float(v) for k, v in fitted.items()})
    if env.get("sm_count") and int(env["sm_count"]) != base.sm_count:
        diag["sm_count_note"] = f"device reports {env['sm_count']} SMs, datasheet {base.sm_count}"
        changes["sm_count"] = int(env["sm_count"])
    if env.get("l2_bytes") and abs(l2 / 2**20 - base.l2_mib) > 0.5:
        diag["l2_note"] = f"device reports {l2 / 2**20:.0f} MiB L2, datasheet {base.l2_mib}"
        changes["l2_mib"] = float(l2 / 2**20)
    return base.replace(**changes), diag


def _slope(runs: dict) -> float | None:
    """Wall per extra kernel between the fewest and most kernels of ``{k: {wall_us,
    kernels}}``; None when the profiler saw no more kernels at the larger k."""
    rs = {int(k): v for k, v in runs.items()}
    lo, hi = rs[min(rs)], rs[max(rs)]
    dk = hi["kernels"] - lo["kernels"]
    return (hi["wall_us"] - lo["wall_us"]) / dk if dk > 0 else None


def split_launch_figures(sp: dict) -> dict:
    """``compiled_triton_us``, ``compiled_extern_us`` and ``compiled_param_us`` from
    :func:`validation.measure.host_bench.compiled_launch_split`'s runs: the wall slope per
    extra kernel of the Triton-only and extern-only chains, and per extra parameter of the
    parameter stack (its extra launches priced at the Triton slope). A figure whose runs
    launched no extra kernel is left out (the host then prices by ``compiled_kernel_us``)."""
    out = {}
    tri, ext = _slope(sp["triton"]), _slope(sp["extern"])
    if tri and ext:
        out["compiled_triton_us"] = float(max(0.5, tri))
        out["compiled_extern_us"] = float(max(0.5, ext))
    ps = {int(k): v for k, v in (sp.get("params") or {}).items()}
    if tri and len(ps) > 1:
        lo, hi = min(ps), max(ps)
        per = (ps[hi]["wall_us"] - ps[lo]["wall_us"] - tri * (ps[hi]["kernels"] - ps[lo]["kernels"])) / (hi - lo)
        out["compiled_param_us"] = float(max(0.0, per))
    return out


#: calibrate's library chain (host_bench.library_chains) -> the host figure it measures
LIBRARY_FIELDS = {"linear": "compiled_matmul_us", "attention": "compiled_attention_us", "conv": "compiled_conv_us"}


def library_call_figures(lib: dict, triton_us: float | None, launch_us: float | None) -> dict:
    """Per extern library call of each class from :func:`validation.measure.host_bench.compiled_library_split`:
    the wall slope between the shortest and longest chain, less the extra Triton kernels
    Inductor generated (at ``triton_us``) and the library's extra helper kernels (at one
    launch, ``launch_us``), per extra call. A chain that failed, or whose longer run did not
    launch one more library kernel per extra call (Inductor chose a Triton template), gives
    no figure: the host then prices that class at ``compiled_extern_us``."""
    out = {}
    for name, field in LIBRARY_FIELDS.items():
        rs = {int(k): v for k, v in (lib.get(name) or {}).items() if str(k).isdigit()}
        if len(rs) < 2:
            continue
        lo, hi = rs[min(rs)], rs[max(rs)]
        calls, tri = max(rs) - min(rs), hi["triton"] - lo["triton"]
        aux = (hi["kernels"] - hi["triton"]) - (lo["kernels"] - lo["triton"]) - calls
        if aux < 0 or (tri and triton_us is None) or (aux and launch_us is None):
            continue
        per = (hi["wall_us"] - lo["wall_us"] - tri * (triton_us or 0.0) - aux * (launch_us or 0.0)) / calls
        out[field] = float(max(0.5, per))
    return out


COMMENTS = {
    "mem_efficiency": "cold device-to-device copies of 8x L2 and more: fitted bandwidth / datasheet peak",
    "kernel_fixed_us": "median profiled duration of cold copy kernels of 64 KiB and below",
    "kernel_min_us": "shortest profiled cold x+1 kernel",
    "l2_bandwidth_gbs": "slope of profiled warm (L2-resident) copy kernels",
    "l2_resident_fraction": "largest warm copy still 1.5x faster than cold / L2 size",
    "matmul_efficiency": "median over fp32/fp16/bf16 of best square GEMM rate / peak",
    "eager_op_us": "wall per eager torch.add in a loop of 100",
    "eager_view_us": "wall per view in a loop of 100",
    "compiled_call_us": "torch.compile'd matmul chain: wall at k kernels, fitted call + k * launch",
    "compiled_kernel_us": "same fit, per kernel",
    "cudagraph_call_us": "graph replay wall minus its device time",
    "cudagraph_kernel_us": "graph of 32 vs 1 tiny kernels, per-kernel device gap",
    "graph_kernel_gap_us": "CUDA graph of 160 kernels of a decoder layer (norms, skinny GEMMs, adds, Triton; validation/measure/graph_gap.py gap_probe): replay span by CUDA events less the eager kernel sum, per gap",
    "stream_busy_factor": "CUDA graph of 32 bf16 2048^3 GEMMs + bias adds replayed back to back: wall per replay / profiled kernel sum (L2 flushed)",
    "compiled_region_us": "a 6-op chain run as 6 separately compiled regions vs 1: extra wall per region",
    "eager_library_op_us": "median over linear, layer_norm, conv2d, sdpa of eager wall per op in a loop of 50",
    "eager_module_us": "nn.Sequential of 64 vs 1 nn.Identity: wall per extra module call",
    "compiled_input_us": "torch.compile'd stack+sum of 64 vs 1 tensor inputs: wall per extra input, launches subtracted",
    "sync_us": "tiny kernel + .item() minus the same without .item(): one host<->device sync",
    "cudagraph_tree_call_us": "torch.compile(mode='reduce-overhead') of one matmul+relu: replay wall less inputs",
    "cudagraph_tree_input_us": "same with 16 vs 1 tensor inputs: wall per extra input",
    "compiled_model_call_us": "a tiny Llama's (2 layers, hidden 128) static-cache generate, its compiled call stamped (validation/measure/model_call_probe.py): median over the tokens less cudagraph_tree_call_us and cudagraph_tree_input_us per further input",
    "cudagraph_launch_node_us": "host time of one graph.replay() (cudaGraphLaunch, stream drained before each) of 256 vs 1 tiny in-place adds: per extra node",
    "compiled_triton_us": "torch.compile'd chain of k sin+1 steps, each a graph output, fusion off (max_fusion_size=1), k = 1 and 16: wall per extra Triton kernel the profiler saw",
    "compiled_extern_us": "torch.compile'd chain of k 16x16 matmuls with one weight (extern_kernels.mm, no Triton), k = 1 and 16: wall per extra kernel the profiler saw",
    "compiled_param_us": "torch.compile'd nn.Module stacking and summing its 16 vs 1 parameters: wall per extra parameter, extra launches at the Triton figure",
    "compiled_matmul_us": "torch.compile'd chain of k bf16 relu(F.linear(x, W[i], B[i])), 256 x 256 (extern_kernels.addmm: cuBLASLt with a bias epilogue), k = 1 and 16: wall per extra library call, extra Triton kernels at compiled_triton_us and helper kernels at kernel_launch_us taken out",
    "compiled_attention_us": "torch.compile'd chain of k bf16 relu(sdpa(q, k, v)) under cuDNN's backend (aten._scaled_dot_product_cudnn_attention), 2x4 heads of 128 x 64, k = 1 and 16: wall per extra library call, extra Triton kernels at compiled_triton_us and helper kernels at kernel_launch_us taken out",
    "compiled_conv_us": "torch.compile'd chain of k bf16 3x3 relu(F.conv2d(x, W[i], B[i])), 32 channels of 16x16 (aten.convolution: cuDNN), k = 1 and 16: wall per extra library call, extra Triton kernels at compiled_triton_us and helper kernels at kernel_launch_us taken out",
    "kernel_launch_us": "median CPU time of one cudaLaunchKernel call (profiler) in a loop of eager adds",
    "eager_forward_factor": "gpusim's reference GPT-2 and ResNet-50 forwards (tiny, bf16, host-bound; timed thrice over a run: the median in a full calibration, the fastest of every round's with --host-only and --forward-only): eager wall / gpusim's prediction with the tight-loop host figures",
    "eager_library_forward_factor": "the same reference forwards' eager walls less gpusim's price of all but their library calls' own dispatch (other ops, views, the model's Python at the tight-loop figures), over that dispatch's price: the in-forward slowdown put on the library calls alone (validation.measure.reference_forwards.library_forward_factor)",
    "compiled_forward_factor": "the same reference forwards under torch.compile (default mode, no_grad; timed in three windows a round, the fastest window kept: one round in a full calibration, the fastest of the rounds' with --host-only and --forward-only): compiled wall / gpusim's compiled prediction with the compiled chains' host figures",
    "aten_strided_efficiency": "fp32 x + row-vector (broadcast) add: bandwidth / contiguous add's, 256 MiB operands",
    "aten_strided_efficiency_16bit": "same in bf16",
    "aten_reduction_efficiency": "fp32 row sum (1024 columns): bandwidth / contiguous add's",
    "aten_norm_efficiency": "fp32 layer_norm (1024 columns): bandwidth / contiguous add's",
    "aten_norm_efficiency_16bit": "same in bf16",
    "reduction_min_us": "median of profiled 8x128 sum and layer_norm kernels",
    "gemm_min_us": "shortest profiled 8x128 @ 128x128 mm (fp32, bf16)",
}


def calibrate(out_path: str, base_name: str | None = None) -> GPUSpec:
    """Measure this machine's GPU and write its spec to ``out_path`` (the raw measurements beside it,
    ``out_path.raw.json``) and this machine's host profile beside it (``<stem>-host.toml``). The base spec
    (``base_name``, else the GPU's datasheet spec) and the output folder are checked first: it takes minutes."""
    check_target(out_path)
    measure.require_cuda()
    base = load_spec(base_name or measure.gpu_name_short())
    raw = run_microbenchmarks()
    sweeps_path = out_path + ".sweeps.json"
    raw["sweeps"] = run_sweeps(sweeps_path, deadline_s=120.0)
    stem = os.path.splitext(os.path.basename(out_path))[0]
    spec, diag = fit_spec(raw, base, name=stem)
    changes = diag.pop("host_changes")
    changes.update(fit_forward(raw["host"], spec, host_profile(changes, "fit", diag, ""), diag))
    raw["fit"] = diag
    atomic_write(out_path + ".raw.json", json.dumps(raw, indent=1))
    changed = [k for k in list(COMMENTS) + ["sm_count", "l2_mib"]
               if getattr(spec, k, None) != getattr(base, k, None)]
    prov = measured_provenance(spec, changed, spec.measured_date)
    prov.update({k: ("measured", f"{spec.measured_on}, {spec.measured_date}, "
                     f"validation/fit/fit_dispatch.py (fit_dispatch) on {sweeps_path}")
                 for k in diag.get("dispatch", {})})
    spec = with_provenance(spec, prov)
    dump_spec(spec, out_path)
    host_path = os.path.join(os.path.dirname(out_path) or ".", f"{stem}-host.toml")
    dump_host(host_profile(changes, f"{stem}-host", diag, "gpusim calibrate"), host_path)
    return spec


def measured_provenance(spec: GPUSpec, keys, day: str) -> dict:
    """The provenance of figures this calibration measured: the GPU, the day and what
    was timed (:data:`COMMENTS`), so the written spec says where each came from."""
    gpu = spec.measured_on or spec.display_name
    what = {**COMMENTS, "sm_count": "device properties: multi_processor_count",
            "l2_mib": "device properties: L2_cache_size"}
    return {k: ("measured", f"{gpu}, {day}, gpusim calibrate (validation/fit/calibrate.py): {what[k]}")
            for k in keys if k in what}


def host_profile(changes: dict, name: str, diag: dict, command: str,
                 base: HostProfile | None = None) -> HostProfile:
    """A host profile of the figures ``changes`` measured on this machine today (each
    with its benchmark as provenance), the rest from ``base`` (the reference host when
    None), and the model's Python law scaled to this host (:func:`python_law`)."""
    base = base or load_host()
    machine = diag.get("machine") or "this machine"
    day = date.today().isoformat()
    prov = dict(base.provenance)
    vals = {k: getattr(base, k) for k in HOST_FIELDS}
    for k, v in changes.items():
        if v is None:
            continue
        vals[k] = v
        prov[k] = ("measured", f"{machine}, {day}, {command}: {COMMENTS.get(k, k)}")
    law, law_prov = python_law(vals.get("eager_module_us"), vals.get("cudagraph_tree_call_us"))
    law = {k: v for k, v in law.items() if changes.get(k) is None}     # a measured figure beats the law
    vals.update(law)
    prov.update({k: p for k, p in law_prov.items() if k in law})
    return HostProfile(name=name, description=f"{machine} (gpusim {command or 'calibrate'}, {day})",
                       path="", provenance=prov, **vals)


def calibrate_host(out_path: str, base_name: str | None = None, rounds: int = 3) -> HostProfile:
    """Measure only this machine's host figures and write them as a host profile to
    ``out_path`` (the raw timings beside it, ``out_path.raw.json``). ``base_name``: the
    GPU spec the reference forwards are predicted on (default: the calibrated spec of the
    GPU at hand); figures a run does not measure come from the reference host. ``rounds``
    runs of the benchmarks, each figure the fastest (:func:`fastest_rounds`: shared hosts
    slow down in episodes; the profile describes the host without them)."""
    base = _host_base(out_path, base_name)
    runs = [host_microbenchmarks() for _ in range(max(1, rounds))]
    raw = ({"env": measure.env_info(), "host": runs[0]} if len(runs) == 1 else
           {"env": measure.env_info(), "host": fastest_rounds(runs), "host_rounds": runs})
    changes, diag = fit_host(raw["host"], base.kernel_min_us)
    stem = os.path.splitext(os.path.basename(out_path))[0]
    cmd = "gpusim calibrate --host-only"
    prof = host_profile(changes, stem, diag, cmd)     # in-forward class figures: on record, not adopted (eager_token.md)
    changes.update(fit_forward(raw["host"], base, prof, diag))
    diag["inforward"] = inforward_figures(raw["host"], prof)
    raw["fit"] = diag
    return _write_host(out_path, host_profile(changes, stem, diag, cmd), raw)


def _host_base(out_path: str, base_name: str | None) -> GPUSpec:
    """The checks a host-side calibration makes before it measures (the output can be
    written, CUDA is there), and its base spec: ``base_name``, else the calibrated spec
    of the GPU at hand, else its datasheet spec."""
    check_target(out_path)
    measure.require_cuda()
    short = measure.gpu_name_short()
    return load_spec(base_name or calibrated_name(short) or short)


def _write_host(out_path: str, host: HostProfile, raw: dict) -> HostProfile:
    """``host`` written to ``out_path`` and the raw timings beside it."""
    atomic_write(out_path + ".raw.json", json.dumps(raw, indent=1))
    dump_host(host, out_path)
    return host


def calibrate_forward(out_path: str, base_name: str | None = None, rounds: int = 3) -> HostProfile:
    """Re-time only the host's in-forward speed: the reference forwards, ``rounds`` rounds,
    and ``eager_forward_factor`` re-fitted on their fastest (:func:`fastest_walls`) against the tight-loop
    figures of this GPU kind's host profile (``hosts/<datasheet>-host.toml``, else the
    reference host), written as a host profile. About 30 s on an H100 host. The host's
    speed drifts within minutes on shared machines (on the zoo's host leases,
    re-timing the references beside each case took eager end-to-end error from 17-31%
    to 6-11% median); run this right before the runs you compare."""
    base = _host_base(out_path, base_name)
    kind = f"{datasheet_name(measure.gpu_name_short())}-host"
    host = load_host(kind if kind in host_names() else None)
    walls = [reference_walls() for _ in range(max(1, rounds))]
    comp = [compiled_reference_walls() for _ in range(max(1, rounds))]
    raw = {"env": measure.env_info(), "host": {"reference_walls_rounds": walls,
                                               "reference_walls": fastest_walls(walls),
                                               "compiled_reference_walls_rounds": comp,
                                               "compiled_reference_walls": fastest_walls(comp)},
           "fit": {}}
    changes = fit_forward(raw["host"], base, host, raw["fit"])
    stem = os.path.splitext(os.path.basename(out_path))[0]
    return _write_host(out_path, host_profile(changes, stem, {}, "gpusim calibrate --forward-only",
                                              base=host), raw)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="gpusim calibrate")
    ap.add_argument("--out", required=True)
    ap.add_argument("--base", default=None)
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--host-only", action="store_true")
    only.add_argument("--forward-only", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    try:
        if a.host_only or a.forward_only:
            spec = (calibrate_host if a.host_only else calibrate_forward)(a.out, a.base, a.rounds)
        else:
            spec = calibrate(a.out, a.base)
    except (RuntimeError, GpusimError) as e:   # no CUDA; a bad path or base spec
        print(f"gpusim: error: {e}", file=sys.stderr)
        return 2
    what = getattr(spec, "display_name", None) or f"host profile {spec.name}"
    print(f"wrote {a.out} ({what})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
