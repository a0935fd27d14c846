"""Eager dispatch: the kernels ATen, cuDNN and cuBLAS really launch for one op.

Each rule below was read off the profiler's kernel lists in the microbenchmark sweeps
(``validation/sweeps/<gpu>.json``, made by :mod:`validation.measure.microbench`; H100 and
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
  additive bias). A masked 16-bit call's class follows how its kernel reads the mask
  (:func:`mask_layout`; H200 ``sdpa_mask`` sweep): broadcast over queries, dense per batch,
  or dense per head.

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


from gpusim.hw.arch import attention_backend
from gpusim.graph.opgraph import DTYPE_BYTES, HALF_DTYPES, OpGraph, main_shape, numel
from gpusim.graph.ops import WINDOW_POOLS
from gpusim.graph.ops import is_eval_batch_norm, packet_name
from gpusim.lower.conv import aten_depthwise, conv_info, conv_kernels, is_depthwise
from gpusim.lower.dispatch_train import BATCH_NORM_TRAIN, batch_norm_train_kernels, training_kernels
from gpusim.lower.conv import misaligned_variant
from gpusim.lower.layout import strided
from gpusim.lower.reductions import aten_reduce


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


def folded_linear(graph: OpGraph, n: str) -> bool:
    """A 16-bit ``linear`` with a bias over a strided input whose leading dims fold into the
    rows as a view (``fold_view``, :func:`gpusim.capture.fxnodes._strided_fold`): at::linear
    (aten/src/ATen/native/Linear.cpp) fuses the bias only into an addmm of a 2-D or contiguous
    input, so this runs ``matmul`` (the fold is a view, no copy) and then ``add_`` of the bias."""
    a = graph.g.nodes[n]
    return (packet_name(a["op"]) == "linear" and bool(a.get("fold_view")) and has_bias(graph, n)
            and a["dtype"] in HALF_DTYPES)


def input_strided(graph: OpGraph, n: str) -> bool:
    """Whether node ``n``'s first input is strided on the GPU: capture's ``input_contiguous``
    on CUDA traces; on meta traces (no such flag: cuDNN's channels-last outputs are not
    known there) what :func:`gpusim.lower.layout.strided` reads off the graph."""
    a = graph.g.nodes[n]
    if a.get("input_contiguous") is not None:
        return a["input_contiguous"] is False
    ins = list(a.get("inputs") or a["reads"])
    return bool(ins) and ins[0] in graph.g and strided(graph, ins[0]) is True


def strided_linear(graph: OpGraph, n: str) -> bool:
    """A 16-bit ``linear`` with a bias over a strided input of 3 or more dims
    (:func:`input_strided`), which eager runs as GEMM and bias add, after a copy when its
    leading dims do not fold into the GEMM's rows (:func:`strided_linear_copies`)."""
    a = graph.g.nodes[n]
    return (packet_name(a["op"]) == "linear" and has_bias(graph, n)
            and len(main_shape(a.get("shape"))) >= 3 and a["dtype"] in HALF_DTYPES
            and input_strided(graph, n))


def strided_linear_copies(graph: OpGraph, n: str) -> bool:
    """Whether ATen's matmul copies a strided linear's input: it folds the input to 2 dims
    with ``reshape`` (LinearAlgebra.cpp, ``_matmul_impl``), a view when every leading dim
    but the rows is 1 (MLP-Mixer's token MLP at batch 1 runs a transposed-A nvjet ``TTT``
    GEMM and no copy; at batch 8 a direct_copy first), else a copy. CUDA traces, whose
    strides the graph does not keep, copy as before (CaiT's talking heads)."""
    a = graph.g.nodes[n]
    if a.get("input_contiguous") is not None:
        return True
    return numel(main_shape(a.get("shape"))[:-2]) > 1


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


