"""1x1 convolutions whose channel counts break 16-byte alignment, over NCHW: which kernel cuDNN runs, and how long
(issue 35).

``python3 -m validation.measure.cnn_chan_align --out FILE.jsonl [--set cold|warm] [--budget-s 150] [--reps 10] [--device cpu]``

Why: in the held-out ShuffleNetV2 record at batch 16, bf16 (H200), its 1x1 convolutions of 58 and 116 channels run
cuDNN's ``implicit_convolve_sgemm`` on CUDA cores (8-17 us a kernel), where the lowering gives them cuBLAS's align2
class (5-6 us); at 232 channels they run cuBLAS's ``cutlass::Kernel2 ... align2``. The cnn_dispatch_mis sweep covers
1x1 convolutions over maps that break alignment, with channel counts that are multiples of 8; this sweep covers the
channel counts that are not (a 16-bit row of 58 or 116 values is not a multiple of 16 bytes). Nothing here is a
held-out or published model.

Points: ``conv2d(x[N, Cin, HW, HW], w[Cout, Cin, 1, 1])``, no bias, NCHW, bf16, fp16 and fp32, channel pairs of
ShuffleNetV2 / GhostNet-like widths (some aligned, as controls), maps 7-56, batch 1-32; ``--set warm``: the 16-bit points
at batch 16-32 on 7-20 px maps after ``x * 1.0`` (their input L2-resident, as in a model). Each point is warmed up, then
profiled: ``reps`` calls in one profiler session, L2 flushed before each
(:func:`validation.measure.timing.profile_call`), median device time per kernel; PyTorch's default flags
(cudnn.benchmark off, allow_tf32 on). Output: JSONL, an environment line (``kind: environment``) then one line per
point (``kind: cnn_chan_align``: N, Cin, Cout, HW, dtype, kernels [{name, us}]), flushed after each; points are
interleaved so a cut sweep still spans the grid, and stop starting after ``--budget-s`` seconds (listed as
``not_reached`` in the closing ``kind: summary`` line).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from validation.measure.bench_common import profiled_run, sweep_main

#: (Cin, Cout): ShuffleNetV2 x1.0 / x0.5 / x1.5 branch widths, GhostNet-like odd widths, and aligned controls
CHANNELS = ((24, 58), (58, 58), (116, 116), (58, 116), (24, 116), (48, 48), (96, 96), (176, 176), (20, 40), (36, 36),
            (122, 122), (244, 244), (232, 232), (64, 64))
HW = (7, 10, 14, 20, 28, 40, 56)
BATCHES = (1, 8, 16, 32)
DTYPES = ("bfloat16", "float16", "float32")


def points(small: bool = False, warm: bool = False) -> list[dict]:
    """Every point, interleaved (batch and dtype vary fastest); ``warm``: the warm set (``--set warm``)."""
    if small:
        return [{"N": 2, "Cin": 6, "Cout": 10, "HW": 5, "dtype": "float32"}]
    pts = [{"N": n, "Cin": ci, "Cout": co, "HW": hw, "dtype": dt}
           for (ci, co) in CHANNELS for hw in HW for n in BATCHES for dt in DTYPES]
    if warm:
        # the CUDA-core kernel's window (batch 16-32, 7-20 px, 16-bit), after a producer of its input
        pts = [dict(p, warm=True) for p in pts if p["N"] >= 16 and p["HW"] <= 20 and p["dtype"] != "float32"]
    step = 11
    return [pts[i] for r in range(step) for i in range(r, len(pts), step)]


def make(p: dict, device: str):
    """``(fn, args)`` of one point."""
    dt = getattr(torch, p["dtype"])
    x = torch.randn(p["N"], p["Cin"], p["HW"], p["HW"], device=device, dtype=dt)
    w = torch.randn(p["Cout"], p["Cin"], 1, 1, device=device, dtype=dt) * 0.05
    if p.get("warm"):
        return (lambda x, w: F.conv2d(x * 1.0, w)), (x, w)
    return (lambda x, w: F.conv2d(x, w)), (x, w)


def describe(p: dict) -> str:
    return f"N{p['N']:<3} {p['Cin']:>4}->{p['Cout']:<4} {p['HW']:>3}px {p['dtype']:<8}{' warm' if p.get('warm') else ''}"


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--set", choices=("cold", "warm"), default="cold")
    known, rest = ap.parse_known_args(argv)
    return sweep_main(rest, __doc__, "cnn_chan_align", lambda small=False: points(small, known.set == "warm"),
                      profiled_run("cnn_chan_align", make), describe, 150.0)


if __name__ == "__main__":
    raise SystemExit(main())
