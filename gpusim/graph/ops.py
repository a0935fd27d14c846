"""The op registry: per aten op, its kind and its FLOP and byte formulas.

Adding an op is adding one small function (the style of ``torch.utils.flop_counter``).
A formula sees an :class:`OpCtx` (tensor metadata only, never data) and returns FLOPs;
bytes default to "read every tensor input once at its real size, write every output
once", which is what a standalone kernel does. Broadcast (expanded, stride-0) operands
count at their real size, not their broadcast size.

FLOP conventions: matmul, conv and attention count 2 FLOPs per multiply-accumulate and
agree with ``torch.utils.flop_counter.FlopCounterMode`` (bias adds are not counted).
Elementwise ops count a small fixed number of FLOPs per output element (table
``POINTWISE``); they are memory-bound on every GPU here, so the weight is a tie-breaker,
not a driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from gpusim.graph.einsum import einsum_gemm
from gpusim.graph.opgraph import numel

#: aten ops that copy a device value to the host and wait for it (``.item()``,
#: ``bool(tensor)``): a sync point of the host and the GPU stream.
SYNC_OPS = ("_local_scalar_dense", "item", "is_nonzero", "h2d_copy")
#: a tensor the forward builds from Python data on the device (``torch.tensor(x,
#: device=...)``, or a CPU constant moved there): eager copies it from pageable host
#: memory with ``memcpy_and_sync`` (``Copy.cu``), a cudaMemcpyAsync and a stream sync
H2D_COPY = "gpusim.h2d_copy"

#: pooling with a window (conv-like: a layout, and a pointwise kernel over the window that needs
#: a stored input under Inductor)
WINDOW_POOLS = frozenset({"max_pool2d", "max_pool2d_with_indices", "avg_pool2d",
                          "max_pool1d", "avg_pool1d", "max_pool3d", "avg_pool3d"})


@dataclass(frozen=True)
class TensorMeta:
    """Shape-level facts about one tensor (no data)."""

    shape: tuple
    dtype: str
    itemsize: int
    stride: tuple = ()

    @property
    def numel(self) -> int:
        return numel(self.shape)

    @property
    def unique_numel(self) -> int:
        """Elements actually stored: broadcast (stride-0) dimensions count once."""
        if not self.stride:
            return self.numel
        return numel(s for s, st in zip(self.shape, self.stride) if st != 0)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def ubytes(self) -> int:
        return self.unique_numel * self.itemsize


@dataclass
class OpCtx:
    """What a formula sees: tensor inputs, outputs and the raw (meta-substituted) args."""

    name: str
    ins: list[TensorMeta]
    outs: list[TensorMeta]
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    @property
    def out(self) -> TensorMeta:
        return self.outs[0]

    def arg(self, i: int, key: str, default=None):
        if i < len(self.args):
            return self.args[i]
        return self.kwargs.get(key, default)


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: str
    flops: Callable[[OpCtx], float]
    bytes: Callable[[OpCtx], tuple[float, float]] | None = None
    gemm: Callable[[OpCtx], dict] | None = None


REGISTRY: dict[str, OpDef] = {}


def register(*names: str, kind: str, bytes=None, gemm=None):
    """Register a FLOP formula for aten op packets ``names`` (``"mm"``, ``"add"``).

    In-place variants (``add_``) share the entry of their base name.
    """
    def deco(fn):
        for n in names:
            REGISTRY[n] = OpDef(n, kind, fn, bytes, gemm)
        return fn
    return deco


def packet_name(op: str) -> str:
    """``"aten.add_.Tensor"`` -> ``"add_"``; ``"aten.mm.default"`` -> ``"mm"``."""
    parts = op.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] in ("aten", "prims", "prim") else parts[-1]


def lookup(op: str) -> OpDef | None:
    name = packet_name(op)
    if name in REGISTRY:
        return REGISTRY[name]
    if name.endswith("_") and name[:-1] in REGISTRY:      # in-place variant
        return REGISTRY[name[:-1]]
    return None


def default_bytes(ctx: OpCtx) -> tuple[float, float]:
    """Read each tensor input once (real size), write each output once."""
    return float(sum(t.ubytes for t in ctx.ins)), float(sum(t.nbytes for t in ctx.outs))


def estimate(ctx: OpCtx) -> dict:
    """Kind, FLOPs, bytes and GEMM shape of one op. Unknown ops: memory-bound guess."""
    d = lookup(ctx.name)
    if d is None:
        rd, wr = default_bytes(ctx)
        return {"kind": "other", "flops": 0.0, "bytes_read": rd, "bytes_written": wr,
                "gemm": None, "unmodelled": True}
    rd, wr = (d.bytes or default_bytes)(ctx)
    return {"kind": d.kind, "flops": float(d.flops(ctx)), "bytes_read": rd,
            "bytes_written": wr, "gemm": d.gemm(ctx) if d.gemm else None,
            "unmodelled": False}


# ---------------------------------------------------------------------------
# Views and free ops: no kernel, no bytes. (Capture also detects aliasing
# generically; these names make the intent explicit and cover ops whose
# outputs happen not to alias, such as ``empty``.)
_VIEWS = ("view", "_unsafe_view", "reshape", "expand", "expand_as", "transpose", "t",
          "permute", "unsqueeze", "squeeze", "flatten", "unflatten", "as_strided", "alias",
          "detach", "slice", "select", "narrow", "chunk", "split", "split_with_sizes",
          "unbind", "diagonal", "view_as", "lift_fresh", "lift_fresh_copy", "empty",
          "empty_like", "empty_strided", "dropout", "feature_dropout", "alpha_dropout",
          "movedim", "swapaxes", "numpy_T", "mT", "getitem", "_to_copy_alias",
          "contiguous", "to", "type_as", "split_tensor", "new_empty", "new_empty_strided",
          "meshgrid")


def _free_bytes(ctx):
    return 0.0, 0.0


@register(*_VIEWS, kind="view", bytes=_free_bytes)
def view_flops(ctx: OpCtx) -> float:
    """Views re-interpret memory: 0 FLOPs, 0 bytes. (``contiguous``/``reshape``/``to``
    that really copy are re-labelled ``copy`` by capture, which sees they do not alias;
    dropout is registered here because in eval it returns its input.)"""
    return 0.0


# ---------------------------------------------------------------------------
# Pointwise: FLOPs = weight x output elements.
POINTWISE = {
    # simple arithmetic, comparisons, selects: 1 FLOP per element
    "add": 1, "sub": 1, "rsub": 1, "mul": 1, "div": 1, "neg": 1, "abs": 1, "relu": 1,
    "clamp": 1, "clamp_min": 1, "clamp_max": 1, "where": 1, "maximum": 1, "minimum": 1,
    "eq": 1, "ne": 1, "lt": 1, "le": 1, "gt": 1, "ge": 1, "logical_not": 1,
    "logical_and": 1, "logical_or": 1, "masked_fill": 1, "hardtanh": 1, "relu6": 1,
    "leaky_relu": 2, "square": 1, "reciprocal": 1, "sign": 1, "floor": 1, "ceil": 1,
    "round": 1, "fill": 1, "zeros_like": 1, "ones_like": 1, "full_like": 1, "zeros": 1,
    "ones": 1, "full": 1, "arange": 1, "linspace": 2, "logspace": 6, "scalar_tensor": 1, "tril": 1, "triu": 1,
    "bitwise_and": 1, "bitwise_or": 1, "bitwise_not": 1, "addcmul": 2, "addcdiv": 2,
    "lerp": 3, "hardsigmoid": 3, "hardswish": 4, "rand_like": 1, "randn_like": 1,
    # transcendental: a few FLOPs each (SFU op plus range reduction)
    "exp": 4, "exp2": 4, "expm1": 4, "log": 4, "log2": 4, "log1p": 4, "sqrt": 2, "rsqrt": 2,
    "sin": 4, "cos": 4, "tanh": 4, "sigmoid": 4, "erf": 4, "pow": 4, "softplus": 6,
    # composites: silu = x*sigmoid(x); gelu(erf) = x/2*(1+erf(x/sqrt2)); mish
    "silu": 5, "gelu": 8, "mish": 10, "elu": 5, "selu": 6, "logit": 5,
    "nan_to_num": 1, "isnan": 1, "isinf": 1, "isneginf": 1, "isposinf": 1, "clone_pw": 0,
}


def _pointwise(ctx: OpCtx) -> float:
    """FLOPs = POINTWISE[name] x output elements (gelu: 8, sigmoid: 4, add: 1, ...)."""
    name = packet_name(ctx.name)
    if name not in POINTWISE:
        name = name[:-1]        # in-place variant: add_ -> add
    return POINTWISE[name] * ctx.out.numel


register(*POINTWISE, kind="pointwise")(_pointwise)

# Python operator spellings pre-dispatch tracing keeps (``mask_a & mask_b``); each runs
# the same elementwise kernel as its named op (bitwise_and, ...): 1 FLOP per element.
DUNDER_POINTWISE = ("__and__", "__or__", "__xor__", "__lshift__", "__rshift__",
                    "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
                    "bitwise_xor", "logical_xor", "bitwise_left_shift", "bitwise_right_shift")


@register(*DUNDER_POINTWISE, kind="pointwise")
def dunder_pointwise_flops(ctx: OpCtx) -> float:
    """``a & b``, ``a | b``, ``a ^ b``, shifts: 1 FLOP per output element."""
    return float(ctx.out.numel)


def _write_only_bytes(ctx: OpCtx) -> tuple[float, float]:
    """A fill reads nothing (its tensor argument gives only dtype and device): 0 read,
    every output written once."""
    return 0.0, float(sum(t.nbytes for t in ctx.outs))


#: Factories that take dtype and device (not data) from a tensor argument: capture
#: counts no read of that tensor.
LIKE_FACTORIES = ("new_zeros", "new_ones", "new_full", "new_empty", "new_empty_strided",
                  "zeros_like", "ones_like", "full_like", "empty_like", "rand_like",
                  "randn_like", "randint_like", "zero", "zero_")


@register("new_zeros", "new_ones", "new_full", "zero", "zero_", kind="pointwise",
          bytes=_write_only_bytes)
def new_fill_flops(ctx: OpCtx) -> float:
    """``x.new_zeros(shape)`` and friends launch one fill kernel: 1 FLOP per output
    element, bytes written only (``new_empty`` allocates and is registered as free);
    ``x.zero_()`` is the same fill over ``x``'s own storage."""
    return float(ctx.out.numel)


