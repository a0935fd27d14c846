"""Which misaligned GEMMs torch.compile pads (Inductor's ``pad_mm``) on this GPU, and the figures its gate
reads (issue 35).

``python3 -m validation.measure.pad_mm_gate --out FILE.jsonl [--reps 5] [--device cpu]``

Why: ``pad_mm`` benchmarks a padded GEMM against the unpadded one only when it counts the product as
compute-bound: intensity ``MNK / (MK + KN + MN)`` above half a machine balance that torch derives from its
own device table (``torch/_inductor/analysis/device_info.py``) or, for a GPU the table lacks, from Triton's
estimate (SMs x max clock x ops per cycle over memory clock x bus width). gpusim's lowering
(``gpusim.lower.pad_mm``) put that gate at the dense balance of each spec, from the H100 records; the
H200's held-out OPUS-MT LM head (384 x 512 x 58101 bf16, intensity 219) ran unpadded where that gate says
padded. This sweep reads the gate's inputs on the GPU (``get_device_tflops``, ``get_gpu_dram_gbps``,
``datasheet_tops``, ``is_mm_compute_bound``) and compiles an ``nn.Linear`` without bias (a parameter
weight, as a model's LM head) over misaligned vocabularies at intensities 59-552, in bf16, fp16 and
fp32, recording which kernels the compiled call launches.

Method: per point, Dynamo is reset and the module compiled with PyTorch's default flags
(``torch.compile``, default mode); the first call (compilation, ``pad_mm``'s own benchmark) is timed,
then the compiled call is profiled: ``reps`` calls in one profiler session, L2 flushed before each
(:func:`validation.measure.timing.profile_call`), median device time per kernel. A point also carries the
gate's inputs as torch computes them on this GPU, the ``pad_mm_bench`` counter (how many
padded-against-unpadded benchmarks the compilation ran), and the benchmark's two sides rebuilt in eager
(:func:`bench_pair`: Inductor's ``benchmark_gpu`` of the unpadded and the padded call, and the padding
copy's kernels).
"""

from __future__ import annotations

import torch

from validation.measure.bench_common import sweep_main

#: (M, K, N): an LM head over an odd vocabulary, M the tokens (intensity 59 .. 552 at K 768), and
#: OPUS-MT's own head
SHAPES_16 = tuple((m, 768, 50257) for m in (64, 128, 192, 256, 384, 512, 768, 1024, 2048)) + ((384, 512, 58101),)
SHAPES_32 = tuple((m, 768, 50257) for m in (128, 512, 2048))


def points(small: bool = False) -> list[dict]:
    if small:
        return [{"op": "pad_mm", "M": 8, "K": 16, "N": 33, "dtype": "float32"}]
    pts = [{"op": "pad_mm", "M": m, "K": k, "N": n, "dtype": dt} for dt in ("bfloat16", "float16")
           for (m, k, n) in SHAPES_16]
    return pts + [{"op": "pad_mm", "M": m, "K": k, "N": n, "dtype": "float32"} for (m, k, n) in SHAPES_32]


def gate(p: dict) -> dict:
    """The figures ``pad_mm``'s gate reads, as torch computes them here (None where it raises)."""
    from torch._inductor import utils
    from torch._inductor.fx_passes import pad_mm
    dt = getattr(torch, p["dtype"])
    out = {}
    for key, f in (("device_tflops", lambda: utils.get_device_tflops(dt)),
                   ("dram_gbps", utils.get_gpu_dram_gbps),
                   ("compute_bound", lambda: pad_mm.is_mm_compute_bound(p["M"], p["K"], p["N"], dt))):
        try:
            v = f()
            out[key] = v if isinstance(v, bool) else float(v)
        except Exception as e:  # noqa: BLE001
            out[key] = None
            out[f"{key}_error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    try:
        from torch._inductor.analysis.device_info import datasheet_tops
        v = datasheet_tops(dt)
        out["datasheet_tops"] = None if v is None else float(v)
    except Exception as e:  # noqa: BLE001
        out["datasheet_tops"] = None
        out["datasheet_tops_error"] = str(e).splitlines()[0][:200]
    m, k, n = p["M"], p["K"], p["N"]
    out["intensity"] = m * n * k / (m * k + k * n + m * n)
    return out


def bench_pair(p: dict, reps: int) -> dict:
    """What ``pad_mm``'s benchmark compares, rebuilt in eager as its ``_should_pad`` runs it (a parameter
    weight is a graph input: its padding is timed): ``ori_ms``, the unpadded ``mm(x, w.t())``, and
    ``pad_ms``, ``constant_pad_nd`` of the operands that need it, the padded ``mm`` and the slice, each with
    Inductor's own ``benchmark_gpu`` (warm-up 5); and the kernels of the eager padding copy alone, profiled
    (:func:`validation.measure.timing.profile_call`)."""
    from torch._inductor.runtime.benchmarking import benchmarker
    from validation.measure import timing as measure
    dt = getattr(torch, p["dtype"])
    m, k, n = p["M"], p["K"], p["N"]
    align = 8 if dt in (torch.float16, torch.bfloat16) else 4
    pk, pn = (-k) % align, (-n) % align
    pm = (-m) % align if m != 1 else 0
    x = torch.randn(m, k, device="cuda", dtype=dt)
    w = torch.randn(n, k, device="cuda", dtype=dt)
    wt = w.t()

    def ori():
        torch.mm(x, wt)

    def pad():
        xp = torch.constant_pad_nd(x, [0, pk, 0, pm]) if (pk or pm) else x
        wp = torch.constant_pad_nd(wt, [0, pn, 0, pk]) if (pk or pn) else wt
        r = torch.mm(xp, wp)
        return r[:m, :n]
    out = {"ori_ms": float(benchmarker.benchmark_gpu(ori, warmup=5)),
           "pad_ms": float(benchmarker.benchmark_gpu(pad, warmup=5))}
    prof = measure.profile_call(lambda: torch.constant_pad_nd(wt, [0, pn, 0, pk]), reps=reps)
    out["pad_copy_kernels"] = prof.get("kernels")
    return out


def run(p: dict, reps: int, device: str) -> dict:
    from torch._dynamo.utils import counters
    from validation.measure import timing as measure
    torch._dynamo.reset()
    counters.clear()
    rec = dict(p, kind="pad_mm_gate", mode="compiled")
    if device == "cuda":
        rec["gate"] = gate(p)

    def build():
        dt = getattr(torch, p["dtype"])
        lin = torch.nn.Linear(p["K"], p["N"], bias=False, device=device, dtype=dt)
        x = torch.randn(p["M"], p["K"], device=device, dtype=dt)
        return torch.compile(lin), (x,)
    rec = measure.profiled_record(rec, build, reps, device, first_key="compile_s")
    rec["pad_mm_bench"] = int(counters["inductor"].get("pad_mm_bench", 0))
    if device == "cuda":
        try:
            rec["bench_pair"] = bench_pair(p, reps)
        except Exception as e:  # noqa: BLE001
            rec["bench_pair"] = {"failed": str(e).splitlines()[0][:200]}
    return rec


def describe(p: dict) -> str:
    return f"pad_mm {p['M']}x{p['K']}x{p['N']} {p['dtype']}"


def main(argv=None) -> int:
    return sweep_main(argv, __doc__, "pad_mm_gate", points, run, describe, 150.0)


if __name__ == "__main__":
    raise SystemExit(main())
