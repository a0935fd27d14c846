"""ViT blocks' small memory-bound ATen kernels (issue 35; the vit_small_ops sweep,
validation/fit/fit_vit_small_ops.py): the gather of a table's rows, a layer-scale multiply and
the layer norm's floor by row width. Each is a line fitted on the sweep and used only inside the
sweep's points (below); outside them, or on a GPU without the figures, ``None`` (the caller keeps
its law)."""

from __future__ import annotations

from gpusim.graph.opgraph import DTYPE_BYTES, main_shape, numel

#: the sweep's largest gather: 1025 x 1025 indices of 16 heads (validation.measure.vit_small_ops GRIDS)
GATHER_MAX_INDICES = 1025 * 1025
GATHER_MAX_ELEMENTS = 1025 * 1025 * 16
#: the sweep's layer-scale outputs: 64 x 768 to 32 x 197 x 768 elements (ROWS, more than one row)
BCAST_ELEMENTS = (64 * 768, 32 * 197 * 768)
#: the sweep's layer-norm row widths (ROWS)
NORM_CHANNELS = (384, 1024)
#: the sweep's dtypes
DTYPES = ("float32", "bfloat16")


def gather_us(a: dict, spec) -> float | None:
    """``table[index]`` with one 1-D index: ATen's ``vectorized_gather_kernel`` when a row is a
    multiple of 16 bytes (``gather_vec_us`` + ``gather_vec_index_ns`` per index), else its
    ``index_elementwise_kernel`` (``gather_elem_us`` + ``gather_elem_ps`` per element)."""
    shape = tuple(a.get("shape") or ())
    if spec.gather_vec_us is None or a.get("dtype") not in DTYPES or not shape:
        return None
    n, elems = shape[0], numel(shape)
    if n > GATHER_MAX_INDICES or elems > GATHER_MAX_ELEMENTS:
        return None
    if (elems // max(n, 1)) * DTYPE_BYTES[a["dtype"]] % 16 == 0:
        return spec.gather_vec_us + n * spec.gather_vec_index_ns * 1e-3
    return spec.gather_elem_us + elems * spec.gather_elem_ps * 1e-6


def bcast_mul_us(a: dict, spec) -> float | None:
    """A (C,) vector times a (..., C) tensor: ``bcast_mul_us[_16bit]`` + ``bcast_mul_ps[_16bit]``
    per output element (ATen's broadcasting ``elementwise_kernel<128,4>``)."""
    dt = a.get("dtype")
    sfx = "_16bit" if dt == "bfloat16" else ""
    fixed, ps = getattr(spec, "bcast_mul_us" + sfx), getattr(spec, "bcast_mul_ps" + sfx)
    elems = numel(tuple(a.get("shape") or ()))
    if fixed is None or ps is None or dt not in DTYPES or not BCAST_ELEMENTS[0] <= elems <= BCAST_ELEMENTS[1]:
        return None
    return fixed + elems * ps * 1e-6


def layer_norm_floor(a: dict, spec) -> float | None:
    """ATen's layer norm's shortest time for rows of C channels: ``layer_norm_floor_us[_16bit]``
    + ``layer_norm_floor_ch_ns`` per channel (the sweep's norms of up to 257 rows)."""
    dt = a.get("dtype")
    fixed = spec.layer_norm_floor_us_16bit if dt == "bfloat16" else spec.layer_norm_floor_us
    shape = main_shape(a.get("shape"))
    if fixed is None or not spec.layer_norm_floor_ch_ns or dt not in DTYPES or not shape \
            or not NORM_CHANNELS[0] <= shape[-1] <= NORM_CHANNELS[1]:
        return None
    return fixed + shape[-1] * spec.layer_norm_floor_ch_ns * 1e-3