@register("diff", kind="pointwise")
def diff_flops(ctx: OpCtx) -> float:
    """``torch.diff(x, n=1, prepend=p, append=a)``: out[i] = x[i+1] - x[i], 1 FLOP per
    output element; reads x (and prepend/append), writes the output. (Eager runs a
    ``cat`` first when prepend/append is given: a second, small kernel.)"""
    n = ctx.arg(1, "n", 1) or 1
    return float(n * ctx.out.numel)


def _sync_bytes(ctx: OpCtx) -> tuple[float, float]:
    """One element crosses to the host: itemsize read, itemsize written."""
    b = float(ctx.ins[0].itemsize) if ctx.ins else 0.0
    return b, b


@register("_local_scalar_dense", "item", "is_nonzero", "h2d_copy", kind="other", bytes=_sync_bytes)
def host_read_flops(ctx: OpCtx) -> float:
    """``t.item()`` / ``bool(t)``: a device-to-host copy of one element that the host
    waits for (a sync; capture marks the node ``sync``): 0 FLOPs, one element each way.
    Kind ``other``: it never fuses."""
    return 0.0


@register("_to_copy", "copy", "clone", "_copy", "contiguous_copy", "expand_copy",
          "repeat", "repeat_interleave", "constant_pad_nd", "pad", "flip", "roll",
          "im2col", "col2im", kind="copy")
