"""ViT-family kernels whose time goes by waves of CTAs, not by bytes or FLOPs (issue 35): fp32 attention's
memory-efficient kernel and 16-bit patch embeddings.

**fp32 attention** in eager PyTorch: the memory-efficient CUTLASS kernel (``fmha_cutlassF_f32_aligned_
64x64_rf_sm80`` for head dims up to 64, ``..._64x128_rf_sm80`` above), by its waves of key blocks
(validation/fit/fit_attention_fp32.py on the dispatch sweeps' fp32 sdpa points, validation/sweeps/<gpu>.json).

Each CTA holds 64 query rows of one (batch, head) and walks the keys in blocks of 64 (head dim <= 64) or 128;
a block is latency-bound (a few µs of fp32 CUDA-core products, softmax and rescale), so the time goes by
``waves x key blocks``, not by FLOPs: BEiT's 12 x 257 x 64 call runs 40 µs where its FLOPs at the fp32
peak are 3 µs. The law: ``attention_fp32_block_us[_wide]`` per wave and key block, waves of
``attention_fp32_ctas_per_sm`` CTAs on every SM, x ``attention_fp32_mask_factor`` with an additive
mask. Without the figures, under one key block, or causal: ``None`` (the caller keeps its FLOP law).

**Patch embeddings** (ViT's) in eager PyTorch: a convolution of a 3-channel NCHW image whose kernel is its stride
(patch 8-32, no padding), cuDNN's main kernel without its layout transforms
(validation/fit/fit_patchify.py on validation/results/<gpu>/vit_patchify.jsonl).

16-bit: cuDNN runs an implicit GEMM of M = N x (HW/k)^2 patches by Cout, its K loop over the k x k taps of the
channels padded to 8 (``cutlass_tensorop_*_s16816fprop_optimized_*_128x128_32x5_nhwc_align8``): latency-bound per
K step, so the time goes by waves of CTAs (``patchify_tile_16bit`` square tiles, ``patchify_ctas_per_sm_16bit`` a
SM), each wave ``patchify_wave_us_16bit`` + ``patchify_wave_tap_ns_16bit`` per tap: at batch 1 a 768-channel
embedding is one wave of 12 CTAs that runs 82 µs, whatever its FLOPs.
fp32: CUDA-core implicit GEMM (``sm80_xmma_fprop_implicit_gemm_indexed_f32f32_*_nchw``), a line in FLOPs:
``patchify_us`` + FLOPs at ``patchify_tflops``.

Used inside the sweep's domain only (PATCH_RANGE, up to MAX_M patches); elsewhere, or on a GPU without the
figures, ``None`` (the caller keeps the stem law)."""

from __future__ import annotations

import math

from gpusim.graph.opgraph import HALF_DTYPES

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



#: the sweep's patch sizes, output channels and largest M (validation.measure.vit_patchify)
PATCH_RANGE = (8, 32)
COUT_RANGE = (96, 1280)
MAX_M = 128 * (224 // 8) ** 2
#: the patch size of a fit without a tap term (the dispatch sweep's 16x16 points only)
ONE_PATCH = 16


def patchify_shape(c: dict | None) -> tuple[int, int, int] | None:
    """``(M, Cout, k)`` of a patch embedding's :func:`gpusim.lower.conv.conv_info`, None for any other conv."""
    if not c or c.get("backward") or c["layout"] != "nchw" or c["groups"] != 1 or c["Cin"] > 4:
        return None
    k = c["kh"]
    if c["kw"] != k or not PATCH_RANGE[0] <= k <= PATCH_RANGE[1] or c["Ho"] * k != c["H"] or c["Wo"] * k != c["W"]:
        return None
    m = c["N"] * c["Ho"] * c["Wo"]
    if m > MAX_M or not COUT_RANGE[0] <= c["Cout"] <= COUT_RANGE[1]:
        return None
    return m, c["Cout"], k


def patchify_us(c: dict | None, spec) -> float | None:
    """The main kernel's time (above), None outside the domain or without the figures."""
    shape = patchify_shape(c)
    if shape is None:
        return None
    m, cout, k = shape
    if c["dtype"] in HALF_DTYPES:
        tile, per_sm = spec.patchify_tile_16bit, spec.patchify_ctas_per_sm_16bit
        if not (tile and per_sm and spec.patchify_wave_us_16bit is not None) \
                or (spec.patchify_wave_tap_ns_16bit is None and k != ONE_PATCH):
            return None     # no figures, or figures of one patch size (no tap term) and another size
        ctas = math.ceil(m / tile) * math.ceil(cout / tile)
        waves = math.ceil(ctas / (spec.sm_count * per_sm))
        return waves * (spec.patchify_wave_us_16bit + k * k * (spec.patchify_wave_tap_ns_16bit or 0.0) * 1e-3)
    if c["dtype"] == "float32" and spec.patchify_tflops:
        flops = 2.0 * m * cout * c["Cin"] * k * k
        return (spec.patchify_us or 0.0) + flops / (spec.patchify_tflops * 1e12) * 1e6
    return None
