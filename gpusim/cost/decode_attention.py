"""16-bit fused attention at one query row (a decode step), and cuDNN's split-KV reduction.

A decode step's attention does almost no arithmetic: each of its CTAs (one per batch and key
head, :func:`gpusim.lower.dispatch.decode_ctas`) walks the whole cache for one query row. The
H200 ``sdpa_decode`` sweep (validation/results/h200/sdpa_decode.jsonl, 108 points: batch 1-32,
8-32 heads, head dim 64-256, 640-2048 keys) measures two limits:

- the K/V stream from HBM: the call's unique bytes (a K/V expanded over the heads with stride 0,
  multi-query attention, is read once) at ``attention_decode_tbps``;
- the SMs' walk over the keys: ``attention_decode_key_ns_d{64,128,256}`` per key per CTA, the CTAs
  spread over the SMs. It depends on the head-dim tile the kernel runs (64, 128, 256: a head
  dim is padded up to one); at 256 the kernel is ~5x slower per key than at 128 (L2-served
  multi-query points: 132 vs 31 us).

The two overlap imperfectly: t = ``attention_decode_us`` + head dim x ``attention_decode_dim_ns``
(each CTA's prologue and epilogue: the query row in, the output row out, the softmax's rescale) +
(stream^p + walk^p)^(1/p), p = ``attention_decode_norm``; a mask (the static cache's bias) multiplies it by
``attention_decode_mask_factor``. Fitted by validation/fit/fit_sdpa_decode.py; domain: one query
row (the sweep's), head dim <= 256. Few CTAs make cuDNN split the keys and sum the partial rows
in ``lean_reduction_kernel`` (:func:`gpusim.lower.dispatch.splits_keys`), priced here too:
``attention_decode_reduce_us`` + head dim x ``attention_decode_reduce_ns``.
"""

from __future__ import annotations

from gpusim.lower.dispatch import decode_ctas

#: head-dim tiles of the decode kernel and their per-key figures
TILES = ((64, "attention_decode_key_ns_d64"), (128, "attention_decode_key_ns_d128"),
         (256, "attention_decode_key_ns_d256"))
#: query rows of the sweep the law is fitted on: a longer query (prefill, speculative verify)
#: keeps the FLOP law
DECODE_Q_LEN = 1


def key_ns(spec, head_dim: int) -> float | None:
    """ns per key per CTA of the head-dim tile ``head_dim`` runs in; None beyond the largest."""
    for tile, fig in TILES:
        if head_dim <= tile:
            return getattr(spec, fig, None)
    return None


def decode_attention_us(a: dict, spec, masked: bool) -> float | None:
    """The kernel time (µs) of 16-bit fused attention node ``a`` at one query row, or None
    outside the law's domain or on a GPU without the figures."""
    s = a.get("sdpa") or {}
    if not spec.attention_decode_tbps or s.get("q_len") != DECODE_Q_LEN:
        return None
    hd = int(s.get("head_dim") or 0)
    ns = key_ns(spec, hd)
    if ns is None:
        return None
    stream = float(a.get("bytes_read", 0.0)) / (spec.attention_decode_tbps * 1e6)
    walk = decode_ctas(a) * int(s.get("kv_len") or 0) * ns * 1e-3 / spec.sm_count
    p = spec.attention_decode_norm or 1.0
    fixed = (spec.attention_decode_us or 0.0) + hd * (spec.attention_decode_dim_ns or 0.0) * 1e-3
    us = fixed + (stream ** p + walk ** p) ** (1.0 / p)
    return us * ((spec.attention_decode_mask_factor or 1.0) if masked else 1.0)


def reduce_us(a: dict, spec) -> float | None:
    """cuDNN's split-KV reduction kernel after node ``a``: ``attention_decode_reduce_us`` + head
    dim x ``attention_decode_reduce_ns``; None without the figure (the helper-kernel stream)."""
    if not spec.attention_decode_reduce_us:
        return None
    hd = int((a.get("sdpa") or {}).get("head_dim") or 0)
    return spec.attention_decode_reduce_us + hd * (spec.attention_decode_reduce_ns or 0.0) * 1e-3
