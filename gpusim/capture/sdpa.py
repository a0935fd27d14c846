"""Attention: which backend ``scaled_dot_product_attention`` takes, and its math fallback.

On a CUDA device PyTorch picks a fused kernel (cuDNN, flash or memory-efficient attention)
when the inputs allow it, else its *math* fallback: an ordinary sequence of ATen ops.
The rules are PyTorch's own (``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`` and
``sdp_utils_cpp.h``, ``can_use_{cudnn,flash,mem_efficient}_attention``; torch 2.5-2.11):

* every fused backend requires 4-D query/key/value (``check_tensor_shapes``);
* every fused backend requires the last dimension of query, key, value *and the mask* to
  have stride 1 on the GPU (``check_last_dim_stride_equals_1_dense``: "GPU backends require
  attn_mask's last dimension to have stride 1 while the CPU does not"); a relative
  position bias gathered as ``[q, k, heads]`` and permuted to ``[1, heads, q, k]`` (T5)
  breaks it;
* the memory-efficient kernel, the one fused backend that takes fp32, needs equal query
  and key head dims, multiples of 4 elements in fp32 on sm80+
  (``check_head_dim_size_mem_efficient``, ``minimum_gemm_alignment``), and as many key
  and value heads as query heads: grouped-query heads (``enable_gqa``) reach it only
  with pytorch/pytorch#191085, after 2.11 (before it, "dense fused-backend validation
  rejected differing Q/K/V head counts" for it); fp32 GQA runs the math fallback.

The math fallback (``_scaled_dot_product_attention_math``, attention.cpp) upcasts 16-bit
query/key/value to fp32, scales query and the transposed key by sqrt(scale) each, runs
``matmul`` (a batched GEMM after a reshape that copies a transposed operand), adds the
mask in place, takes ``_safe_softmax`` (softmax, then rows that are all ``-inf`` set to
zero: ``isneginf``, ``all``, a zero scalar, ``where``), multiplies by the value and casts
both the output and the (unused) weights back to the input dtype. The H100 T5 record
(``hf_t5-small`` eager, bf16) shows exactly these kernels, fp32 SIMT GEMMs included, for
its self-attention, and one cuDNN kernel for its cross-attention (contiguous bias).

:class:`MathAttention` makes tracing record those ops instead of one attention node, so
eager dispatch and Inductor's rules price what really runs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from gpusim.capture.amp import autocast_dtype, autocast_off, lower_precision
from gpusim.hw.arch import attention_backend

_SDPA = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)


def _arg(args, kwargs, i, name, default=None):
    return args[i] if len(args) > i else kwargs.get(name, default)


def fused_backend_possible(q, k, v, mask=None, spec=None, dtype=None) -> bool:
    """Whether some fused SDPA kernel can run these inputs (else math): on ``spec``'s GPU
    when given (its architecture row may have no fused backend for the dtype: bf16 before
    sm80, :func:`gpusim.hw.arch.attention_backend`), else on an sm80+ GPU (capture traces
    once for every GPU; dispatch then prices the row's backend). ``dtype``: the dtype the
    kernel sees, when not the query's (autocast casts before it, :mod:`gpusim.capture.amp`)."""
    dtype = dtype or q.dtype
    if spec is not None and attention_backend(spec, str(dtype).removeprefix("torch.")) == "math":
        return False
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return False
    if not all(t.stride(-1) == 1 or t.size(-1) == 1 for t in (q, k, v)):
        return False
    if mask is not None and mask.stride(-1) != 1:
        return False
    if dtype == torch.float32 and (q.size(-1) % 4 or v.size(-1) % 4 or q.size(-1) != k.size(-1)
                                     or k.size(-3) != q.size(-3) or v.size(-3) != q.size(-3)):
        return False          # fp32 runs only memory-efficient attention (see the docstring)
    return True


def _matmul(a, b):
    """``at::matmul`` (LinearAlgebra.cpp ``_matmul_impl``) where it reshapes: a >=3-D
    operand times a matrix is folded into one ``mm``; two >=3-D operands are broadcast,
    their batch dims folded and run as one ``bmm``. A reshape copies an operand whose dims
    cannot be folded as a view (a permuted or transposed tensor): the copy kernels eager
    PyTorch launches and Inductor's decomposition of matmul keeps (torchvision Swin's
    window attention: q, k and v are strided views of the qkv projection)."""
    if b.dim() == 2:
        return torch.mm(a.reshape(-1, a.shape[-1]), b).view(*a.shape[:-1], b.shape[-1])
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a3 = a.expand(*batch, *a.shape[-2:]).reshape(-1, *a.shape[-2:])
    b3 = b.expand(*batch, *b.shape[-2:]).reshape(-1, *b.shape[-2:])
    return torch.bmm(a3, b3).view(*batch, a.shape[-2], b.shape[-1])


_MATMUL = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__)


