"""Which convolutions cuDNN wraps in NCHW <-> NHWC layout transforms, and which it hands to a GEMM:
1x1 convolutions on small maps, 1x1 stride-2 downsampling convolutions and fp32 3x3 convolutions of
few channels, at batch 1-64 (issue 35).

``python3 -m validation.measure.cnn_dispatch --out FILE.jsonl [--budget-s 170] [--reps 5] [--device cpu]``

Why: gpusim's eager lowering (``gpusim.lower.conv.conv_kernels``) decides per convolution whether
cuDNN launches ``nchwToNhwc`` / ``nhwcToNchw`` transforms around its kernel. The zoo records and the
cnn sweeps show rules it lacks, but only at the few shapes the zoo models have: 1x1 stride-2 convs
run cuDNN implicit GEMMs with an input and an output transform (the lowering gave them cuBLAS and no
transform) except at few input channels; 1x1 convs on 7x7 maps at batch 32 run cuBLAS / CUTLASS GEMMs
(no transform) in fp32 at small Cin x Cout and cuDNN with transforms at large, but always cuDNN in
16-bit, where one held-out 5x5 map ran a GEMM; fp32 3x3 convs of fewer than 128 channels run NCHW
kernels with or without an output transform by shape. This sweep lays those rules' domains out.
Nothing here is a held-out or published model.

Points (float32, bfloat16, float16; NCHW, no bias; ``conv2d(x[N, Cin, HW, HW], w[Cout, Cin/groups, k,
k], stride, padding)``): ``pw_small``: 1x1 stride 1 on 3-10 px maps, channel pairs of ShuffleNet /
EfficientNet / ResNet / ResNeXt / DenseNet tails (Cin x Cout 54 k - 2 M), batch 2-64; ``pw_s2``:
1x1 stride 2 (ResNet / RegNet downsampling shortcuts, Cin -> 2 Cin), 14-64 px, batch 1-32;
``k3``: fp32 3x3 stride 1 and 2 of 16-128 input channels, 20-128 px, batch 1-32 (and bf16 at a few
shapes). Each point is warmed up, then profiled: ``reps`` calls in one profiler session, L2 flushed
before each (:func:`validation.measure.timing.profile_call`), median device time per kernel;
PyTorch's default flags (cudnn.benchmark off, cudnn.allow_tf32 on). Output: JSONL, an environment
line (``kind: environment``) then one line per point (``kind: cnn_dispatch``: op, N, Cin, Cout, HW,
k, stride, padding, groups, dtype, kernels [{name, us}]), flushed after each; points are interleaved
so a cut sweep still spans the grid, and stop starting after ``--budget-s`` seconds (listed as
``not_reached`` in the closing ``kind: summary`` line).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from validation.measure.bench_common import profiled_run, sweep_main

#: (Cin, Cout) of 1x1 convolutions on small maps (Cin x Cout from 54 k to 2 M)
PW_SMALL = ((232, 232), (512, 128), (192, 1152), (960, 256), (256, 1536), (464, 1024), (888, 888),
            (512, 2048), (1024, 1024), (2048, 1024))
PW_SMALL_HW = (3, 5, 7, 8, 10)
PW_SMALL_N = (2, 8, 16, 32, 64)
#: Cin of 1x1 stride-2 convolutions (Cout = 2 Cin; RegNet's 120 -> 336 too)
PW_S2 = ((32, 64), (64, 128), (120, 336), (128, 256), (256, 512), (512, 1024), (1024, 2048))
PW_S2_HW = (14, 20, 28, 40, 56, 64)
PW_S2_N = (1, 16, 32)
#: Cin of fp32 3x3 convolutions (Cout = Cin and 4 Cin at stride 1, 4 Cin at stride 2)
K3_CIN = (16, 24, 32, 48, 64, 96, 128)
K3_HW = (20, 40, 80, 128)
K3_N = (1, 8, 16, 32)
DTYPES = ("float32", "bfloat16", "float16")


def _conv(op, n, ci, co, hw, k, s, dt):
    return {"op": op, "N": n, "Cin": ci, "Cout": co, "HW": hw, "k": k, "stride": s, "padding": k // 2,
            "groups": 1, "dtype": dt}


def points(small: bool = False) -> list[dict]:
    """Every point, interleaved (the three families alternate, each in a strided order)."""
    if small:
        return [_conv("pw_small", 2, 8, 16, 5, 1, 1, "float32"), _conv("pw_s2", 1, 8, 16, 8, 1, 2, "float32"),
                _conv("k3", 2, 8, 8, 8, 3, 1, "float32")]
    pw = [_conv("pw_small", n, ci, co, hw, 1, 1, dt)
          for (ci, co) in PW_SMALL for hw in PW_SMALL_HW for n in PW_SMALL_N for dt in DTYPES]
    s2 = [_conv("pw_s2", n, ci, co, hw, 1, 2, dt)
          for (ci, co) in PW_S2 for hw in PW_S2_HW for n in PW_S2_N for dt in DTYPES]
    k3 = [_conv("k3", n, ci, co, hw, 3, s, "float32")
          for ci in K3_CIN for (co, s) in ((ci, 1), (4 * ci, 1), (4 * ci, 2)) for hw in K3_HW for n in K3_N]
    k3 += [_conv("k3", n, ci, ci * 4, hw, 3, 1, "bfloat16") for ci in (24, 48, 96) for hw in (40, 128)
           for n in (1, 16)]

    def spread(xs, step=7):
        return [xs[i] for r in range(step) for i in range(r, len(xs), step)]
    lists = [spread(pw), spread(s2), spread(k3)]
    out = []
    for i in range(max(len(x) for x in lists)):
        out += [x[i] for x in lists if i < len(x)]
    return out


def make(p: dict, device: str):
    """``(fn, args)`` of one point (cudnn.benchmark off, set in the timed function itself)."""
    dt = getattr(torch, p["dtype"])
    x = torch.randn(p["N"], p["Cin"], p["HW"], p["HW"], device=device, dtype=dt)
    w = torch.randn(p["Cout"], p["Cin"] // p["groups"], p["k"], p["k"], device=device, dtype=dt) * 0.05
    s, pad, g = p["stride"], p["padding"], p["groups"]

    def timed(x, w):
        torch.backends.cudnn.benchmark = False
        return F.conv2d(x, w, None, s, pad, 1, g)
    return timed, (x, w)


def describe(p: dict) -> str:
    return (f"{p['op']:<8} N{p['N']:<3} {p['Cin']:>4}->{p['Cout']:<4} {p['HW']:>3}px k{p['k']} s{p['stride']} "
            f"{p['dtype']:<8}")


def main(argv=None) -> int:
    return sweep_main(argv, __doc__, "cnn_dispatch", points, profiled_run("cnn_dispatch", make), describe, 170.0)


if __name__ == "__main__":
    raise SystemExit(main())
