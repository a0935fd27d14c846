"""Skinny 16-bit products (a few rows times a large weight) as a decode step runs them: the data
the weight-streaming GEMM law is fitted on (issue 34).

``python3 -m validation.measure.skinny_gemm --out FILE.jsonl [--budget-s 150] [--set all|bias]``

Why not the dispatch sweep (``validation.measure.microbench``): it flushes the L2 with a 2x-L2
write before each call, so every product it times starts while the L2 writes the flush buffer's
dirty lines back to DRAM. A decode step streams its weights back to back, each read once and none
resident in the L2 (the weights are many times its size). So here each case cycles through
``copies`` distinct weight tensors of the same shape (together at least 4x the L2, so none is
resident when it is read again), ``F.linear(x, W_i)`` one after another with no flush and no sync
between them, one profiler session over ``passes`` cycles after a warm-up cycle; the record is
the median device time per kernel position (the GEMM, and cuBLAS's split-K reduce where one runs)
over all products. Shapes: the projections and LM heads of decoders from 0.1B to 8B, and square
products from 1 to 128 MB; rows 1, 8, 32 and 128; bf16 (a few with a bias, as Qwen's q/k/v).

Output: JSONL, an environment line (``kind: environment``) then one ``kind: skinny_gemm`` line a
case: M, N, K, dtype, bias, weight bytes, copies, kernels ``[{name, us}]`` (median per position),
``kernel_sum_us``; flushed after each case; cases stop starting after ``--budget-s`` seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

SHAPES = [(1024, 1024), (2048, 2048), (4096, 4096), (8192, 8192), (512, 2048), (2048, 512),
          (8192, 2048), (2048, 8192), (14336, 4096), (4096, 14336), (1024, 4096), (896, 896),
          (4864, 896), (896, 4864), (3072, 768), (768, 3072), (10240, 2560), (2560, 10240),
          (32000, 4096), (128256, 2048), (151936, 896), (50257, 768)]
BIASED = [(896, 896), (2048, 2048), (4096, 4096)]
ROWS = (1, 8, 32, 128)


#: ``--set bias``: biased products at 1-16 rows (Phi-1.5's q/k/v/dense, fc1, fc2; Qwen2-0.5B's q, k/v and MLP), where
#: the H200 generate records show cuBLAS splitting Phi's biased fc2 (``splitK_bias`` + ``splitKreduce_kernel``) and the
#: biased products slower than the unbiased law; with the same shapes unbiased at 2, 4 and 16 rows (the rows between)
BIAS_SET = [(2048, 2048), (8192, 2048), (2048, 8192), (896, 896), (128, 896), (4864, 896), (896, 4864)]
BIAS_ROWS = (1, 2, 4, 8, 16)


def cases(which: str = "all") -> list[dict]:
    """The products of ``which`` set: ``all`` (the decoders' shapes, unbiased, and a few biased) or ``bias``."""
    if which == "bias":
        out = [{"M": m, "N": n, "K": k, "dtype": "bfloat16", "bias": True} for (n, k) in BIAS_SET for m in BIAS_ROWS]
        return out + [{"M": m, "N": n, "K": k, "dtype": "bfloat16", "bias": False} for (n, k) in BIAS_SET[:3]
                      for m in (2, 4, 16)]
    out = [{"M": m, "N": n, "K": k, "dtype": "bfloat16", "bias": False} for (n, k) in SHAPES for m in ROWS]
    out += [{"M": m, "N": n, "K": k, "dtype": "bfloat16", "bias": True} for (n, k) in BIASED for m in (1, 8)]
    return out


def run_case(c: dict, l2_bytes: int, passes: int = 3) -> dict:
    dt = getattr(torch, c["dtype"])
    wbytes = c["N"] * c["K"] * dt.itemsize
    copies = max(2, -(-4 * l2_bytes // wbytes))
    copies = min(copies, 128)
    ws = [torch.randn(c["N"], c["K"], device="cuda", dtype=dt) for _ in range(copies)]
    b = torch.randn(c["N"], device="cuda", dtype=dt) if c["bias"] else None
    x = torch.randn(c["M"], c["K"], device="cuda", dtype=dt)
    fn = torch.nn.functional.linear
    for w in ws:                                   # warm-up cycle: cuBLAS heuristics, handles
        fn(x, w, b)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(passes):
            for w in ws:
                fn(x, w, b)
        torch.cuda.synchronize()
    ks = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                 and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()),
                key=lambda e: e.time_range.start)
    calls = passes * copies
    per = len(ks) // calls if calls else 0
    rec = dict(c, kind="skinny_gemm", weight_bytes=wbytes, copies=copies, passes=passes, kernel_count=len(ks))
    if per == 0 or per * calls != len(ks):
        rec["failed"] = f"{len(ks)} kernels over {calls} products"
        return rec
    kernels = []
    for i in range(per):
        col = [ks[j * per + i] for j in range(calls)]
        kernels.append({"name": col[0].name[:120], "us": round(statistics.median(e.device_time for e in col), 3)})
    rec["kernels"] = kernels
    rec["kernel_sum_us"] = round(sum(k["us"] for k in kernels), 3)
    del ws
    torch.cuda.empty_cache()
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--set", default="all", choices=("all", "bias"), help="which products (cases())")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("skinny_gemm: needs a CUDA GPU", file=sys.stderr)
        return 2
    from validation.measure.decode_run import environment
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    t0 = time.time()
    with open(a.out, "a") as f:
        f.write(json.dumps({**environment(), "l2_bytes": l2, "sm_count": props.multi_processor_count}) + "\n")
        for c in cases(a.set):
            if time.time() - t0 > a.budget_s:
                break
            try:
                rec = run_case(c, l2)
            except Exception as e:  # noqa: BLE001 - one failed case must not end the sweep
                rec = dict(c, kind="skinny_gemm", failed=f"{type(e).__name__}: {str(e)[:200]}")
            f.write(json.dumps(rec) + "\n")
            f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