def _reshaping_matmul(a, b) -> bool:
    """Operands for which ``at::matmul`` takes a reshaping path (see :func:`_matmul`)."""
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
            and a.dim() >= 3 and b.dim() >= 2)


def _additive(mask, dtype):
    """convert_boolean_attn_mask: ``where(mask, 0, -inf)`` over two scalar tensors (the
    sweeps' bool-mask points: three elementwise kernels before the attention kernel)."""
    zero = torch.scalar_tensor(0.0, dtype=dtype, device=mask.device)
    ninf = torch.scalar_tensor(-math.inf, dtype=dtype, device=mask.device)
    return torch.where(mask, zero, ninf)


def math_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                   enable_gqa=False):
    """``_scaled_dot_product_attention_math`` in ATen ops, in its order (the module
    docstring; the H100 Llama fp32 record for the causal, grouped-query case)."""
    dtype = q.dtype
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = _additive(attn_mask, dtype)
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.to(torch.float32), k.to(torch.float32), v.to(torch.float32)
    sf = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(q.size(-1)))
    q = q * sf
    if is_causal:
        L, S = q.size(-2), k.size(-2)
        attn_mask = _additive(torch.ones(L, S, dtype=torch.bool, device=q.device).tril(), q.dtype)
    if enable_gqa and k.dim() >= 3 and k.size(-3) != q.size(-3):
        rep = q.size(-3) // k.size(-3)
        k, v = k.repeat_interleave(rep, dim=-3), v.repeat_interleave(rep, dim=-3)
    attn = _matmul(q, k.transpose(-2, -1) * sf)
    if attn_mask is not None:
        attn.add_(attn_mask)
    out = torch.softmax(attn, -1)
    masked_rows = attn.isneginf().all(-1, keepdim=True)
    attn = torch.where(masked_rows, torch.scalar_tensor(0.0, dtype=out.dtype, device=out.device), out)
    if dropout_p > 0.0:
        # at::dropout on CUDA is the fused kernel (is_fused_kernel_acceptable, Dropout.cpp):
        # one kernel and a bool mask, not the bernoulli_/div_/mul decomposition with a
        # mask of the input's dtype that a meta trace would take
        attn = torch.native_dropout(attn, dropout_p, True)[0]
    weights = attn.to(dtype)          # eager computes the unused weights too  # noqa: F841
    return _matmul(attn, v).to(dtype)


class MathAttention(TorchFunctionMode):
    """Context for tracing: ``scaled_dot_product_attention`` calls that no fused CUDA
    kernel accepts (:func:`fused_backend_possible`) are traced as the math fallback's ops
    (:func:`math_attention`); the others stay one attention op. ``matmul`` of a >=3-D
    operand is traced as ATen runs it (:func:`_matmul`: reshapes, then ``mm``/``bmm``),
    so its operand copies are kernels (pre-dispatch tracing keeps ``matmul`` whole).
    ``spec``: trace for that GPU's architecture row (None: sm80+)."""

    def __init__(self, spec=None):
        super().__init__()
        self.spec = spec

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _MATMUL and not kwargs and len(args) == 2 and _reshaping_matmul(*args):
            # under CUDA autocast, matmul casts its operands before it reshapes them
            return _matmul(*lower_precision(*args))
        if func in _SDPA:
            q, k, v = args[0], args[1], args[2]
            mask = _arg(args, kwargs, 3, "attn_mask")
            if not fused_backend_possible(q, k, v, mask, self.spec, autocast_dtype(q)):
                # autocast casts query, key, value and a float mask, then the math
                # fallback runs below the autocast key: in the cast dtype, autocast off
                q, k, v = lower_precision(q, k, v)
                mask = lower_precision(mask)[0] if mask is not None and \
                    mask.is_floating_point() else mask
                with autocast_off():
                    return math_attention(q, k, v, mask, _arg(args, kwargs, 4, "dropout_p", 0.0),
                                          _arg(args, kwargs, 5, "is_causal", False),
                                          _arg(args, kwargs, 6, "scale"),
                                          _arg(args, kwargs, 7, "enable_gqa", False))
            if (isinstance(mask, torch.Tensor) and mask.dtype == torch.bool
                    and torch.compiler.is_compiling()):
                # torch.compile traces SDPA's composite body: the boolean mask becomes an
                # additive one in the query's dtype (convert_boolean_attn_mask), a pointwise
                # node Inductor stores (an extern kernel reads it) and fuses horizontally
                # with the other layers' conversions of the same mask (the H100 BERT
                # allocator trace: five and four (8, 1, 512, 512) bf16 masks at a time)
                args = (q, k, v, _additive(mask, q.dtype)) + tuple(args[4:])
                kwargs = {k_: v_ for k_, v_ in kwargs.items() if k_ != "attn_mask"}
        return func(*args, **kwargs)


__all__ = ["MathAttention", "fused_backend_possible", "math_attention"]
