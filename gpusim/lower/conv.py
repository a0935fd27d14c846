"""Convolution facts the eager dispatch rules read: shapes, strides, groups and layout of a conv node (forward and backward, :func:`conv_info`), depthwise detection, and the cuDNN kernels a conv launches in either layout (:func:`conv_kernels`, :func:`nhwc_conv_kernels`)."""

from __future__ import annotations
import dataclasses
from gpusim.hw.arch import cudnn_conv_tf32
from gpusim.graph.opgraph import DTYPE_BYTES, HALF_DTYPES, OpGraph, main_shape, numel
from gpusim.graph.ops import packet_name


def _shape(graph: OpGraph, name: str):
    return main_shape(graph.g.nodes[name].get("shape"))


def conv_info(graph: OpGraph, n: str) -> dict | None:
    """Input, weight and output shapes, groups, bias and layout of a 2-D convolution node.

    Shapes come from the node's direct inputs (a permuted view has the shape the conv
    sees; the storage it reads may be laid out otherwise: ConvNeXt's LayerNorm2d)."""
    a = graph.g.nodes[n]
    ins = list(a.get("inputs") or a["reads"])
    if packet_name(a["op"]) == "convolution_backward":
        return _conv_backward_info(graph, n, ins)
    if len(ins) < 2:
        return None
    x, w = _shape(graph, ins[0]), _shape(graph, ins[1])
    out = _shape(graph, n)
    if len(x) != 4 or len(w) != 4 or len(out) != 4:
        return None
    cin, cin_g = x[1], w[1]
    return {"N": x[0], "Cin": cin, "Cout": w[0], "H": x[2], "W": x[3], "kh": w[2], "kw": w[3],
            "groups": max(1, cin // max(cin_g, 1)), "Ho": out[2], "Wo": out[3],
            "layout": conv_layout(graph, n), "dtype": a["dtype"], "bias": len(ins) > 2,
            "x_bytes": numel(x) * DTYPE_BYTES.get(a["dtype"], 4),
            "w_bytes": numel(w) * DTYPE_BYTES.get(a["dtype"], 4),
            "out_bytes": a["bytes_written"]}


def _conv_backward_info(graph: OpGraph, n: str, ins: list) -> dict | None:
    """:func:`conv_info` of a backward convolution node (``convolution_backward(grad_out,
    input, weight)`` computing one gradient): the forward conv's shapes, and as the tensors
    cuDNN reads and writes, backward-data's grad_out and weight in, grad_input out;
    backward-filter's grad_out and input in, grad_weight out."""
    a = graph.g.nodes[n]
    if len(ins) < 3:
        return None
    go, x, w = (_shape(graph, i) for i in ins[:3])
    if len(x) != 4 or len(w) != 4 or len(go) != 4:
        return None
    size = DTYPE_BYTES.get(a["dtype"], 4)
    xb, wb, ob = numel(x) * size, numel(w) * size, numel(go) * size
    data = tuple(_shape(graph, n)) == tuple(x)
    cin, cin_g = x[1], w[1]
    return {"N": x[0], "Cin": cin, "Cout": w[0], "H": x[2], "W": x[3], "kh": w[2], "kw": w[3],
            "groups": max(1, cin // max(cin_g, 1)), "Ho": go[2], "Wo": go[3],
            "layout": conv_layout(graph, n), "dtype": a["dtype"], "bias": False,
            "x_bytes": ob, "w_bytes": wb if data else xb, "out_bytes": xb if data else wb,
            "backward": "data" if data else "filter"}


def conv_layout(graph: OpGraph, n: str) -> str:
    """The layout cuDNN runs conv ``n`` in: capture's (the strides of its input and
    weight), or ``nhwc`` when its input is written by a channels-last convolution: cuDNN
    writes an NHWC conv's output channels-last, which capture's meta convolutions do not
    (they return contiguous outputs). ConvNeXt's downsampling conv feeds the next
    depthwise conv so (records: every one of its depthwise convs runs ``*_nhwc``). The
    output of elementwise ops between the two keeps that layout (:func:`_layout_source`)."""
    a = graph.g.nodes[n]
    if a.get("layout", "nchw") != "nchw":
        return a["layout"]
    ins = list(a.get("inputs") or a["reads"])
    src = _layout_source(graph, ins[0]) if ins and ins[0] in graph.g else None
    if src is not None and src != n:
        return conv_layout(graph, src)
    return "nchw"


#: how many elementwise ops :func:`_layout_source` walks back through
LAYOUT_WALK = 8


def _layout_source(graph: OpGraph, p: str) -> str | None:
    """The convolution whose output layout tensor ``p`` has: ``p`` itself, or the conv
    behind a chain of elementwise ops whose first operand of the output's shape is the
    previous link (TensorIterator gives its output that operand's memory format:
    ``TensorIteratorBase::compute_strides`` sorts the dims by the first operand with
    strides that decide it; an activation of a channels-last conv output is channels-last,
    so MetaFormer's StarReLU between a 1x1 conv and its 7x7 depthwise conv keeps NHWC);
    None otherwise."""
    for _ in range(LAYOUT_WALK):
        a = graph.g.nodes[p]
        if a.get("kind") == "conv":
            return p
        if a.get("kind") != "pointwise" and packet_name(a.get("op", "")) not in ("dropout",):
            return None
        shape = a.get("shape")
        nxt = next((i for i in (a.get("inputs") or a["reads"]) if i in graph.g
                    and graph.g.nodes[i].get("shape") == shape), None)
        if nxt is None:
            return None
        p = nxt
    return None


def is_depthwise(c: dict) -> bool:
    """A depthwise conv (one input channel per group), from conv_info or a sweep point."""
    return c["groups"] > 1 and c["groups"] == c["Cin"]


def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def conv_stride(c: dict) -> int:
    """A convolution's stride: a sweep point's own, else read off the input and output
    sizes (capture keeps no stride: an output at least ``H - (kh - 1)`` tall is stride 1,
    whatever the padding; otherwise ``H / Ho`` rounded)."""
    s = c.get("stride")
    if s:
        return int(s[0] if isinstance(s, (list, tuple)) else s)
    k = c.get("kh", c.get("k", 1))
    if c["Ho"] >= c["H"] - (k - 1):
        return 1
    return max(1, round(c["H"] / max(c["Ho"], 1)))


def aten_depthwise(c: dict) -> bool:
    """Whether ATen's own NCHW depthwise kernel (``conv_depthwise2d_forward_kernel``) runs
    rather than cuDNN's: PyTorch's ``ConvParams::use_cudnn_depthwise`` (Convolution.cpp,
    cuDNN >= 8.2; channels-last always takes cuDNN). cuDNN only for fp16 with at least 32
    channels, then: a 1-D conv at stride 1; else square 1/3/5 filters on maps at least 7
    wide, at stride 1 always, at stride 2 at batch 1 (1x1 up to 28 wide, 3x3, 5x5) or, at
    larger batches, a 1x1 at batch <= 16 with >= 128 channels on maps <= 7 wide and 3x3 /
    5x5 with >= 512 channels, or >= 256 on maps >= 28 wide (``check_cudnn_depthwise_
    workload_with_filter``). Every fp16 NCHW depthwise point of the H100 and H200 cnn
    sweeps agrees (8 ATen, 10 cuDNN), and the broad H100 AMP records' matched kernels
    (115 ATen, 328 cuDNN; the 21 others are MixConv's split convolutions, misaligned)."""
    if c["layout"] != "nchw":
        return False
    if c["dtype"] != "float16" or c["Cin"] < 32:
        return True
    k, kw = c.get("kh", c.get("k", 3)), c.get("kw", c.get("k", 3))
    width, height = c.get("W", c.get("HW")), c.get("H", c.get("HW"))
    s = conv_stride(c)
    if height == 1 and s == 1:
        return False
    if k != kw or k not in (1, 3, 5) or width < 7:
        return True
    if s == 1:
        return False
    if s != 2:
        return True
    if c["N"] == 1:
        return not (k == 1 and width <= 28 or k in (3, 5))
    if k == 1 and c["N"] <= 16 and c["Cin"] >= 128 and width <= 7:
        return False
    return not (k in (3, 5) and (c["Cin"] >= 512 or c["Cin"] >= 256 and width >= 28))


def nhwc_conv_kernels(c: dict, n: str, Kernel) -> list:
    """cuDNN on a channels-last convolution: no layout transform; a large-filter stem conv
    (fewer than 8 input channels, 7x7 and up) first pads its input to 8 channels and its
    weight (``nhwcAddPaddingKernel``: the sweeps' channels-last 7x7 and 16x16 stems). A 3x3 or 4x4
    stem runs cuDNN's NHWC stem kernels, by dtype (class ``conv_stem_nhwc``; cnn_stems sweep: 28 us
    fp16 and 67 us bf16 for a batch-32 3x3 stem the conv class put at 9); a 7x7 one keeps the stem
    law (which kernel cuDNN picks for it depends on the map, the batch and the dtype: docs/cnn.md)."""
    if is_depthwise(c):
        return [Kernel((n,), "library")]
    if c["Cin"] < 8 and c["kh"] >= 7:
        pad = c["x_bytes"] * (1 + 8 / c["Cin"])
        return [Kernel((n,), "library", role="aux", bytes=pad),
                Kernel((n,), "library", role="aux", bytes=c["w_bytes"] * (1 + 8 / c["Cin"])),
                Kernel((n,), "library", variant="conv_stem")]
    return [Kernel((n,), "library", variant="conv_stem_nhwc" if c["Cin"] < 8 else "conv")]


def conv_kernels(graph: OpGraph, n: str, spec, Kernel) -> list:
    """cuDNN's kernels for convolution ``n`` without its bias (:func:`conv_bias_kernels`)."""
    c = conv_info(graph, n)
    if c is None:
        return [Kernel((n,), "library")]
    if is_depthwise(c):
        return [Kernel((n,), "library", variant="depthwise_aten" if aten_depthwise(c) else "depthwise")]
    stem = c["Cin"] < 8
    main = Kernel((n,), "library", variant="conv_stem" if stem else "conv")
    if c["layout"] != "nchw":
        return nhwc_conv_kernels(c, n, Kernel)
    tensor_core = c["dtype"] in HALF_DTYPES or (c["dtype"] == "float32" and cudnn_conv_tf32(spec))
    if not tensor_core:
        return [main]
    pointwise = c["kh"] == c["kw"] == 1 and c["groups"] == 1
    if pointwise:
        # a cuBLAS GEMM over NCHW, no transform: at batch 1 and on 1x1 maps (squeeze-
        # excite) at any size, and past 8x8 maps at any batch (cnn sweep: 7x7 at batch 1)
        hw = c["H"] * c["W"]
        if c["N"] == 1 or hw == 1 or hw > 64:
            v = pointwise_gemm_variant(c)
            if v == "conv" and main.variant == "conv" and not c.get("backward"):
                v = "conv_gemm"           # cuBLAS's kernels, not cuDNN's (gpusim.cost.laws.conv_gemm)
            return [dataclasses.replace(main, variant=v) if v != "conv" else main]
        return [Kernel((n,), "library", role="aux", bytes=2.0 * c["x_bytes"], variant="to_nhwc"), main,
                Kernel((n,), "library", role="aux", bytes=2.0 * c["out_bytes"], variant="to_nchw")]
    patchify = c["kh"] >= 4 and (c["H"] - c["kh"]) % c["kh"] == 0 and c["Ho"] * c["kh"] == c["H"]
    if c["N"] == 1 and (stem and not patchify or c["groups"] > 1 and c["H"] * c["W"] > 1024):
        return [main]                     # direct kernels: stem conv, grouped at batch 1
    grouped = c["groups"] > 1
    # the weight of a grouped conv goes through cuDNN's generic tensorTransform, ~10 us
    # whatever its size, when its channels per group are not a power of two (cnn sweep:
    # RegNet's 24 at every shape; 8, 16, 32 and 64 take the plain nchwToNhwc)
    generic_w = grouped and not is_pow2(c["Cin"] // c["groups"])
    # (variants: the transposes gpusim.cost.layout prices by their tiles)
    ks = [Kernel((n,), "library", role="aux", bytes=2.0 * c["x_bytes"], variant="to_nhwc"),
          Kernel((n,), "library", role="aux", bytes=2.0 * c["w_bytes"],
                 variant="weight_transform" if generic_w else "weight_to_nhwc"), main]
    fp32_writes_nchw = c["dtype"] == "float32" and not grouped and (c["N"] == 1 or c["Cin"] < 128)
    if not fp32_writes_nchw:
        ks.append(Kernel((n,), "library", role="aux", bytes=2.0 * c["out_bytes"], variant="to_nchw"))
    return ks


#: Cin x Cout past which a 16-bit 1x1 convolution over misaligned maps (H*W not a multiple
#: of 8) at a batch past ALIGN_MAX_BATCH is not priced as cuBLAS's align kernels: at batch 256
#: (broad H100 AMP records) 1024 -> 512 and 384 -> 1536 on 14x14 run
#: ``sm90_xmma_fprop_implicit_gemm`` with layout transforms, 1024 -> 256 and smaller the
#: ``align2`` GEMM, so the large ones keep the conv class and kernels they had
LARGE_POINTWISE = 2 ** 18
#: the batch up to which a misaligned 16-bit 1x1 convolution runs cuBLAS's align kernels at
#: any Cin x Cout: the H200's cnn_dispatch sweeps (9, 10, 14, 15 px maps, Cin x Cout 54 k - 2 M,
#: batch 1-256: align kernels at 212 of the 260 points up to batch 64, cuDNN's implicit GEMM
#: with transforms at most large ones from batch 128)
ALIGN_MAX_BATCH = 64


def pointwise_gemm_variant(c: dict) -> str:
    """The cuBLAS class of a 1x1 convolution run as a GEMM over NCHW (per image: Cout x H*W
    output, K = Cin): a 16-bit one whose H*W or Cin breaks 16-byte alignment runs the
    ``align2``/``align1`` CUTLASS kernels as a misaligned linear does (broad H100 AMP
    records: ``cutlass_80_tensorop_f16_s16816gemm_f16_256x128_64x3_nn_align2`` on 14x14
    maps, ``cutlass_75_tensorop_f16_s1688gemm_f16_*_nn_align1`` on 35x35 and 9x9); else
    the ``conv`` class it was fitted as."""
    if (c["dtype"] not in HALF_DTYPES or c["H"] * c["W"] == 1 or c.get("backward") or c["N"] == 1
            or c["Cin"] * c["Cout"] > LARGE_POINTWISE and c["N"] > ALIGN_MAX_BATCH):
        # (backward GEMMs: the training classes' own rules; batch 1 keeps the conv class
        # its zoo records were fitted with)
        return "conv"
    v = misaligned_variant(c["H"] * c["W"], c["Cin"])
    return v or "conv"


def misaligned_variant(n: int, k: int) -> str:
    """``"align2"`` / ``"align1"`` for a 16-bit GEMM whose N or K is not a multiple of 8
    elements (even / odd), ``""`` when both are aligned."""
    if n % 8 == 0 and k % 8 == 0:
        return ""
    return "align2" if n % 2 == 0 and k % 2 == 0 else "align1"