#: cuBLAS's split-K for 16-bit products (:func:`cublas_split_k`): the least K it splits, and
#: the share of the SMs the output tiles must leave idle
SPLIT_K_MIN_K = 4096
SPLIT_K_MAX_TILE_SHARE = 0.5


def cublas_split_k(graph: OpGraph, n: str, spec) -> bool:
    """Whether cuBLAS runs a 16-bit product as split-K, with a ``splitKreduce_kernel`` after
    the GEMM that sums the K slices' fp32 partials into the output. The rule read off the
    H100 profiler kernel lists of the generate records (validation/results/generate/
    h100-2026-11-28c-host.jsonl: decode steps at 1 and 8 rows, prefills at 128-16384 rows of
    Llama-3.2-1B, Qwen2-0.5B and Mistral-7B; every product of theirs on the rule's side):
    a single product without a bias (no batch of matrices) whose output tiles (64 columns wide, rows in
    tiles of the row count rounded up to a power of two between 8 and 64) cover at most
    half the SMs, and whose K is at least 4096. So a decode step's down projection (K =
    intermediate size) splits, and Mistral's attention projections (K = 4096) too; its
    gate/up projections (224 tiles) do not, nor any prefill over 512 tokens. Checked on the
    zoo's H200 eager records at 128 tokens: Llama-3.2-1B 16 of 16 and Qwen2-0.5B 24 of 24
    reduces, Mistral-7B 8 of 12; products with a bias (OPT, Phi-1.5, Pythia: fc2 at K 4096-8192)
    run none, hence no bias. cuBLAS also splits some biased K = 3072 products at 128 rows
    (BERT, GPT-2: one reduce a layer) that this rule leaves out."""
    a = graph.g.nodes[n]
    g = a.get("gemm") or {}
    if spec is None or a["dtype"] not in HALF_DTYPES or not g or g.get("b", 1) != 1:
        return False
    if g["k"] < SPLIT_K_MIN_K or gemm_variant(graph, n) != "gemm" or has_bias(graph, n):
        return False
    tile_m = min(64, max(8, 1 << max(0, int(g["m"]) - 1).bit_length()))
    tiles = -(-int(g["m"]) // tile_m) * -(-int(g["n"]) // 64)
    return tiles <= SPLIT_K_MAX_TILE_SHARE * spec.sm_count


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
    if not (a.get("sdpa") or {}).get("mask"):
        return "attention"
    return MASK_CLASSES[mask_layout(graph, n)]


#: masked 16-bit fused attention's kernel class per mask layout (:func:`mask_layout`)
MASK_CLASSES = {"dense": "attention_mask", "bcast_q": "attention_mask_bcast", "heads": "attention_mask_heads"}
#: the 16-bit fused attention classes (cuDNN on Hopper, flash on sm80-sm89)
FUSED_ATTENTION = ("attention",) + tuple(MASK_CLASSES.values())


def mask_layout(graph: OpGraph, n: str) -> str:
    """How attention node ``n``'s kernel reads its mask (the classes of the H200
    ``sdpa_mask`` sweep, validation/results/h200/sdpa_mask.jsonl): ``"bcast_q"``, one row per
    batch expanded over the queries (stride 0, as eager Hugging Face passes a (B, 1, 1, S)
    padding mask); ``"heads"``, a mask of its own per head (BEiT's and T5's position biases);
    else ``"dense"``, one (B, 1, Sq, Skv) matrix shared by the heads (as Inductor realises a
    mask). Read off the graph: an ``expand`` view of a tensor with one query row is a
    broadcast; a graph input carries no strides, so a stride-0 input counts as dense. A
    backward call keeps ``"dense"`` (the sweep timed forwards only)."""
    a = graph.g.nodes[n]
    info = a.get("sdpa") or {}
    shape = tuple(info.get("mask_shape") or ())
    ins = a.get("inputs") or []
    if packet_name(a.get("op", "")).endswith("_backward") or len(shape) < 2 or len(ins) < 4:
        return "dense"
    q_rows, heads = shape[-2] > 1, len(shape) >= 3 and shape[-3] > 1
    m = ins[3]
    while m in graph.g and graph.g.nodes[m]["kind"] == "view" and (graph.g.nodes[m].get("inputs") or []):
        b = graph.g.nodes[m]
        src = tuple(graph.g.nodes[b["inputs"][0]].get("shape") or ()) if b["inputs"][0] in graph.g else ()
        if packet_name(b.get("op", "")) == "expand" and len(src) == len(shape):
            q_rows = q_rows and src[-2] > 1
            heads = heads and len(src) >= 3 and src[-3] > 1
        m = b["inputs"][0]
    return "bcast_q" if shape[-2] > 1 and not q_rows else "heads" if heads else "dense"


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
    return ks + [Kernel((n,), "library", variant=variant)] + library_epilogue(graph, n, spec, Kernel)


def decode_ctas(a: dict) -> int:
    """CTAs of cuDNN's one-query attention kernel: one per batch and key head (the K tensor's
    heads: a query head each where ``repeat_kv`` expanded or copied them; the query heads of a
    group share one where the call passes grouped K/V with ``enable_gqa``)."""
    s = a.get("sdpa") or {}
    shape = main_shape(a.get("shape")) or (1, 1, 1)
    return int(numel(shape[:-3]) or 1) * int(s.get("kv_heads") or s.get("heads") or 1)


def splits_keys(a: dict, spec) -> bool:
    """Whether cuDNN's attention at one query row splits the keys and adds its reduction kernel:
    at most ``attention_decode_split_ctas`` CTAs (:func:`decode_ctas`). H200 sdpa_decode sweep
    (2026-11-28): the kernel runs at every point with B x H <= 64 and at none with 256 or 1024;
    the H200 generate records (2026-11-28f) agree (Gemma-2B static at batch 8, 64 CTAs: split;
    Qwen2-0.5B static at batch 8, 112: none; eager grouped calls, 16-64: split). Without the
    figure, every such call splits (the H100 generate records, 2026-11-28c: one per layer in
    every step, but for Mistral-7B at batch 8, 256 CTAs)."""
    limit = getattr(spec, "attention_decode_split_ctas", None)
    return limit is None or decode_ctas(a) <= limit


def library_epilogue(graph: OpGraph, n: str, spec, Kernel) -> list:
    """The kernels a library runs after its main kernel for node ``n``, eager and compiled
    alike (Inductor calls the same cuBLAS and cuDNN entry points):
    - cuDNN's attention at one query row splits the keys over blocks and sums the partial
      rows in a second kernel (``cudnn::fusion::lean_reduction_kernel``, class
      ``lean_reduction``) when it has few CTAs (:func:`splits_keys`);
    - cuBLAS's split-K of a skinny product sums the K slices in ``splitKreduce_kernel``
      (:func:`cublas_split_k`), reading the slices' fp32 partials, writing the output."""
    a = graph.g.nodes[n]
    if a["kind"] == "attention" and spec is not None and (a.get("sdpa") or {}).get("q_len") == 1 \
            and attention_variant(graph, n, spec) in FUSED_ATTENTION and splits_keys(a, spec):
        return [Kernel((n,), "library", role="aux", bytes=2.0 * float(a.get("bytes_written", 0.0)),
                       variant="lean_reduction")]
    if a["kind"] == "matmul" and cublas_split_k(graph, n, spec):
        return [Kernel((n,), "library", role="aux", bytes=3.0 * float(a["bytes_written"]))]
    return []


def eager_kernels(graph: OpGraph, n: str, spec, Kernel) -> list:
    """The kernels eager PyTorch launches for compute node ``n`` on ``spec``'s GPU."""
    a = graph.g.nodes[n]
    kind = a["kind"]
    if launches_nothing(a):
        return []
    training = training_kernels(graph, n, spec, Kernel)
    if training is not None:
        return training
    if kind == "conv":
        return conv_kernels(graph, n, spec, Kernel) + conv_bias_kernels(graph, n, Kernel)
    if kind == "attention":
        return sdpa_kernels(graph, n, spec, Kernel)
    if kind == "matmul" and folded_linear(graph, n):
        # ``at::linear`` takes its fused addmm only for a contiguous input; a strided one
        # whose rows fold as a view goes through matmul (no copy: cuBLAS reads the rows at
        # their stride) and adds the bias after (H200 Phi-1.5 prefills at batch 8,
        # validation/results/generate/h200-2026-11-28k-prefill.jsonl: the LM head over the
        # last tokens runs a GEMM without the bias epilogue, then a broadcast add)
        return [Kernel((n,), "library", variant=gemm_variant(graph, n)),
                Kernel((n,), "aten", role="aux", bytes=2.0 * a["bytes_written"], variant="conv_bias")]
    if kind == "matmul" and strided_linear(graph, n):
        # ``at::linear`` folds a contiguous input into one addmm; a strided one (CaiT's
        # talking heads: a Linear over the heads dim of a permuted score tensor) goes
        # through matmul, which copies it contiguous, and adds the bias after in a kernel
        # of its own (broad H100 AMP records: direct_copy, the GEMM, a broadcast add)
        x = graph.g.nodes[list(a.get("inputs") or a["reads"])[0]]
        xb = float(numel(main_shape(x.get("shape")))) * DTYPE_BYTES.get(x.get("dtype"), 2)
        copy = [Kernel((n,), "aten", role="aux", bytes=2.0 * xb, variant="strided_copy")] \
            if strided_linear_copies(graph, n) else []
        return copy + [Kernel((n,), "library", variant=gemm_variant(graph, n)),
                Kernel((n,), "aten", role="aux", bytes=2.0 * a["bytes_written"], variant="conv_bias")]
    if kind == "matmul" and a.get("einsum_copies"):
        # (capture: gpusim.capture.fxnodes._einsum_copies) the operands ATen's einsum copies
        # to lay them out for its bmm, each a strided copy, then the GEMM
        return [Kernel((n,), "aten", role="aux", bytes=b, variant="strided_copy")
                for b in a["einsum_copies"]] + [Kernel((n,), "library", variant=gemm_variant(graph, n))]
    if kind == "matmul":
        variant = gemm_variant(graph, n)
        main = Kernel((n,), "library", variant=variant)
        if variant == "gemm_lt" and cublaslt_split_k(graph, n):
            out = a["bytes_written"]
            return [Kernel((n,), "library", role="aux", bytes=out), main,
                    Kernel((n,), "library", role="aux", bytes=2.0 * out)]
        return [main] + library_epilogue(graph, n, spec, Kernel)
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
    cast = reduction_cast_bytes(graph, n)
    reduce = "aten_reduce" if aten_reduce(graph, n) else ""
    if cast:
        return [Kernel((n,), "aten", role="aux", bytes=cast), Kernel((n,), "aten", variant=reduce)]
    impl = "library" if kind == "norm" else "aten"
    main = Kernel((n,), impl, variant="layer_norm" if name in LAYER_NORMS else
                  "pool" if name in WINDOW_POOLS else reduce or small_op_class(graph, n))
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
    if name in LAYER_NORMS and input_strided(graph, n):
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


def small_op_class(graph: OpGraph, n: str) -> str:
    """``"gather"``: ``table[index]``, one 1-D index tensor over a table's rows (BEiT's
    relative-position bias: ATen's vectorized_gather or index_elementwise kernel);
    ``"bcast_mul"``: a (C,) vector times a tensor whose last dim is C (ViT's layer scale: ATen's
    broadcasting ``elementwise_kernel``, not its vectorised one); else ``""`` (the vit_small_ops
    sweep's classes, priced by gpusim.cost.small_ops where the spec has their figures)."""
    a = graph.g.nodes[n]
    name, ins = packet_name(a["op"]), list(a.get("inputs") or ())
    shapes = [tuple(graph.g.nodes[i].get("shape") or ()) for i in ins if i in graph.g]
    out = tuple(a.get("shape") or ())
    if name == "index" and len(shapes) == 2 and len(shapes[1]) == 1 and len(out) >= 1 \
            and graph.g.nodes[ins[1]].get("dtype") in ("int64", "int32"):
        return "gather"
    if name == "mul" and len(shapes) == 2 and len(out) >= 2 and out[-1] > 1 and numel(out) > out[-1] \
            and sorted(len(s) for s in shapes)[0] == 1 and (out[-1],) in shapes:
        return "bcast_mul"
    return ""


def launches_nothing(a: dict) -> bool:
    """An op over no elements launches no kernel and copies nothing: TensorIterator's loops
    and ``copy_`` return when ``numel() == 0`` (Copy.cpp's ``copy_impl``). Hugging Face's
    DynamicCache starts each layer with ``torch.tensor([], device=...)`` (a host tensor copied
    over, then ``detach_``): the H200 prefill records of Llama-3.2-1B, Qwen2-0.5B, Phi-1.5 and
    Gemma-2B (validation/results/generate/h200-2026-11-28k-prefill.jsonl) list no kernel and
    no memcpy for them, 2 x layers fewer kernels than gpusim counted before. Capture gives the
    host copy of such a constant its true shape, ``(0,)``, so this one rule covers it."""
    shape = a.get("shape")
    return isinstance(shape, tuple) and len(shape) > 0 and all(isinstance(s, int) for s in shape) \
        and numel(shape) == 0


def reduction_cast_bytes(graph: OpGraph, n: str) -> float:
    """Bytes of the cast ATen runs before reduction ``n`` (0: none). ``sum``, ``nansum``,
    ``prod`` and ``mean`` build their iterator with ``make_reduction_from_out_ty``
    (aten/src/ATen/native/ReduceOpsUtils.h): an input of another dtype than the output is
    first copied to it (``self.to(in_dtype)``), except 16-bit into fp32 on CUDA, which the
    reduction reads as it is. So Hugging Face's ``attention_mask.sum()`` over a bool mask
    runs a direct_copy to int64 before the reduce (the H100 decode steps with generate's
    mask, validation/results/generate/h100-2026-11-28c-host.jsonl: 37 direct_copy kernels,
    one more than the graph's casts)."""
    a = graph.g.nodes[n]
    ins = a.get("inputs") or ()
    if packet_name(a["op"]) not in CASTING_REDUCTIONS or not ins or ins[0] not in graph.g:
        return 0.0
    x = graph.g.nodes[ins[0]]
    src, dst = x.get("dtype"), a.get("dtype")
    if not src or src == dst or (src in HALF_DTYPES and dst == "float32"):
        return 0.0
    return float(numel(main_shape(x.get("shape")))) * (DTYPE_BYTES.get(src, 4) + DTYPE_BYTES.get(dst, 4))


#: reductions whose input is cast to the output dtype first (:func:`reduction_cast_bytes`)
CASTING_REDUCTIONS = ("sum", "nansum", "prod", "mean")
#: ATen's group norm ops (moments, parameters, apply: :func:`eager_kernels`)
GROUP_NORMS = ("group_norm", "native_group_norm")
#: ATen's row-wise layer norm kernels (a block per row: :func:`_fit_layer_norm`)
LAYER_NORMS = ("layer_norm", "native_layer_norm")


#: 0-dim constants a traced ``t[idx] = value`` materialises (eager keeps them on the host)
SCALAR_CONSTANTS = ("scalar_tensor", "lift_fresh", "lift_fresh_copy")


__all__ = ["eager_kernels", "conv_info", "library_epilogue"]