def copy_flops(ctx: OpCtx) -> float:
    """Copies and casts move bytes, compute nothing: 0 FLOPs (``im2col``/``col2im``,
    ``nn.Unfold``/``nn.Fold``, rearrange windows; col2im's overlap adds are not counted)."""
    return 0.0


def _index_copy_bytes(ctx: OpCtx) -> tuple[float, float]:
    """In place (a StaticCache update) it reads source and index and writes the source's
    rows; out of place it also copies all of ``self``: every input read, the output written."""
    if not packet_name(ctx.name).endswith("_") or len(ctx.ins) < 3:
        return default_bytes(ctx)
    return float(ctx.ins[1].ubytes + ctx.ins[2].ubytes), float(ctx.ins[2].nbytes)
REGISTRY["index_copy"] = OpDef("index_copy", "copy", copy_flops, _index_copy_bytes)


def _gather_bytes(ctx: OpCtx) -> tuple[float, float]:
    """A gather reads the rows it fetches (output-sized) plus the indices."""
    idx = sum(t.ubytes for t in ctx.ins if t.dtype in ("int64", "int32"))
    return float(ctx.out.nbytes + idx), float(ctx.out.nbytes)


@register("grid_sampler", "grid_sampler_2d", "grid_sampler_3d", kind="copy")
def grid_sample_flops(ctx: OpCtx) -> float:
    """``F.grid_sample``: each output element interpolates 4 (2-D) or 8 (3-D) input
    values at a sampled point: ~2 FLOPs per tap (multiply-add). Bytes: the input, the
    grid and the output, once each (the taps' reuse is left to the caches)."""
    taps = 8 if len(ctx.ins[0].shape) == 5 else 4
    return 2.0 * taps * ctx.out.numel


@register("embedding", "index_select", "gather", "index", "take", kind="copy",
          bytes=_gather_bytes)
