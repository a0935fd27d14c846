"""A GPU spec's transformer figures: a prefill's and a decode step's ATen kernel classes and
attention's, each fitted per GPU on its own sweep (``validation/fit/``) or None, the class's
neutral law. :class:`gpusim.hw.spec.GPUSpec` has them as its own fields (it derives from
:class:`TransformerFigures`); keyword-only, so the spec's required figures keep their positional
places. Loaded, validated and written like every optional figure (:mod:`gpusim.hw.schema`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class TransformerFigures:
    # a prefill's ATen classes (prefill_classes sweep: non-vectorised elementwise floor µs, row walk ns a column,
    # strided cat's share of a copy), then a decode step's at few rows (decode_classes, cost.few_rows); None: old laws
    aten_strided_min_us: float | None = None
    reduction_col_ns: float | None = None
    aten_cat_strided_efficiency: float | None = None
    aten_cat_append_us: float | None = None
    aten_cat_append_efficiency: float | None = None
    aten_strided_lane_us: float | None = None
    aten_strided_elem_us: float | None = None
    aten_strided_grid_us: float | None = None
    aten_cast_min_us: float | None = None
    aten_cat_strided_min_us: float | None = None
    layer_norm_wide_us: float | None = None
    layer_norm_wide_ns: float | None = None
    # 16-bit causal attention computes (n + 1) / 2n of its n key tiles of this many keys (laws.causal_share); None: all
    attention_causal_tile: float | None = None
    gemv_fp32_efficiency: float | None = None   # fp32 one-row products (cuBLAS gemv), of bandwidth
    # 16-bit attention (cuDNN), of the 16-bit tensor-core peak; None: the plain roofline
    attention_efficiency: float | None = None
    attention_mask_efficiency: float | None = None
    attention_min_us: float | None = None
    # masked 16-bit attention (validation/fit/fit_sdpa_mask.py on the sdpa_mask sweep): the
    # unmasked law plus the mask's bytes, read once per head, at this rate (TB/s) for a mask
    # dense per batch, broadcast over queries, dense per head; None: attention_mask_efficiency
    attention_mask_dense_tbps: float | None = None
    attention_mask_bcast_tbps: float | None = None
    attention_mask_heads_tbps: float | None = None
    # 16-bit single-query (decode) fused attention (validation/fit/fit_sdpa_decode.py on the
    # sdpa_decode sweep; gpusim.cost.decode_attention): fixed time (µs + ns per head-dim element),
    # K/V stream rate (TB/s), SM time
    # per key per CTA by head-dim tile (ns), their p-norm, the mask factor; cuDNN's split-KV
    # reduction kernel up to this many CTAs (batch x key heads), its time; None: the FLOP law
    attention_decode_us: float | None = None
    attention_decode_dim_ns: float | None = None
    attention_decode_tbps: float | None = None
    attention_decode_key_ns_d64: float | None = None
    attention_decode_key_ns_d128: float | None = None
    attention_decode_key_ns_d256: float | None = None
    attention_decode_norm: float | None = None
    attention_decode_mask_factor: float | None = None
    attention_decode_split_ctas: float | None = None
    attention_decode_reduce_us: float | None = None
    attention_decode_reduce_ns: float | None = None
    # a mask whose key count is not a multiple of 16 bytes (ViT's 197 tokens): each CTA of this
    # many query rows reads its rows x Skv mask tile at this rate (GB/s), a wave of CTAs at a time
    attention_mask_unaligned_tile: float | None = None
    attention_mask_unaligned_cta_gbps: float | None = None
    attention_tile_q: int | None = None
    attention_tile_kv: int | None = None
