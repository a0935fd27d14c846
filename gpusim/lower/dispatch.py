"""Eager dispatch: the kernels ATen, cuDNN and cuBLAS really launch for one op.

Each rule below was read off the profiler's kernel lists in the microbenchmark sweeps
(``validation/sweeps/<gpu>.json``, made by :mod:`validation.microbench`; H100 and
H200, torch 2.11, cuDNN 9, PyTorch's default flags), never off a zoo model:

* **cuDNN layout transforms.** An NCHW convolution with tensor-core work (16-bit, or
  fp32 on TF32 GPUs, where cuDNN's TF32 is on by default) runs an NHWC implicit-GEMM
  kernel wrapped in ``nchwToNhwcKernel`` for the input and for the weight, and
  ``nhwcToNchwKernel`` for the output. fp32 skips the output transform at small channel
  counts and at batch 1 (its kernel writes NCHW directly). No transform under
  channels_last. 1x1 stride-1 convolutions run as cuBLAS GEMMs (no transform) unless the
  spatial size is tiny (7x7: input and output transforms). A first layer with fewer than
  8 input channels at batch 1 runs a direct kernel. GPUs whose architecture row says cuDNN
  runs no TF32 (Volta, Turing: :func:`gpusim.hw.arch.cudnn_conv_tf32`) run fp32 convolutions
  NCHW-native.
* **Depthwise convolutions** (groups == channels): NCHW fp32/bf16, and NCHW fp16 where
  PyTorch's ``use_cudnn_depthwise`` says no (most stride-2 ones, 7x7 filters, fewer than
  32 channels: :func:`aten_depthwise`), run ATen's own ``conv_depthwise2d_forward_kernel``,
  far from bandwidth (class ``depthwise_aten``); the other NCHW fp16 and every
  channels_last case run cuDNN's depthwise kernels (memory-bound).
* **Convolution kernels** (cuDNN implicit GEMM) reach a fraction of what a cuBLAS GEMM
  of the same shape does (``conv_efficiency_scale``) and have a longer floor
  (``conv_min_us``); a *stem* convolution (fewer than 8 input channels: the first layer,
  ViT's patchify) runs a slow direct or padded kernel (``conv_stem_us`` + FLOPs at
  ``conv_stem_tflops``). Patchify stems take the transform path even at batch 1.
* **Eval batch norm** is a separate, slow kernel (cuDNN ``bn_fw_inf`` in fp32, ATen
  ``batch_norm_transform_input`` in 16-bit, which first runs two tiny kernels that
  compute scale and shift; under autocast, 16-bit input with fp32 parameters, cuDNN's
  ``bn_fw_inf`` alone): class ``bn_eval``. ATen's layer norm copies a strided input to a
  contiguous one first (an ``aux`` permuting copy).
* **Misaligned 16-bit GEMMs**: when N or K breaks 16-byte alignment (not a multiple of
  8 elements) cuBLAS falls back to an ``align1`` CUTLASS kernel (``cutlass::Kernel2``)
  at a fraction of the tensor-core rate (class ``align1``): the GPT-2 LM head (N=50257).
* **scaled_dot_product_attention**: the backend is the architecture table's
  (:func:`gpusim.hw.arch.attention_backend`): 16-bit runs cuDNN's fused attention (Hopper) or
  flash; fp32 runs the memory-efficient CUTLASS kernel (class ``attention_fp32``); a
  boolean mask first costs three elementwise kernels over the mask (conversion to an
  additive bias).

* **Broad AMP sample** (``validation/results/h100/broad.jsonl.gz``, per-kernel profiler
  lists): 16-bit 1x1 convs over misaligned maps run cuBLAS's align GEMMs; a strided or
  mixed-dtype ``cat``/``stack`` copies each input; ``linear`` with a bias over a strided
  input copies it, runs the GEMM and adds the bias apart; group norm is three kernels;
  window pooling is its own class (``pool``).

A rule returns :class:`~gpusim.lower.lowering.Kernel` records: the op's main kernel (``role``
``"main"``, with a ``variant`` naming its kernel class) and the library's auxiliary
kernels (``role`` ``"aux"``, with the bytes they move).
"""

