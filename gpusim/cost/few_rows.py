"""ATen's kernels at a decode step's sizes (one new token per sequence: a few rows, a few thousand elements),
where the laws fitted at prefill sizes overprice them (issue 34; the decode_classes sweep,
validation/fit/fit_decode_classes.py; matched kernel by kernel in validation/score/decode_kernels.py). Each figure
is optional: a GPU without it keeps the law before it."""

from __future__ import annotations

import math

from gpusim.graph.opgraph import numel

#: ATen's legacy elementwise kernel (CUDALoops.cuh ``launch_legacy_kernel<128, 4>`` for 16-bit outputs): 128
#: threads a block, each thread up to 4 elements, 128 apart
LEGACY_THREADS, LEGACY_UNROLL = 128, 4
#: the decode_classes sweep's domains: rotary operands up to 32 x 32 x 128 / 2 elements (128 blocks), rotary cats
#: fitted at up to 8192 elements, layer norms of 1-128 rows over 1024-4096 columns (past the vit sweep's 1024)
LEGACY_MAX_ELEMENTS = 65536
CAT_FLOOR_MAX_ELEMENTS = 8192
LAYER_NORM_COLS, LAYER_NORM_MAX_ROWS = (1024, 4096), 128


def strided_floor_us(elements: int, spec) -> float:
    """The shortest time of ATen's non-vectorised elementwise kernel on a 16-bit output of ``elements`` (a strided
    or broadcast operand): ``aten_strided_min_us`` (the prefill sweep's floor, at 128 rows and more), or on a grid
    of at most LEGACY_MAX_ELEMENTS (a decode step's rotary embedding: 0.96-2.3 us on the H200) ``aten_strided_lane_us``
    + ``aten_strided_elem_us`` per element a thread computes in turn (up to 4) + ``aten_strided_grid_us`` per
    doubling of the blocks past one, at most the floor. 0 without any figure."""
    top = spec.aten_strided_min_us or 0.0
    if not top or spec.aten_strided_lane_us is None or not spec.aten_strided_elem_us \
            or elements > LEGACY_MAX_ELEMENTS:
        return top
    n = max(int(elements), 1)
    per_thread = min(LEGACY_UNROLL, -(-n // LEGACY_THREADS))
    blocks = max(1.0, n / (LEGACY_THREADS * LEGACY_UNROLL))
    return min(top, spec.aten_strided_lane_us + per_thread * spec.aten_strided_elem_us
               + math.log2(blocks) * (spec.aten_strided_grid_us or 0.0))


def strided_cat_floor_us(elements: int, spec) -> float | None:
    """The shortest time of ATen's ``CatArrayBatchedCopy`` over strided inputs (rotary embedding's
    ``rotate_half``) of at most CAT_FLOOR_MAX_ELEMENTS: ``aten_cat_strided_min_us`` (the decode_classes sweep's
    rotary cats, 1.4-1.8 us); None without it or past that size (the non-vectorised elementwise floor stands in)."""
    if spec.aten_cat_strided_min_us is None or elements > CAT_FLOOR_MAX_ELEMENTS:
        return None
    return spec.aten_cat_strided_min_us


def layer_norm_wide_floor(a: dict, spec) -> float | None:
    """ATen's 16-bit layer norm over rows wider than the vit_small_ops sweep's (LAYER_NORM_COLS), at most
    LAYER_NORM_MAX_ROWS rows (a decode step's: Phi-1.5's 2048 columns, 3.8-4.0 us at 1-8 rows on the H200):
    ``layer_norm_wide_us`` + ``layer_norm_wide_ns`` per column; None outside or without the figures."""
    shape = tuple(a.get("shape") or ())
    if spec.layer_norm_wide_us is None or spec.layer_norm_wide_ns is None or a.get("dtype") not in ("bfloat16", "float16") \
            or len(shape) < 1 or not LAYER_NORM_COLS[0] < shape[-1] <= LAYER_NORM_COLS[1]:
        return None
    fits = numel(shape[:-1]) <= LAYER_NORM_MAX_ROWS
    return spec.layer_norm_wide_us + shape[-1] * spec.layer_norm_wide_ns * 1e-3 if fits else None


def append_cat_us(spec, nbytes: float) -> float:
    """An appending cat's time (gpusim.cost.roofline.cat_path: DynamicCache's ``cat`` of the resident cache and
    the new token, ATen's ``CatArrayBatchedCopy_vectorized``): ``aten_cat_append_us`` plus its bytes read and
    written at ``aten_cat_append_efficiency`` of a copy's bandwidth (the decode_classes sweep's cats, the cache
    cold in the L2 as a decode step leaves it); a GPU without them: a contiguous copy's fixed cost and rate."""
    fixed = spec.aten_cat_append_us if spec.aten_cat_append_us is not None else spec.kernel_fixed_us
    eff = spec.aten_cat_append_efficiency or 1.0
    return max(spec.kernel_min_us, fixed + nbytes / (eff * spec.mem_efficiency * spec.bandwidth) * 1e6)


def cast_floor_us(spec) -> float:
    """The shortest time of ATen's unrolled elementwise kernel with dynamic casts (``x.to(torch.float32)`` of a
    16-bit tensor: ``unrolled_elementwise_kernel<direct_copy...>``, RMSNorm's upcast): ``aten_cast_min_us``
    (2.3 us measured at 1 row on the H200 against the 1.1 us floor of a vectorised copy); 0 without it."""
    return spec.aten_cast_min_us or 0.0
