"""cuDNN's layout transforms around an NCHW tensor-core convolution (``nchwToNhwcKernel`` of the
input and the weight, ``nhwcToNchwKernel`` of the output; issue 35, docs/cnn.md).

Each is a batched transpose: per image, the input's C x (H*W) matrix becomes (H*W) x C; per output
channel, the weight's (C/groups) x (kh*kw) matrix becomes (kh*kw) x (C/groups); per image, the
output's (Ho*Wo) x Cout becomes Cout x (Ho*Wo). The kernel moves the matrix in square tiles of
:data:`TILE` x :data:`TILE` elements through shared memory, a whole tile whatever part of it the
matrix fills. So its time goes by the *tiles' elements*, not by the bytes: a stem's 3-channel input
fills 3 of a tile's 32 rows and runs at a tenth of a wide transform's byte rate, a 3x3 weight 9 of
32, and a 16-bit transform moves half the bytes of an fp32 one in about the same time (the sweeps:
16-bit ~2 TB/s, fp32 ~4 TB/s, stems ~0.28 TB/s in either dtype).

Law (:func:`layout_transform_us`)::

    us = layout_transform_us + max(tile elements / layout_transform_gelems,
                                   bytes moved / (layout_transform_dram_efficiency[_16bit] x bandwidth))

where the second term counts only for a tensor larger than the L2-resident cap
(``l2_resident_fraction x L2``), which streams from DRAM: an fp32 transform then runs at about the
copy's rate, a 16-bit one at about half of it (its tile rows are 64-byte segments, half a line).
Figures fitted by ``validation/fit/fit_layout.py`` on the GPU's own conv sweeps; a GPU without them
keeps the byte stream at ``layout_transform_efficiency`` (:func:`gpusim.cost.laws.aux_law`).
"""

from __future__ import annotations

from gpusim.graph.opgraph import DTYPE_BYTES, HALF_DTYPES

#: the transpose tile of cuDNN's nchwToNhwc / nhwcToNchw kernels, in elements per side (the sweeps:
#: 32 fits the stems', weights' and activations' times with one rate; 1, 8, 16 and 64 do not)
TILE = 32
#: the lowering's variants of the three transforms (gpusim.lower.conv.conv_kernels)
TRANSFORMS = ("to_nhwc", "weight_to_nhwc", "to_nchw")
FIGURES = ("layout_transform_us", "layout_transform_gelems", "layout_transform_dram_efficiency",
           "layout_transform_dram_efficiency_16bit")


def transform_dims(c: dict, variant: str) -> tuple[int, int, int]:
    """``(batch, rows, cols)`` of the transposes a transform runs for conv facts ``c``
    (:func:`gpusim.lower.conv.conv_info`)."""
    if variant == "to_nhwc":
        return c["N"], c["Cin"], c["H"] * c["W"]
    if variant == "weight_to_nhwc":
        return c["Cout"], c["Cin"] // max(c["groups"], 1), c["kh"] * c["kw"]
    return c["N"], c["Ho"] * c["Wo"], c["Cout"]


def _padded(x: int) -> int:
    return -(-x // TILE) * TILE


def tile_elements(c: dict, variant: str) -> int:
    """Elements of the whole tiles a transform moves."""
    b, r, k = transform_dims(c, variant)
    return b * _padded(r) * _padded(k)


def moved_bytes(c: dict, variant: str) -> int:
    """Bytes a transform reads and writes (its tensor, twice)."""
    b, r, k = transform_dims(c, variant)
    return 2 * b * r * k * DTYPE_BYTES.get(c["dtype"], 4)


def dram_efficiency(spec, dtype: str) -> float | None:
    """The transform's DRAM stream, as a fraction of the bandwidth, for elements of ``dtype``."""
    if dtype in HALF_DTYPES:
        return spec.layout_transform_dram_efficiency_16bit
    return spec.layout_transform_dram_efficiency


def has_figures(spec) -> bool:
    """Whether ``spec`` carries the law's figures (fit_layout on its own sweeps)."""
    return all(getattr(spec, f, None) for f in FIGURES)


def layout_transform_us(c: dict, variant: str, spec) -> float | None:
    """A transform's time by the law above; None without the GPU's figures or for a variant
    that is not one of :data:`TRANSFORMS`."""
    if variant not in TRANSFORMS or not has_figures(spec):
        return None
    tiles = tile_elements(c, variant) / (spec.layout_transform_gelems * 1e3)
    moved = moved_bytes(c, variant)
    dram = 0.0
    if moved / 2 > spec.l2_resident_fraction * spec.l2_bytes:
        dram = moved / (dram_efficiency(spec, c["dtype"]) * spec.bandwidth) * 1e6
    return spec.layout_transform_us + max(tiles, dram)