def gather_flops(ctx: OpCtx) -> float:
    """Gathers compute nothing; bytes are the rows fetched, not the whole table."""
    return 0.0


@register("cat", "stack", "upsample_nearest2d", "upsample_bilinear2d", "upsample_nearest1d",
          "upsample_nearest3d", "upsample_linear1d", "upsample_bicubic2d", "upsample_trilinear3d",
          "_upsample_nearest_exact2d", "_upsample_bilinear2d_aa", kind="copy")
def cat_flops(ctx: OpCtx) -> float:
    """Concatenation: 0 FLOPs; reads every input, writes the result."""
    return 0.0


# ---------------------------------------------------------------------------
# Reductions: FLOPs ~ input elements.
@register("sum", "mean", "amax", "amin", "max", "min", "prod", "argmax", "argmin",
          "any", "all", "cumsum", "logsumexp", "linalg_vector_norm", "norm", "nll_loss",
          "nll_loss_forward", kind="reduction")
def reduction_flops(ctx: OpCtx) -> float:
    """One FLOP per input element (one add/compare each)."""
    return float(ctx.ins[0].numel)


@register("var", "std", "var_mean", "std_mean", kind="reduction")
def var_flops(ctx: OpCtx) -> float:
    """Two-pass (Welford) variance: ~3 FLOPs per input element (sub, mul, add)."""
    return 3.0 * ctx.ins[0].numel


@register("softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax",
          kind="reduction")
def softmax_flops(ctx: OpCtx) -> float:
    """max, subtract, exp, sum, divide: 5 FLOPs per element."""
    return 5.0 * ctx.ins[0].numel


@register("max_pool2d", "max_pool2d_with_indices", "avg_pool2d", "adaptive_avg_pool2d",
          "max_pool1d", "avg_pool1d", "adaptive_max_pool2d", "_adaptive_avg_pool2d",
          "max_pool3d", "max_pool3d_with_indices", "avg_pool3d", "adaptive_avg_pool3d",
          "_adaptive_avg_pool3d", "adaptive_max_pool3d", "adaptive_avg_pool1d",
          "adaptive_max_pool1d", kind="reduction")
def pool_flops(ctx: OpCtx) -> float:
    """Each output element reduces its window: window x output elements, or input
    elements for adaptive (global) pooling."""
    k = ctx.arg(1, "kernel_size")
    if packet_name(ctx.name).startswith(("adaptive", "_adaptive")) or k is None:
        return float(ctx.ins[0].numel)
    k = [k] if isinstance(k, int) else list(k)
    return float(numel(k) * ctx.out.numel)


# ---------------------------------------------------------------------------
# Normalisations.
@register("layer_norm", "native_layer_norm", "group_norm", "native_group_norm",
          "rms_norm", "_fused_rms_norm", "instance_norm", kind="norm")
def norm_flops(ctx: OpCtx) -> float:
    """mean, variance, normalise, scale, shift: ~8 FLOPs per element (RMSNorm ~5, taken
    the same: memory-bound either way)."""
    return 8.0 * ctx.ins[0].numel


#: Batch-norm ops that normalise with running statistics (eval): a per-channel scale and
#: shift, so they fuse like pointwise ops and fold into a preceding conv.
EVAL_BATCH_NORM = ("batch_norm", "native_batch_norm", "_native_batch_norm_legit_no_training")


def is_eval_batch_norm(op: str) -> bool:
    """Whether aten op ``op`` (``"aten.batch_norm.default"``) is an eval-mode batch norm."""
    return packet_name(op) in EVAL_BATCH_NORM


@register(*EVAL_BATCH_NORM, "_native_batch_norm_legit", "cudnn_batch_norm", kind="norm")
def batchnorm_flops(ctx: OpCtx) -> float:
    """Inference batch norm is a per-channel scale and shift: 2 FLOPs per element."""
    return 2.0 * ctx.ins[0].numel


# ---------------------------------------------------------------------------
# Matrix products. gemm(): batch b, output m x n, reduction k (for tile quantisation).
def _mm_gemm(ctx):
    a, b = _mm_operands(ctx)
    return _gemm_of(a.shape, b.shape, a.dtype)


def _mm_operands(ctx):
    name = packet_name(ctx.name)
    if name in ("addmm", "baddbmm", "addbmm", "addmv"):
        return ctx.ins[1], ctx.ins[2]
    return ctx.ins[0], ctx.ins[1]


def _gemm_of(sa, sb, dtype):
    sa, sb = list(sa), list(sb)
    if len(sa) == 1:
        sa = [1] + sa
    if len(sb) == 1:
        sb = sb + [1]
    m, k = sa[-2], sa[-1]
    n = sb[-1]
    batch = max(numel(sa[:-2]), numel(sb[:-2]))
    return {"b": batch, "m": m, "n": n, "k": k, "unit_dtype": dtype}


