"""Stem convolutions (3 input channels: a CNN's first layer, a patch embedding) in NCHW and channels-last,
fp32 / fp16 / bf16, batch 1-32: which cuDNN kernels run and how long they take (issue 35).

``python3 -m validation.measure.cnn_stems --out FILE.jsonl [--set grid|maps] [--budget-s 150] [--reps 5] [--device cpu]``

Why: torch.compile runs every convolution channels-last (Inductor's layout optimisation), and so does a
model moved to ``channels_last``. Their stems then run cuDNN's NHWC kernels, which the zoo records show
are nothing like the NCHW ones: at batch 32 on 224 px, a 3x3 stride-2 stem to 32 channels takes 28 us in
fp16 (``sm80_xmma_fprop_implicit_gemm_indexed``), 67 us in bf16 (``convolve_common_engine_float_NHWC``);
ConvNeXt-V2's 4x4 stride-4 bf16 stem takes 123 us (``conv2d_grouped_direct_kernel``) where gpusim says
7 us; a 7x7 stride-2 fp16 stem takes 60 us where gpusim says 218. The earlier sweeps hold only 7x7 and
16x16 stems. This one lays the stems out: filter / stride (3/2, 4/4, 7/2, 14/14, 16/16), output
channels 16-96 (768 for the patch embeddings), maps of 160 and 224 px, batch 1, 8 and 32; and 18
points of the same stems as a torch.compile'd ``nn.Conv2d`` (NCHW in, as a model's first layer), to
check that Inductor's call runs the channels-last kernels. ``--set maps``: channels-last 3x3/2, 4x4/4 and 7x7/2
stems on maps of 96-320 px at batch 1-32, where cuDNN switches kernels with the map (the grid's bf16 4x4/4 stems
run a direct kernel at 160 px and an implicit GEMM at 224). Nothing here is a zoo, held-out or published model.

Method: each point (``conv2d(x[N, 3, HW, HW], w[Cout, 3, k, k], stride, padding)``, no bias; the input
and weight NCHW-contiguous or ``channels_last``) is warmed up, then profiled: ``reps`` calls in one
profiler session, L2 flushed before each (:func:`validation.measure.timing.profile_call`), median
device time per kernel; PyTorch's default flags (cudnn.benchmark off, cudnn.allow_tf32 on). Points are
interleaved so a cut sweep still spans the grid; none starts after ``--budget-s`` seconds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from validation.measure.bench_common import sweep_main

#: (filter, stride, padding, output channels): the stems of the CNN and ViT families
STEMS = ((3, 2, 1, (16, 24, 32, 64)), (4, 4, 0, (40, 64, 80, 96)), (7, 2, 3, (32, 64, 96)),
         (14, 14, 0, (384, 768)), (16, 16, 0, (192, 768)))
HW = (160, 224)
#: ``--set maps``: the channels-last stems over maps of 96-320 px
MAP_STEMS = ((3, 2, 1, (32, 64, 96)), (4, 4, 0, (40, 80, 128)), (7, 2, 3, (32, 64, 96)))
MAP_HW = (96, 128, 160, 192, 224, 256, 288, 320)
MAP_N = (1, 8, 16, 32)
N = (1, 8, 32)
DTYPES = ("float32", "float16", "bfloat16")
LAYOUTS = ("channels_last", "nchw")


def _stem(n, co, hw, k, s, pad, dt, layout):
    return {"op": "stem", "N": n, "Cin": 3, "Cout": co, "HW": hw, "k": k, "stride": s, "padding": pad,
            "groups": 1, "dtype": dt, "layout": layout}


def map_points() -> list[dict]:
    """``--set maps``: channels-last eager stems over map sizes, in a strided order."""
    pts = [dict(_stem(n, co, hw, k, s, pad, dt, "channels_last"), set="maps") for (k, s, pad, cos) in MAP_STEMS
           for co in cos for hw in MAP_HW for n in MAP_N for dt in DTYPES]
    step = 13
    return [pts[i] for r in range(step) for i in range(r, len(pts), step)]


def points(small: bool = False) -> list[dict]:
    """Every point of the grid (``--set grid``), in a strided order (a cut sweep still spans the grid)."""
    if small:
        return [_stem(1, 8, 16, 3, 2, 1, "float32", "channels_last"), _stem(2, 8, 16, 4, 4, 0, "float32", "nchw"),
                dict(_stem(2, 8, 16, 4, 4, 0, "float32", "nchw"), mode="compiled")]
    pts = [_stem(n, co, hw, k, s, pad, dt, lay) for (k, s, pad, cos) in STEMS for co in cos for hw in HW
           for n in N for dt in DTYPES for lay in LAYOUTS]
    step = 11
    pts = [pts[i] for r in range(step) for i in range(r, len(pts), step)]
    # the same stems under torch.compile (an nn.Conv2d with its bias, NCHW input and weight: Inductor's
    # layout optimisation makes them channels-last), last: a cut sweep keeps the eager grid
    return pts + [dict(_stem(n, co, hw, k, s, pad, dt, "nchw"), mode="compiled")
                  for (k, s, pad, co, hw) in ((3, 2, 1, 32, 224), (4, 4, 0, 80, 160), (7, 2, 3, 64, 224))
                  for n in (8, 32) for dt in DTYPES]


def make(p: dict, device: str):
    """``(fn, args)`` of one point (cudnn.benchmark off, set in the timed function itself)."""
    dt = getattr(torch, p["dtype"])
    fmt = torch.channels_last if p["layout"] == "channels_last" else torch.contiguous_format
    x = torch.randn(p["N"], p["Cin"], p["HW"], p["HW"], device=device, dtype=dt).contiguous(memory_format=fmt)
    w = (torch.randn(p["Cout"], p["Cin"], p["k"], p["k"], device=device, dtype=dt) * 0.05).contiguous(
        memory_format=fmt)
    s, pad = p["stride"], p["padding"]
    if p.get("mode") == "compiled":
        conv = torch.nn.Conv2d(p["Cin"], p["Cout"], p["k"], s, pad, device=device, dtype=dt)
        return torch.compile(conv), (x,)

    def timed(x, w):
        torch.backends.cudnn.benchmark = False
        return F.conv2d(x, w, None, s, pad)
    return timed, (x, w)


def run(p: dict, reps: int, device: str) -> dict:
    """One point's record: eager, or compiled in a fresh Dynamo (18 modules would pass its recompile limit)."""
    from validation.measure import timing as measure
    mode = p.get("mode", "eager")
    if mode == "compiled":
        torch._dynamo.reset()
    return measure.profiled_record(dict(p, kind="cnn_stems", mode=mode), lambda: make(p, device), reps, device)


def describe(p: dict) -> str:
    return (f"stem N{p['N']:<3} 3->{p['Cout']:<4} {p['HW']:>3}px k{p['k']} s{p['stride']} {p['dtype']:<8} "
            f"{p['layout']} {p.get('mode', 'eager')}")


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--set", choices=("grid", "maps"), default="grid")
    known, rest = ap.parse_known_args(argv)
    pick = points if known.set == "grid" else (lambda small=False: points(small) if small else map_points())
    return sweep_main(rest, __doc__, "cnn_stems", pick, run, describe, 150.0)


if __name__ == "__main__":
    raise SystemExit(main())
