"""ViT patch embeddings (a 3-channel convolution whose kernel is its stride) and the transposed adds and
copies of token-mixing blocks, across batch, width and patch size: the data a patchify law needs (issue 35).

``python3 -m validation.measure.vit_patchify --out FILE.jsonl [--budget-s 150] [--reps 10] [--device cpu]``

Why: gpusim prices every 3-channel stem with one line fitted on the dispatch sweeps (validation/sweeps/
<gpu>.json: ``conv_stem_us`` + FLOPs at ``conv_stem_tflops``, two shapes of each of 7x7/2 and 16x16/16);
in those sweeps and in the zoo's ViT records the 16-bit 16x16/16 patch embedding of 768 channels runs
82 us at batch 1 (cuDNN's ``cutlass_tensorop_*_s16816fprop_optimized_*_128x128_32x5_nhwc_align8``) and
234 us at batch 32 where the line gives 41 and 214, and fp32 runs 39 and 504 us. Two shapes cannot tell
a floor per wave of CTAs from a rate. This sweep gives the class a domain: patch 8, 14, 16, 32 on
160-256 px, 96-1280 channels, batch 1-128, and, for the token-mixing blocks (MLP-Mixer, MaxViT's
windows), a (B, T, C) tensor plus a (B, C, T) one seen transposed and a transposed copy made
contiguous. Nothing here is a held-out or published model.

Points (float32, bfloat16, float16; NCHW, no bias: the bias is ATen's own add, priced apart):
``patchify``: ``conv2d(x[N, 3, HW, HW], w[Cout, 3, k, k], stride=k)``; ``tadd``: ``x + y.transpose(1, 2)``
with x (B, T, C) and y (B, C, T) contiguous; ``tcopy``: ``y.transpose(1, 2).contiguous()``. Each point is
warmed up, then profiled: ``reps`` calls in one profiler session, L2 flushed before each
(:func:`validation.measure.timing.profile_call`), median device time per kernel; PyTorch's default flags
(cudnn.benchmark off, cudnn.allow_tf32 on). Output: JSONL, an environment line (``kind: environment``)
then one line per point (``kind: vit_patchify``: op, shape fields, dtype, kernels [{name, us}]), flushed
after each; points are interleaved so a cut sweep still spans the grid, and stop starting after
``--budget-s`` seconds (listed as ``not_reached`` in the closing ``kind: summary`` line).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from validation.measure.bench_common import profiled_run, sweep_main

#: (patch k, image side HW) of patch embeddings: ViT/DeiT/BEiT/Mixer 16 at 160-256 px, 14 (ViT-H, EVA),
#: 32 (ViT-B/32), 8 (DINO ViT-S/8)
PATCHES = ((16, 224), (16, 160), (16, 256), (14, 224), (32, 224), (8, 224))
COUT = (96, 192, 256, 384, 512, 640, 768, 1024, 1280)
BATCHES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128)
DTYPES = ("bfloat16", "float32", "float16")
#: (B, T, C) of token-mixing transposes: Mixer-S/B at 160-256 px, MaxViT-T's grid and window stages
TOKENS = ((1, 196, 512), (8, 100, 512), (1, 256, 512), (1, 196, 768), (8, 196, 768), (32, 196, 512),
          (1, 3136, 64), (8, 784, 128), (1, 49, 256), (8, 49, 1024), (64, 49, 256), (1, 784, 128),
          (32, 196, 768), (4, 256, 384), (16, 100, 384), (2, 196, 1024))


def points(small: bool = False) -> list[dict]:
    """Every point, interleaved (batch and dtype vary fastest within a shape; shapes strided)."""
    if small:
        return [{"op": "patchify", "N": 1, "Cin": 3, "Cout": 8, "HW": 32, "k": 16, "stride": 16, "padding": 0,
                 "dtype": "float32"},
                {"op": "tadd", "B": 1, "T": 5, "C": 4, "dtype": "float32"},
                {"op": "tcopy", "B": 1, "T": 5, "C": 4, "dtype": "float32"}]
    pat = [{"op": "patchify", "N": n, "Cin": 3, "Cout": co, "HW": hw, "k": k, "stride": k, "padding": 0, "dtype": dt}
           for (k, hw) in PATCHES for co in COUT for n in BATCHES for dt in DTYPES]
    step = 11
    pat = [pat[i] for r in range(step) for i in range(r, len(pat), step)]
    tok = [{"op": op, "B": b, "T": t, "C": c, "dtype": dt}
           for (b, t, c) in TOKENS for op in ("tadd", "tcopy") for dt in ("float32", "bfloat16")]
    # a token point after every fourth patchify point, so that a cut sweep keeps both
    out, ti = [], 0
    for i, p in enumerate(pat):
        out.append(p)
        if i % 4 == 3 and ti < len(tok):
            out.append(tok[ti])
            ti += 1
    return out + tok[ti:]


def make(p: dict, device: str):
    """``(fn, args)`` of one point."""
    dt = getattr(torch, p["dtype"])
    if p["op"] == "patchify":
        x = torch.randn(p["N"], p["Cin"], p["HW"], p["HW"], device=device, dtype=dt)
        w = torch.randn(p["Cout"], p["Cin"], p["k"], p["k"], device=device, dtype=dt) * 0.05
        s = p["stride"]

        def conv(x, w):
            torch.backends.cudnn.benchmark = False
            return F.conv2d(x, w, None, s, 0)
        return conv, (x, w)
    x = torch.randn(p["B"], p["T"], p["C"], device=device, dtype=dt)
    y = torch.randn(p["B"], p["C"], p["T"], device=device, dtype=dt)
    if p["op"] == "tadd":
        return (lambda x, y: x + y.transpose(1, 2)), (x, y)
    return (lambda y: y.transpose(1, 2).contiguous()), (y,)


def describe(p: dict) -> str:
    if p["op"] == "patchify":
        return f"patchify N{p['N']:<3} 3->{p['Cout']:<5} {p['HW']:>3}px k{p['k']:<3} {p['dtype']:<8}"
    return f"{p['op']:<8} {p['B']}x{p['T']}x{p['C']} {p['dtype']:<8}"


def main(argv=None) -> int:
    return sweep_main(argv, __doc__, "vit_patchify", points, profiled_run("vit_patchify", make), describe, 150.0)


if __name__ == "__main__":
    raise SystemExit(main())
