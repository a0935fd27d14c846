"""fp32 attention in eager PyTorch: the memory-efficient CUTLASS kernel (``fmha_cutlassF_f32_aligned_
64x64_rf_sm80`` for head dims up to 64, ``..._64x128_rf_sm80`` above), by its waves of key blocks (issue 35;
validation/fit/fit_attention_fp32.py on the dispatch sweeps' fp32 sdpa points, validation/sweeps/<gpu>.json).

Each CTA holds 64 query rows of one (batch, head) and walks the keys in blocks of 64 (head dim <= 64) or 128;
a block is latency-bound (a few µs of fp32 CUDA-core products, softmax and rescale), so the time goes by
``waves x key blocks``, not by FLOPs: BEiT's 12 x 257 x 64 call runs 40 µs where its FLOPs at the fp32
peak are 3 µs. The law: ``attention_fp32_block_us[_wide]`` per wave and key block, waves of
``attention_fp32_ctas_per_sm`` CTAs on every SM, x ``attention_fp32_mask_factor`` with an additive
mask. Without the figures, under one key block, or causal: ``None`` (the caller keeps its FLOP law)."""

from __future__ import annotations

import math

#: query rows per CTA; keys per block at head dims up to / above 64 (the kernels' names)
QUERY_TILE = 64
KEY_TILE = {False: 64, True: 128}


def attention_fp32_shape(a: dict) -> tuple[int, int, int, int, int] | None:
    """``(batch x heads, q_len, kv_len, head_dim, wide)`` of an sdpa node, None without its sizes."""
    s = a.get("sdpa") or {}
    g = a.get("gemm") or {}
    q, kv, d = s.get("q_len"), s.get("kv_len"), s.get("head_dim")
    bh = g.get("b")
    if not (q and kv and d and bh):
        return None
    return int(bh), int(q), int(kv), int(d), int(d > 64)


def attention_fp32_us(a: dict, spec) -> float | None:
    """The kernel's time (above), None without the figures or the sizes."""
    shape = attention_fp32_shape(a)
    wide = bool(shape and shape[4])
    blk = spec.attention_fp32_block_us_wide if wide else spec.attention_fp32_block_us
    if shape is None or not blk or not spec.attention_fp32_ctas_per_sm:
        return None
    bh, q, kv, _, _ = shape
    if kv < KEY_TILE[wide] or (a.get("sdpa") or {}).get("is_causal"):
        return None     # outside the fitted domain: a partial first block (16 keys of 128 ran 11 µs, not 25), causal
    ctas = bh * math.ceil(q / QUERY_TILE)
    waves = math.ceil(ctas / (spec.sm_count * spec.attention_fp32_ctas_per_sm))
    blocks = math.ceil(kv / KEY_TILE[wide])
    mask = (spec.attention_fp32_mask_factor or 1.0) if (a.get("sdpa") or {}).get("mask") else 1.0
    return waves * blocks * blk * mask
