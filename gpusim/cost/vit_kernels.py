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
(patch 8-32, no padding), cuDNN's main kernel without its layout transforms (validation/fit/fit_patchify.py on
validation/results/h200/vit_patchify.jsonl, 2170 points). 16-bit, cuDNN runs one of two kernels by width:
- from WIDE_COUT output channels, an implicit GEMM of M = N x (HW/k)^2 patches by Cout in 128 x 128 tiles
  (``cutlass_tensorop_*_s16816fprop_optimized_*_128x128_32x5_nhwc_align8``) whose K loop over the k x k taps (3
  channels padded to 8) is latency-bound: the time goes by waves, ``patchify_wave_us_16bit`` +
  ``patchify_wave_tap_ns_16bit`` per tap for the first (83 µs at patch 16 whatever the batch: BEiT's and Mixer's
  embeddings at batch 1 and 8 are one wave), ``patchify_next_wave_16bit`` of that for each further one
  (:func:`patchify_waves`);
- below, ``implicit_convolve_sgemm<..., 128, 5, 5, 3, 3, 3, 1, ...>``: ``patchify_narrow_tap_ns_16bit`` per tap at
  least, else ``patchify_narrow_ps_16bit`` per output element and tap (throughput-bound past a few images).
fp32 (the CUDA-core NCHW kernel's domain, FP32_MAX_*): ``patchify_tap_ns`` per tap + FLOPs at ``patchify_tflops``.
Used inside the sweep's domain only (PATCH_RANGE, COUT_RANGE, up to MAX_M patches; 16-bit narrow embeddings up to
patch 16); elsewhere, or on a GPU without the figures, ``None`` (the caller keeps the stem law)."""

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
#: cuDNN's 16-bit patchify kernel: the tiled CUTLASS GEMM from this many output channels (the sweep: at 512 and
#: up at every patch size, implicit_convolve_sgemm below; at patch 32 below it an xmma kernel, outside the law)
WIDE_COUT = 512
TILE = 128
#: fp32: cuDNN's CUDA-core NCHW kernel (``sm80_xmma_fprop_implicit_gemm_indexed_f32f32_*_nchw``, no transforms)
#: runs patch 14-32 up to 768 channels and 48 images of 196 patches; past that, at patch 8 or from 1024 channels
#: it switches to TF32 kernels behind NCHW <-> NHWC transforms (the sweep), outside the law
FP32_MAX_COUT, FP32_MAX_M = 768, 48 * 196


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


def patchify_waves(m: int, cout: int, sms: int) -> int:
    """Waves of the tiled GEMM: its M x Cout tiles (TILE square) over the SMs, one CTA each; and at least two when
    the grid CUTLASS launches does not fit in one (its threadblock swizzle rounds the column tiles up to a
    multiple of 4, 2 for two: 95 tiles of 640 channels launch 152 CTAs and run two waves on 132 SMs)."""
    rows, cols = math.ceil(m / TILE), math.ceil(cout / TILE)
    s = 4 if cols >= 3 else 2 if cols == 2 else 1
    return max(math.ceil(rows * cols / sms), min(2, math.ceil(rows * s * math.ceil(cols / s) / sms)))


def patchify_us(c: dict | None, spec) -> float | None:
    """The main kernel's time (above), None outside the domain or without the figures."""
    shape = patchify_shape(c)
    if shape is None:
        return None
    m, cout, k = shape
    if c["dtype"] in HALF_DTYPES:
        if cout >= WIDE_COUT:
            if spec.patchify_wave_us_16bit is None or not spec.patchify_wave_tap_ns_16bit:
                return None
            first = spec.patchify_wave_us_16bit + k * k * spec.patchify_wave_tap_ns_16bit * 1e-3
            return first * (1.0 + (spec.patchify_next_wave_16bit or 1.0) * (patchify_waves(m, cout, spec.sm_count) - 1))
        if k > 16 or not spec.patchify_narrow_tap_ns_16bit or not spec.patchify_narrow_ps_16bit:
            return None
        return max(k * k * spec.patchify_narrow_tap_ns_16bit * 1e-3, m * cout * k * k * spec.patchify_narrow_ps_16bit * 1e-6)
    if c["dtype"] == "float32" and spec.patchify_tflops and spec.patchify_tap_ns and k >= 14 \
            and cout <= FP32_MAX_COUT and m <= FP32_MAX_M:
        flops = 2.0 * m * cout * c["Cin"] * k * k
        return k * k * spec.patchify_tap_ns * 1e-3 + flops / (spec.patchify_tflops * 1e12) * 1e6
    return None
