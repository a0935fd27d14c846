"""Small memory-bound ATen kernels of ViT blocks at a few hundred tokens: the data the laws of
BEiT's relative-position gather, layer-scale multiplies and narrow layer norms need (issue 35).

``python3 -m validation.measure.vit_small_ops --out FILE.jsonl [--budget-s 120] [--reps 10] [--device cpu]``

Why: in the H100 held-out records (validation/results/h100/holdout.jsonl.gz) these kernels run
1.5-15x what gpusim prices them at, and no sweep holds them: BEiT's ``table[index]`` gather of its
relative position bias (bf16 ``index_elementwise_kernel`` 5.7 us, fp32 ``vectorized_gather_kernel``
41 us a call at 257 tokens; priced 2.7), its ``gamma * x`` layer-scale multiplies (ATen's
broadcast ``elementwise_kernel<128,4>`` 2.9-3.1 us; priced 1.65) and layer norms of 100-257 rows
(3.6 us at 257 x 768; priced at the 2.5 us floor, where the dispatch sweep's 1 x 768 runs 3.7).
The records are a test set: a law fitted on this sweep may be scored on them, never fitted there.

Points (float32 and bfloat16): ``gather``: a (T, H) table indexed by a (S*S,) int64 index, then
``view(S, S, H).permute(2, 0, 1).contiguous()`` (timm's BEiT, T = (2W-1)^2 + 3 for a W x W grid);
``layer_scale``: (C,) * (B, S, C); ``layer_norm``: (B*S, C) rows. Each point is warmed up, then
profiled: ``reps`` calls in one profiler session, L2 flushed before each
(:func:`validation.measure.timing.profile_call`), median device time per kernel. Output: JSONL, an
environment line (``kind: environment``) then one line per point (``kind: vit_small_ops``: op,
shape fields, dtype, kernels [{name, us}]), flushed after each; points stop starting after
``--budget-s`` seconds (listed as ``not_reached`` in the closing ``kind: summary`` line).
"""

from __future__ import annotations


import torch
import torch.nn.functional as F

from validation.measure.bench_common import profiled_run, sweep_main

#: (grid side W, tokens S = W*W + 1 class token) of BEiT at 160, 224, 256 px and neighbours
GRIDS = ((10, 101), (14, 197), (16, 257), (16, 256), (32, 1025))
HEADS = (6, 12, 16)
#: (batch, tokens, channels) of layer-scale multiplies and layer norms
ROWS = ((1, 197, 768), (1, 257, 768), (8, 101, 768), (1, 256, 512), (8, 100, 512), (1, 197, 384),
        (1, 1, 768), (1, 64, 768), (1, 512, 1024), (32, 197, 768))
DTYPES = ("float32", "bfloat16")


def points(small: bool = False) -> list[dict]:
    """Every point, the small ones first."""
    grids, heads, rows = ((GRIDS[0],), (2,), ((1, 5, 8),)) if small else (GRIDS, HEADS, ROWS)
    out = [{"op": "gather", "W": w, "S": s, "H": h, "dtype": dt}
           for dt in DTYPES for (w, s) in grids for h in heads]
    out += [{"op": op, "B": b, "S": s, "C": c, "dtype": dt}
            for op in ("layer_scale", "layer_norm") for dt in DTYPES for (b, s, c) in rows]
    return out


def make(p: dict, device: str):
    """``(fn, args)`` of one point."""
    dt = getattr(torch, p["dtype"])
    if p["op"] == "gather":
        t = (2 * p["W"] - 1) ** 2 + 3
        table = torch.randn(t, p["H"], device=device, dtype=dt)
        index = torch.randint(0, t, (p["S"] * p["S"],), device=device)
        s = p["S"]
        return (lambda tb, ix: tb[ix].view(s, s, -1).permute(2, 0, 1).contiguous()), (table, index)
    x = torch.randn(p["B"], p["S"], p["C"], device=device, dtype=dt)
    w = torch.randn(p["C"], device=device, dtype=dt)
    if p["op"] == "layer_scale":
        return (lambda g, x: g * x), (w, x)
    return (lambda x, w: F.layer_norm(x, (x.shape[-1],), w, w)), (x, w)


def describe(p: dict) -> str:
    shape = f"W{p['W']} S{p['S']} H{p['H']}" if p["op"] == "gather" else f"{p['B']}x{p['S']}x{p['C']}"
    return f"{p['op']:<11} {shape:<14} {p['dtype']:<8}"


def main(argv=None) -> int:
    return sweep_main(argv, __doc__, "vit_small_ops", points, profiled_run("vit_small_ops", make), describe, 120.0)


if __name__ == "__main__":
    raise SystemExit(main())
