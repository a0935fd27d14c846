"""16-bit 1x1 convolutions on maps whose pixel count breaks 16-byte alignment, past 8x8, at batch 1-256: where
cuDNN hands them to cuBLAS's misaligned (``align2`` / ``align1``) CUTLASS GEMMs and where it runs its own
implicit GEMM with layout transforms (issue 35).

``python3 -m validation.measure.cnn_dispatch_mis --out FILE.jsonl [--budget-s 200] [--reps 5] [--device cpu]``

Why: ``validation/results/h200/cnn_dispatch.jsonl`` shows every 16-bit 1x1 of Cin x Cout 54 k - 2 M on
10x10 maps at batch 2-64 running cuBLAS's ``align2`` CUTLASS kernels (at most 0.20 of the tensor peak),
where gpusim's lowering gives those over ``LARGE_POINTWISE`` (Cin x Cout > 2^18) the fast ``conv`` class
(``gpusim.lower.conv.pointwise_gemm_variant``), from broad H100 AMP records at batch 256 on 14x14 maps
that ran cuDNN's implicit GEMM with transforms. This sweep lays out the boundary between the two: maps of
9, 10, 14 and 15 px (81, 100, 196, 225 pixels: 8-byte, 8-byte, 8-byte and 2-byte aligned rows), the same
channel pairs, batch 1-256.

Method: each point is a ``validation.measure.cnn_dispatch`` point (op ``pw_mis``; NCHW, no bias, stride
1) warmed up, then profiled: ``reps`` calls in one profiler session, L2 flushed before each
(:func:`validation.measure.timing.profile_call`), median device time per kernel; PyTorch's default flags
(cudnn.benchmark off). Points are interleaved so a cut sweep still spans the grid.
"""

from __future__ import annotations

from validation.measure.bench_common import profiled_run, sweep_main
from validation.measure.cnn_dispatch import PW_SMALL, _conv, describe, make

HW = (9, 10, 14, 15)
N = (1, 4, 16, 64, 128, 256)


def points(small: bool = False) -> list[dict]:
    if small:
        return [_conv("pw_mis", 2, 8, 16, 9, 1, 1, "float32")]
    pts = [_conv("pw_mis", n, ci, co, hw, 1, 1, "bfloat16") for n in N for hw in HW for (ci, co) in PW_SMALL]
    step = 7
    return [pts[i] for r in range(step) for i in range(r, len(pts), step)]


def main(argv=None) -> int:
    return sweep_main(argv, __doc__, "cnn_dispatch_mis", points, profiled_run("cnn_dispatch", make), describe,
                      200.0)


if __name__ == "__main__":
    raise SystemExit(main())