@register("mm", "addmm", "bmm", "baddbmm", "matmul", "mv", "dot", "addmv", "vdot",
          kind="matmul", gemm=_mm_gemm)
def mm_flops(ctx: OpCtx) -> float:
    """2 * batch * m * n * k (one multiply and one add per MAC)."""
    g = _mm_gemm(ctx)
    return 2.0 * g["b"] * g["m"] * g["n"] * g["k"]


def _linear_gemm(ctx):
    x, w = ctx.ins[0], ctx.ins[1]
    return {"b": 1, "m": numel(x.shape[:-1]), "n": w.shape[0], "k": w.shape[-1],
            "unit_dtype": x.dtype}


@register("linear", kind="matmul", gemm=_linear_gemm)
def linear_flops(ctx: OpCtx) -> float:
    """x[..., k] @ W[n, k].T: 2 * rows * n * k (bias not counted, as FlopCounterMode)."""
    g = _linear_gemm(ctx)
    return 2.0 * g["m"] * g["n"] * g["k"]


@register("einsum", kind="matmul", gemm=einsum_gemm)
def einsum_flops(ctx: OpCtx) -> float:
    """2 * product of every index size (output indices times contracted ones)."""
    g = einsum_gemm(ctx)
    return 2.0 * g["b"] * g["m"] * g["n"] * g["k"]


def _conv_gemm(ctx):
    x, w = ctx.ins[0], ctx.ins[1]
    out = ctx.out
    transposed = bool(ctx.arg(6, "transposed", False)) if packet_name(ctx.name) in (
        "convolution", "_convolution") else packet_name(ctx.name).startswith("conv_transpose")
    groups = int(ctx.arg(8, "groups", 1) if packet_name(ctx.name) in ("convolution", "_convolution")
                 else ctx.arg(6, "groups", 1) or 1)
    if transposed:
        # implicit GEMM over the input: every input pixel scatters a kernel window
        m = x.shape[0] * numel(x.shape[2:])
        n = w.shape[1] * groups // groups
        k = (w.shape[0] // groups) * numel(w.shape[2:])
    else:
        m = out.shape[0] * numel(out.shape[2:])
        n = w.shape[0] // groups
        k = w.shape[1] * numel(w.shape[2:])
    return {"b": groups, "m": m, "n": n, "k": k, "unit_dtype": x.dtype}


@register("convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
          "conv_transpose2d", "conv_transpose3d", "cudnn_convolution", kind="conv",
          gemm=_conv_gemm)
def conv_flops(ctx: OpCtx) -> float:
    """2 * batch * C_out * prod(out spatial) * C_in/groups * prod(kernel) (implicit GEMM;
    transposed convs count over the input's spatial size, as FlopCounterMode)."""
    g = _conv_gemm(ctx)
    return 2.0 * g["b"] * g["m"] * g["n"] * g["k"]


def _sdpa_gemm(ctx):
    q, k = ctx.ins[0], ctx.ins[1]
    v = ctx.ins[2]
    b = numel(q.shape[:-2])
    causal = bool(ctx.arg(5, "is_causal", False)) if packet_name(ctx.name) == \
        "scaled_dot_product_attention" else bool(ctx.kwargs.get("is_causal", False))
    return {"b": b, "m": q.shape[-2], "n": k.shape[-2], "k": q.shape[-1],
            "dv": v.shape[-1], "causal": causal, "unit_dtype": q.dtype}


def _sdpa_bytes(ctx):
    """Flash-style attention reads q, k, v (and a mask if given) once and writes the
    output (plus a small log-sum-exp); the s x s score matrix never reaches memory."""
    return float(sum(t.ubytes for t in ctx.ins)), float(ctx.out.nbytes)


@register("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
          "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
          "_flash_attention_forward", "_efficient_attention_forward",
          "_scaled_dot_product_flash_attention_for_cpu", kind="attention",
          bytes=_sdpa_bytes, gemm=_sdpa_gemm)
def sdpa_flops(ctx: OpCtx) -> float:
    """Two batched products, Q K^T and P V: 2*b*s_q*s_k*d + 2*b*s_q*s_k*d_v
    (FlopCounterMode's convention: causal masking is not subtracted here; the cost
    model halves the work it times for causal attention)."""
    g = _sdpa_gemm(ctx)
    return 2.0 * g["b"] * g["m"] * g["n"] * (g["k"] + g["dv"])





# the training half of the registry (backward, foreach and fused optimizer ops)

