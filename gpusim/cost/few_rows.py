"""ATen's kernels at a decode step's sizes (one new token per sequence: a few rows, a few thousand elements),
where the laws fitted at prefill sizes overprice them (issue 34; the decode_classes sweep,
validation/fit/fit_decode_classes.py; matched kernel by kernel in validation/score/decode_kernels.py). Each figure
is optional: a GPU without it keeps the law before it."""

from __future__ import annotations

#: ATen's legacy elementwise kernel (CUDALoops.cuh ``launch_legacy_kernel<128, 4>`` for 16-bit outputs): 128
#: threads a block, each thread up to 4 elements, 128 apart
LEGACY_THREADS, LEGACY_UNROLL = 128, 4


def strided_floor_us(elements: int, spec) -> float:
    """The shortest time of ATen's non-vectorised elementwise kernel on a 16-bit output of ``elements``
    (a strided or broadcast operand): ``aten_strided_min_us`` (the prefill sweep's floor, 128 rows and more), or
    less where the grid is one block whose threads have fewer than 4 elements each: ``aten_strided_lane_us`` +
    ``aten_strided_elem_us`` per element a thread computes in turn (rotary embedding's (B, H, 1, D) multiplies
    and negations at batch 1: 1.0-2.1 us on the H200 against the 2.4 us floor). 0 without any figure."""
    top = spec.aten_strided_min_us or 0.0
    if not top or spec.aten_strided_lane_us is None or not spec.aten_strided_elem_us \
            or elements > LEGACY_THREADS * LEGACY_UNROLL:
        return top
    per_thread = -(-max(int(elements), 1) // LEGACY_THREADS)
    return min(top, spec.aten_strided_lane_us + per_thread * spec.aten_strided_elem_us)


def strided_cat_floor_us(spec) -> float | None:
    """The shortest time of ATen's ``CatArrayBatchedCopy`` over strided inputs (rotary embedding's
    ``rotate_half``): ``aten_cat_strided_min_us`` (the decode_classes sweep's rotary cats of up to 4096
    elements); None without it (the non-vectorised elementwise floor stands in)."""
    return spec.aten_cat_strided_min_us


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