from __future__ import annotations

from dataclasses import replace
import dataclasses

from gpusim.hw.arch import attention_backend, cudnn_conv_tf32
from gpusim.graph.opgraph import DTYPE_BYTES, HALF_DTYPES, OpGraph, main_shape, numel
from gpusim.graph.ops import WINDOW_POOLS
from gpusim.graph.ops import is_eval_batch_norm, packet_name


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
    depthwise conv so (records: every one of its depthwise convs runs ``*_nhwc``)."""
    a = graph.g.nodes[n]
    if a.get("layout", "nchw") != "nchw":
        return a["layout"]
    ins = list(a.get("inputs") or a["reads"])
    p = graph.g.nodes[ins[0]] if ins and ins[0] in graph.g else None
    if p is not None and p.get("kind") == "conv" and p is not a:
        return conv_layout(graph, ins[0])
    return "nchw"


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
    weight (``nhwcAddPaddingKernel``: the sweeps' channels-last 7x7 and 16x16 stems)."""
    if is_depthwise(c):
        return [Kernel((n,), "library")]
    if c["Cin"] < 8 and c["kh"] >= 7:
        pad = c["x_bytes"] * (1 + 8 / c["Cin"])
        return [Kernel((n,), "library", role="aux", bytes=pad),
                Kernel((n,), "library", role="aux", bytes=c["w_bytes"] * (1 + 8 / c["Cin"])),
                Kernel((n,), "library", variant="conv_stem")]
    return [Kernel((n,), "library", variant="conv")]


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
            return [dataclasses.replace(main, variant=v) if v != "conv" else main]
        return [Kernel((n,), "library", role="aux", bytes=2.0 * c["x_bytes"]), main,
                Kernel((n,), "library", role="aux", bytes=2.0 * c["out_bytes"])]
    patchify = c["kh"] >= 4 and (c["H"] - c["kh"]) % c["kh"] == 0 and c["Ho"] * c["kh"] == c["H"]
    if c["N"] == 1 and (stem and not patchify or c["groups"] > 1 and c["H"] * c["W"] > 1024):
        return [main]                     # direct kernels: stem conv, grouped at batch 1
    grouped = c["groups"] > 1
    # the weight of a grouped conv goes through cuDNN's generic tensorTransform, ~10 us
    # whatever its size, when its channels per group are not a power of two (cnn sweep:
    # RegNet's 24 at every shape; 8, 16, 32 and 64 take the plain nchwToNhwc)
    generic_w = grouped and not is_pow2(c["Cin"] // c["groups"])
    ks = [Kernel((n,), "library", role="aux", bytes=2.0 * c["x_bytes"]),
          Kernel((n,), "library", role="aux", bytes=2.0 * c["w_bytes"],
                 variant="weight_transform" if generic_w else ""), main]
    fp32_writes_nchw = c["dtype"] == "float32" and not grouped and (c["N"] == 1 or c["Cin"] < 128)
    if not fp32_writes_nchw:
        ks.append(Kernel((n,), "library", role="aux", bytes=2.0 * c["out_bytes"]))
    return ks


#: Cin x Cout past which a 16-bit 1x1 convolution over misaligned maps (H*W not a multiple
#: of 8) is not priced as cuBLAS's align kernels: at batch 256 (broad H100 AMP records)
#: 1024 -> 512 and 384 -> 1536 on 14x14 run ``sm90_xmma_fprop_implicit_gemm`` with layout
#: transforms, 1024 -> 256 and smaller the ``align2`` GEMM; at batch 32 (zoo records) the
#: same 1024 -> 512 runs either way, so the large ones keep the conv class and kernels
#: they had
LARGE_POINTWISE = 2 ** 18


def pointwise_gemm_variant(c: dict) -> str:
    """The cuBLAS class of a 1x1 convolution run as a GEMM over NCHW (per image: Cout x H*W
    output, K = Cin): a 16-bit one whose H*W or Cin breaks 16-byte alignment runs the
    ``align2``/``align1`` CUTLASS kernels as a misaligned linear does (broad H100 AMP
    records: ``cutlass_80_tensorop_f16_s16816gemm_f16_256x128_64x3_nn_align2`` on 14x14
    maps, ``cutlass_75_tensorop_f16_s1688gemm_f16_*_nn_align1`` on 35x35 and 9x9); else
    the ``conv`` class it was fitted as."""
    if (c["dtype"] not in HALF_DTYPES or c["H"] * c["W"] == 1 or c.get("backward") or c["N"] == 1
            or c["Cin"] * c["Cout"] > LARGE_POINTWISE):
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


def conv_bias_kernels(graph: OpGraph, n: str, Kernel) -> list:
    """ATen adds a convolution's bias after cuDNN in a kernel of its own (``add_`` of the
    bias broadcast over the output: Convolution.cpp), for every cuDNN and cuBLAS path;
    only ATen's own NCHW depthwise kernel takes the bias in (cnn sweep: all 264 biased
    points)."""
    c = conv_info(graph, n)
    if c is None or not c["bias"]:
        return []
    if is_depthwise(c) and aten_depthwise(c):
        return []
    return [Kernel((n,), "aten", role="aux", bytes=2.0 * c["out_bytes"], variant="conv_bias")]


def gemm_variant(graph: OpGraph, n: str) -> str:
    """A 16-bit GEMM whose N or K is not a multiple of 8 elements (16 bytes) runs an
    ``align2`` kernel when both are even, else ``align1``. An fp32 product of one row runs
    cuBLAS's ``gemv`` kernels (a weight stream); an fp32 product with a bias (``addmm``:
    ``F.linear``) goes through cuBLASLt's bias epilogue, whose kernels do not split K
    (``gemm_lt``: 2-2.6x a plain ``mm`` of the same shape at 16-512 rows in the sweeps).
    Others the ``gemm`` class. (fp32 here means PyTorch's default: TF32 off for matmuls.)"""
    a = graph.g.nodes[n]
    g = a.get("gemm") or {}
    if a["dtype"] == "float32" and g:
        if g.get("b", 1) * g.get("m", 2) == 1:
            return "gemv"
        return "gemm_lt" if has_bias(graph, n) else "gemm"
    if a["dtype"] not in HALF_DTYPES or not g:
        return "gemm"
    return misaligned_variant(g.get("n", 8), g.get("k", 8)) or "gemm"


def has_bias(graph: OpGraph, n: str) -> bool:
    """Whether a matrix product node adds a bias in the library call (``addmm``,
    ``baddbmm``, ``addmv``, or ``linear`` with a third input)."""
    a = graph.g.nodes[n]
    name = packet_name(a["op"])
    return name.startswith("add") or (name == "linear" and len(a["reads"]) > 2)


def strided_linear(graph: OpGraph, n: str) -> bool:
    """A 16-bit ``linear`` with a bias over a strided input of 3 or more dims (known on
    CUDA traces: ``input_contiguous``), which eager runs as copy, GEMM and bias add."""
    a = graph.g.nodes[n]
    return (packet_name(a["op"]) == "linear" and a.get("input_contiguous") is False
            and has_bias(graph, n) and len(main_shape(a.get("shape"))) >= 3
            and a["dtype"] in HALF_DTYPES)


def cublaslt_split_k(graph: OpGraph, n: str) -> bool:
    """Whether cuBLASLt runs an fp32 bias GEMM as split-K with atomics
    (``sgemm_largek``): a ``scal_kernel`` zeroes the output first and an epilogue kernel
    adds the bias after. The sweeps (H100 and H200 alike) show it for ``F.linear``
    (transposed weight) with outputs of 2^16 to 2^17 elements and K >= N (right on 46 of
    the 48 fp32 linear points with more than one row); ``addmm`` on an untransposed weight (GPT-2's
    Conv1D) runs single kernels."""
    a = graph.g.nodes[n]
    g = a.get("gemm") or {}
    if packet_name(a["op"]) != "linear" or not g:
        return False
    mn = g.get("b", 1) * g["m"] * g["n"]
    return g["k"] >= g["n"] and 2 ** 16 <= mn <= 2 ** 17


def attention_variant(graph: OpGraph, n: str, spec=None) -> str:
    """The attention kernel class, after the backend PyTorch picks on ``spec``'s GPU
    (:func:`gpusim.hw.arch.attention_backend`, the architecture table): fp32 runs the
    memory-efficient CUTLASS kernel (``attention_fp32``); 16-bit runs cuDNN's fused
    attention (Hopper) or flash (sm80-sm89): the GPU's ``attention`` class, slower with an
    additive mask (a bool mask is turned into one) than without or causal (sweeps: 37 vs
    21 us at 8x12x512x64). Before sm80, fp16 runs the memory-efficient kernel
    (``attention_efficient``) and bf16 no fused kernel (``attention_math``): classes no
    calibration has fitted, priced by the plain roofline. No spec: the Hopper order."""
    a = graph.g.nodes[n]
    if a["dtype"] != "float32" and a["dtype"] not in HALF_DTYPES:
        return ""
    backend = attention_backend(spec, a["dtype"])
    if backend == "math":
        return "attention_math"
    if a["dtype"] == "float32":
        return "attention_fp32"
    if backend == "efficient":
        return "attention_efficient"
    return "attention_mask" if (a.get("sdpa") or {}).get("mask") else "attention"


def sdpa_kernels(graph: OpGraph, n: str, spec, Kernel) -> list:
    a = graph.g.nodes[n]
    info = a.get("sdpa") or {}
    variant = attention_variant(graph, n, spec)
    ks = []
    if info.get("mask") and info.get("mask_dtype") == "bool":
        shape = info.get("mask_shape") or ()
        mb = float(numel(shape)) if shape else 0.0
        # bool mask -> additive bias: three elementwise kernels over the mask
        ks += [Kernel((n,), "aten", role="aux", bytes=mb * (1 + DTYPE_BYTES.get(a["dtype"], 4)))
               for _ in range(3)]
    return ks + [Kernel((n,), "library", variant=variant)]


def eager_kernels(graph: OpGraph, n: str, spec, Kernel) -> list:
    """The kernels eager PyTorch launches for compute node ``n`` on ``spec``'s GPU."""
    a = graph.g.nodes[n]
    kind = a["kind"]
    training = training_kernels(graph, n, spec, Kernel)
    if training is not None:
        return training
    if kind == "conv":
        return conv_kernels(graph, n, spec, Kernel) + conv_bias_kernels(graph, n, Kernel)
    if kind == "attention":
        return sdpa_kernels(graph, n, spec, Kernel)
    if kind == "matmul" and strided_linear(graph, n):
        # ``at::linear`` folds a contiguous input into one addmm; a strided one (CaiT's
        # talking heads: a Linear over the heads dim of a permuted score tensor) goes
        # through matmul, which copies it contiguous, and adds the bias after in a kernel
        # of its own (broad H100 AMP records: direct_copy, the GEMM, a broadcast add)
        x = graph.g.nodes[list(a.get("inputs") or a["reads"])[0]]
        xb = float(numel(main_shape(x.get("shape")))) * DTYPE_BYTES.get(x.get("dtype"), 2)
        return [Kernel((n,), "aten", role="aux", bytes=2.0 * xb, variant="strided_copy"),
                Kernel((n,), "library", variant=gemm_variant(graph, n)),
                Kernel((n,), "aten", role="aux", bytes=2.0 * a["bytes_written"], variant="conv_bias")]
    if kind == "matmul":
        variant = gemm_variant(graph, n)
        main = Kernel((n,), "library", variant=variant)
        if variant == "gemm_lt" and cublaslt_split_k(graph, n):
            out = a["bytes_written"]
            return [Kernel((n,), "library", role="aux", bytes=out), main,
                    Kernel((n,), "library", role="aux", bytes=2.0 * out)]
        return [main]
    if kind == "norm" and packet_name(a["op"]) in BATCH_NORM_TRAIN:
        return batch_norm_train_kernels(graph, n, Kernel)
    if kind == "norm" and is_eval_batch_norm(a["op"]):
        # 16-bit parameters are converted for cuDNN first (two small kernels); under
        # autocast the parameters stay fp32 and cuDNN takes them as they are (broad H100
        # AMP records: one bn_fw_inf kernel per batch norm, nothing before it)
        ins = list(a.get("inputs") or ())
        params_half = len(ins) < 2 or graph.g.nodes[ins[1]].get("dtype") in HALF_DTYPES
        prep = [Kernel((n,), "aten", role="aux", bytes=0.0) for _ in range(2)] \
            if a["dtype"] in HALF_DTYPES and params_half else []
        return prep + [Kernel((n,), "library", variant="bn_eval")]
    name = packet_name(a["op"])
    if name in SCALAR_CONSTANTS and not a.get("shape") and all(
            packet_name(graph.g.nodes[s]["op"]) == "copy_" for s in graph.dataflow.successors(n)):
        # ``x[idx] = 3.0``: traced as a 0-dim constant copied into the slice; eager runs
        # one fill_ kernel on the slice (the copy_) and no kernel for the host scalar
        return []
    if name == "masked_fill":
        # the out-of-place masked_fill clones, then fills in place (TensorAdvancedIndexing
        # .cpp: ``result = self.clone(); result.masked_fill_(...)``): a device copy first
        return [Kernel((n,), "aten", role="aux", bytes=2.0 * a["bytes_written"]), Kernel((n,), "aten")]
    if a.get("cat_copies"):
        # (CUDA traces: gpusim.capture.fxnodes._cat_copies) a strided or mixed-dtype cat/stack:
        # one strided copy per input (broad H100 AMP records: RoPE ViTs' stack of two
        # strided halves runs two direct_copy kernels, not CatArrayBatchedCopy)
        return [Kernel((n,), "aten", role="aux", bytes=b, variant="cat_copy")
                for b in a["cat_copies"]]
    impl = "library" if kind == "norm" else "aten"
    main = Kernel((n,), impl, variant="layer_norm" if name in LAYER_NORMS else
                  "pool" if name in WINDOW_POOLS else "")
    if name in GROUP_NORMS:
        # ATen's group norm: RowwiseMomentsCUDAKernel (reads the input), a tiny kernel for
        # the fused scale and shift, then the elementwise GroupNormKernelImpl (broad H100
        # AMP records: poolformer's GroupNorm(1, C), three kernels each), after a copy of
        # a strided input (poolformerv2's channels-last stream: a direct_copy first)
        xb = next(iter(a["reads"].values()), a["bytes_written"])
        copy = [Kernel((n,), "aten", role="aux", bytes=2.0 * xb, variant="strided_copy")] \
            if a.get("input_contiguous") is False else []
        return copy + [Kernel((n,), "aten", role="aux", bytes=float(xb), variant="moments"),
                       Kernel((n,), "aten", role="aux", bytes=0.0), main]
    if name in LAYER_NORMS and a.get("input_contiguous") is False:
        # (``input_contiguous``: set on CUDA traces only, where the strides are cuDNN's
        # real layouts; a meta trace keeps NCHW where cuDNN returns channels-last, and
        # ConvNeXt's permuted layer norms copy nothing on a GPU)
        # ATen's layer norm runs on a contiguous copy of a strided input
        # (``input.expect_contiguous()``): a ViT without a class token keeps the patch
        # embedding's transposed strides through its residual stream, so every block's
        # norms copy (broad H100 AMP records: a direct_copy elementwise_kernel before each
        # vectorized_layer_norm_kernel of vit_base_patch16_siglip_384)
        xb = next(iter(a["reads"].values()), a["bytes_written"])
        return [Kernel((n,), "aten", role="aux", bytes=2.0 * xb, variant="strided_copy"), main]
    return [main]


def training_kernels(graph: OpGraph, n: str, spec, Kernel) -> list | None:
    """The kernels of a backward or optimizer op (:mod:`gpusim.capture.train`), None for others.

    * ``_foreach_*`` / ``_fused_*``: multi-tensor-apply launches
      (:func:`gpusim.graph.train_ops.mta_launches`) with the 4 KB kernel-argument tables, as the
      H100 training records launch them (torch 2.11: ResNet-50's AdamW step 26 kernels, SGD
      9, where the 32 KB tables would give 8 and 3); the first launch (class ``mta``)
      carries the op's bytes at ``mta_efficiency`` of the bandwidth, the others
      (``mta_launch``) at ``mta_launch_us`` each (a full table's tensors or blocks: more than
      the common floor; without the figure, the floor).
    * ``convolution_backward`` (one gradient per node after capture's split): cuDNN's
      backward-data or backward-filter kernel with the forward conv's layout kernels
      (:func:`conv_kernels` on the forward's shapes, :func:`_conv_backward_info`), priced by
      the forward conv law (class ``conv``) on its own implicit GEMM. The H100 ResNet-50
      fp32 training records have 72 ``nchwToNhwc`` and 31 ``nhwcToNchw`` kernels in
      backward where this rule gives 78 and 38; the backward kernels' efficiency is the
      forward's, ASSUMED (no fitted backward class yet).
    * ``native_layer_norm_backward``: the input gradient and the weight/bias column sums
      (``GammaBetaBackward``), two kernels.
    * ``embedding_dense_backward``: the indices sorted (a radix sort) and the gradient table
      zeroed before the segmented scatter-add: three kernels (ATen's
      ``embedding_backward_cuda_kernel`` runs a few more small ones).
    * ``nll_loss_backward``: the gradient zeroed, then the target column written.
    * a backward ``sum`` over the leading dim (:func:`column_sum`: bias and layer-scale
      gradients): class ``column_sum``."""
    a = graph.g.nodes[n]
    fe = a.get("foreach")
    if fe:
        from gpusim.graph.train_ops import mta_launches
        k = mta_launches(fe["numels"], fe["depth"], fe["scalarlist"])
        return [Kernel((n,), "aten", variant="mta")] + [
            Kernel((n,), "aten", role="aux", bytes=0.0, variant="mta_launch") for _ in range(max(0, k - 1))]
    name = packet_name(a["op"])
    if name == "convolution_backward":
        return conv_backward_kernels(graph, n, spec, Kernel)
    if name in BATCH_NORM_BACKWARD:
        return [Kernel((n,), "library" if cudnn_batch_norm(graph, n) else "aten", variant="bn_backward")]
    if name == "native_layer_norm_backward":
        return [Kernel((n,), "library"),
                Kernel((n,), "library", role="aux", bytes=float(a["bytes_read"]) / 2)]
    if name == "embedding_dense_backward":
        idx = sum(b for p, b in a["reads"].items() if graph.g.nodes[p]["dtype"] in ("int64", "int32"))
        return [Kernel((n,), "aten", role="aux", bytes=4.0 * idx),
                Kernel((n,), "aten", role="aux", bytes=a["bytes_written"] / 2), Kernel((n,), "aten")]
    if name == "nll_loss_backward":
        return [Kernel((n,), "aten", role="aux", bytes=a["bytes_written"]), Kernel((n,), "aten")]
    if name == "sum" and a.get("phase") == "backward" and column_sum(graph, n):
        return [Kernel((n,), "aten", variant="column_sum")]
    return None


def column_sum(graph: OpGraph, n: str) -> bool:
    """Whether reduction node ``n`` sums over its input's leading dim, keeping others
    (``[tokens, features] -> [features]``, ``[N, C, H, W] -> [C]``): ATen's
    ``reduce_kernel`` then reduces across rows (an outer reduction), not along contiguous
    rows. Autograd's bias and layer-scale gradients are such sums (H100 training records:
    BERT-base's bf16 bias gradients over 1,024 tokens take 7-10 us a kernel where a stream
    of their bytes takes 1-2 us; each runs ``reduce_kernel<128, 4>``, the row sums
    ``reduce_kernel<512, 1>``)."""
    a = graph.g.nodes[n]
    ins = list(a.get("inputs") or a["reads"])
    if not ins or ins[0] not in graph.g:
        return False
    x = list(main_shape(graph.g.nodes[ins[0]].get("shape")))
    out = list(main_shape(a.get("shape")))
    kept = [d for d in out if d != 1]
    if not kept or len(x) < 2 or x[0] == 1:
        return False
    if len(out) == len(x):          # keepdim: the leading dim reduced to 1
        return out[0] == 1
    return kept != x[:len(kept)]


def conv_backward_kernels(graph: OpGraph, n: str, spec, Kernel) -> list:
    """:func:`conv_kernels` of a backward convolution node, its cuDNN kernel in the class of
    its direction: ``conv_dgrad`` (backward-data) or ``conv_wgrad`` (backward-filter), priced
    as the forward conv law times the direction's scale (:func:`gpusim.cost.kernel.estimate_kernel`);
    stems and depthwise convolutions keep their forward classes."""
    ks = conv_kernels(graph, n, spec, Kernel)
    c = conv_info(graph, n)
    if c is None or not c.get("backward"):
        return ks
    v = "conv_dgrad" if c["backward"] == "data" else "conv_wgrad"
    return [replace(k, variant=v) if k.role == "main" and k.variant == "conv" else k for k in ks]


#: training-mode batch norm (batch statistics; capture's :func:`gpusim.capture.train_fx.cuda_batch_norm`)
#: and the batch-norm backward ops
BATCH_NORM_TRAIN = ("cudnn_batch_norm",)
BATCH_NORM_BACKWARD = ("native_batch_norm_backward", "cudnn_batch_norm_backward")


def cudnn_batch_norm(graph: OpGraph, n: str) -> bool:
    """Whether PyTorch runs batch-norm node ``n`` (training forward or backward) on cuDNN:
    not for bfloat16, nor for float16 with float16 parameters (ATen's
    ``_select_batch_norm_backend``: cuDNN takes fp32, and fp16 input with fp32 parameters,
    as autocast leaves them); ATen's native kernels otherwise."""
    a = graph.g.nodes[n]
    if a["dtype"] == "bfloat16":
        return False
    if a["dtype"] != "float16":
        return True
    ins = list(a.get("inputs") or a["reads"])
    # forward (input, weight, ...); backward (grad_out, input, weight, ...)
    w = ins[2] if packet_name(a["op"]) in BATCH_NORM_BACKWARD else ins[1] if len(ins) > 1 else None
    return w is None or w not in graph.g or graph.g.nodes[w].get("dtype") == "float32"


def batch_norm_train_kernels(graph: OpGraph, n: str, Kernel) -> list:
    """A training-mode batch norm: cuDNN's one ``bn_fw_tr`` kernel (statistics, running
    averages and the normalised output), class ``bn_train``; ATen's native path (bf16)
    runs three (H100 AMP training records: ``batch_norm_collect_statistics_kernel`` reading
    the input, the running averages' multi-output elementwise kernel over the channels,
    ``batch_norm_transform_input_kernel``): the statistics pass an ``aux`` kernel of the
    class over the input's bytes, the running averages a launch."""
    a = graph.g.nodes[n]
    if cudnn_batch_norm(graph, n):
        return [Kernel((n,), "library", variant="bn_train")]
    ins = list(a.get("inputs") or a["reads"])
    xb = float(a["reads"].get(ins[0], 0.0)) if ins else 0.0
    return [Kernel((n,), "aten", role="aux", bytes=xb, variant="bn_train"),
            Kernel((n,), "aten", role="aux", bytes=0.0, variant="bn_train"),
            Kernel((n,), "aten", variant="bn_train")]


#: ATen's group norm ops (moments, parameters, apply: :func:`eager_kernels`)
GROUP_NORMS = ("group_norm", "native_group_norm")
#: ATen's row-wise layer norm kernels (a block per row: :func:`_fit_layer_norm`)
LAYER_NORMS = ("layer_norm", "native_layer_norm")


#: 0-dim constants a traced ``t[idx] = value`` materialises (eager keeps them on the host)
SCALAR_CONSTANTS = ("scalar_tensor", "lift_fresh", "lift_fresh_copy")


__all__ = ["eager_kernels", "conv_info"]
