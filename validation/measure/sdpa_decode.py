"""16-bit decode attention (one query row per sequence over a static cache): the data a decode-attention law needs.

``python3 -m validation.measure.sdpa_decode --out FILE.jsonl [--budget-s 100] [--reps 10] [--device cpu]``

Why: a static compiled decode step's attention (``scaled_dot_product_attention`` of one query row
over the whole ``max_cache_len`` keys, the bool mask as a bf16 bias) runs cuDNN's
``sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128xD`` on an H200 (one CTA per batch and head, 16
query rows padded from 1): 5-10 us at batch 1 and 12-23 us at batch 8 for 639 keys in the H200
generate records of 2026-11-28f (Llama-3.2-1B, Qwen2-0.5B, Phi-1.5 at head dim 64; Gemma-2B at 256),
22 us for Gemma-2B's 8 x 8 x 517 x 256 in the lease m trace, where gpusim prices it at the fused
attention law's floor (4.4 us: its FLOPs are tiny, and the law has no per-CTA streaming term).

Points (bf16, the backend PyTorch picks): q (B, H, 1, D); k and v (B, H, S, D) as the static path
hands them to SDPA: ``kv = "view"`` for multi-query attention (one KV head expanded over the H query
heads, stride 0: ``repeat_kv`` is a view there) or ``"copy"`` (contiguous, as ``repeat_kv`` copies
grouped heads); mask ``none`` or ``bias`` (a (B, 1, 1, S) bf16 additive bias expanded over the heads,
a quarter of the positions masked, as a static cache's unfilled tail). Each point is warmed up, then
profiled: ``reps`` calls in one profiler session, L2 flushed before each
(:func:`validation.measure.timing.profile_call`), median device time per kernel. Output: JSONL, an
environment line (``kind: environment``) then one line per point (``kind: sdpa_decode``: B, H, S, D,
kv, mask, kernels [{name, us}]), flushed after each; points stop starting after ``--budget-s``
seconds (listed as ``not_reached`` in the closing ``kind: summary`` line).
"""

from __future__ import annotations


import torch
import torch.nn.functional as F

from validation.measure.bench_common import profiled_run, sweep_main

#: batches, (query heads, KV heads) of Gemma-2B (MQA), Llama-3.2-1B (GQA 4), Phi-1.5 (MHA), head dims, cache lengths
BATCHES = (1, 8, 32)
HEADS = ((8, 1), (32, 8), (32, 32))
DIMS = (64, 128, 256)
LENGTHS = (640, 2048)


def points(small: bool = False) -> list[dict]:
    """Every point, the cheap ones (small batch, short cache) first."""
    if small:
        grid = [(1, 2, 1, 16, 8), (2, 2, 2, 16, 8)]
    else:
        grid = [(b, h, kv, s, d) for s in LENGTHS for b in BATCHES for (h, kv) in HEADS for d in DIMS]
    return [{"B": b, "H": h, "KV": kv, "S": s, "D": d, "kv": "view" if kv == 1 else "copy", "mask": m,
             "dtype": "bfloat16"} for (b, h, kv, s, d) in grid for m in ("none", "bias")]


def make(p: dict, device: str):
    """``(fn, args)`` of one point."""
    b, h, s, d, dt = p["B"], p["H"], p["S"], p["D"], getattr(torch, p["dtype"])
    q = torch.randn(b, h, 1, d, device=device, dtype=dt)
    if p["kv"] == "view":
        k, v = (torch.randn(b, 1, s, d, device=device, dtype=dt).expand(b, h, s, d) for _ in range(2))
    else:
        k, v = (torch.randn(b, h, s, d, device=device, dtype=dt) for _ in range(2))
    mask = None
    if p["mask"] == "bias":
        m = torch.zeros(b, 1, 1, s, device=device, dtype=dt)
        m[..., -(s // 4):] = torch.finfo(dt).min
        mask = m.expand(b, h, 1, s)
    return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)), (q, k, v)


def main(argv=None) -> int:
    return sweep_main(argv, __doc__, "sdpa_decode", points, profiled_run("sdpa_decode", make),
                      lambda p: f"{p['B']}x{p['H']}/{p['KV']}x{p['S']}x{p['D']} {p['mask']:<5}", 100.0)


if __name__ == "__main__":
    raise SystemExit(main())
