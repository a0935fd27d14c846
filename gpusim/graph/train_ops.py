"""The op registry's training half: autograd's backward ops and the optimizers' foreach and
fused ops, each a small formula as in :mod:`gpusim.graph.ops` (imported there, so one registry).

FLOP conventions follow ``torch.utils.flop_counter``: a convolution's backward-data and
backward-filter products each cost what the forward does (2 x MACs), so a full
``convolution_backward`` is twice the forward; attention's backward is 2.5x its forward
(five batched products against two: FlopCounterMode's ``sdpa_backward_flop_count``).
Capture splits a ``convolution_backward`` that computes several gradients into one node per
gradient (:func:`gpusim.capture.train.split_conv_backward`), so each node here is one cuDNN kernel.

Multi-tensor-apply: a ``_foreach_*`` or ``_fused_*`` op is one node over its lists; the
launches it takes are :func:`mta_launches` (``aten/src/ATen/native/cuda/MultiTensorApply.cuh``).
"""

from __future__ import annotations

from gpusim.graph.opgraph import numel
from gpusim.graph.ops import OpCtx, packet_name, register

# ------------------------------------------------------------------ convolution backward


def _conv_bwd_parts(ctx: OpCtx):
    """(N, Cout, Ho*Wo, Cin, kernel taps, groups, mask) of ``convolution_backward(grad_out,
    input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
    groups, output_mask)``."""
    go, x, w = ctx.ins[0], ctx.ins[1], ctx.ins[2]
    groups = int(ctx.arg(9, "groups", 1) or 1)
    mask = list(ctx.arg(10, "output_mask", [True, True, True]) or [True, True, True])
    return (go.shape[0], w.shape[0], numel(go.shape[2:]), x.shape[1], numel(w.shape[2:]),
            groups, mask, x.dtype)


def _conv_bwd_gemm(ctx: OpCtx):
    """The implicit GEMM of the gradient this node computes: backward-data is
    [N*H*W, Cin/g] = [N*H*W, Cout/g*taps] x [.., Cin/g] (m over the input's pixels);
    backward-filter is [Cout/g, Cin/g*taps] with K = N*Ho*Wo (a long reduction)."""
    n, cout, hw_out, cin, taps, g, mask, dt = _conv_bwd_parts(ctx)
    if mask[0]:
        hw_in = numel(ctx.ins[1].shape[2:])
        return {"b": g, "m": n * hw_in, "n": cin // g, "k": cout // g * taps, "unit_dtype": dt}
    return {"b": g, "m": cout // g, "n": cin // g * taps, "k": n * hw_out, "unit_dtype": dt}


def _conv_bwd_bytes(ctx: OpCtx):
    """Backward-data reads grad_out and the weight, writes grad_input; backward-filter
    reads grad_out and the input, writes grad_weight."""
    go, x, w = ctx.ins[0], ctx.ins[1], ctx.ins[2]
    mask = list(ctx.arg(10, "output_mask", [True, True, True]) or [True, True, True])
    rd = go.ubytes + (w.ubytes if mask[0] else 0) + (x.ubytes if mask[1] else 0)
    return float(rd), float(sum(t.nbytes for t in ctx.outs))


@register("convolution_backward", kind="conv", bytes=_conv_bwd_bytes, gemm=_conv_bwd_gemm)
def conv_backward_flops(ctx: OpCtx) -> float:
    """The forward's 2*N*Cout*Ho*Wo*Cin/g*taps for each of grad_input and grad_weight
    requested (FlopCounterMode's ``conv_backward_flop``)."""
    n, cout, hw_out, cin, taps, g, mask, _ = _conv_bwd_parts(ctx)
    fwd = 2.0 * n * cout * hw_out * (cin // g) * taps
    if ctx.arg(7, "transposed", False):
        # a transposed conv's weight is [Cin, Cout/g, k...]: its MACs run over the input's
        # pixels, N*H_in*W_in*Cin*Cout/g*taps (as its forward's FLOPs)
        w = ctx.ins[2]
        fwd = 2.0 * n * numel(ctx.ins[1].shape[2:]) * w.shape[0] * w.shape[1] * taps
    return fwd * (int(bool(mask[0])) + int(bool(mask[1])))


# ------------------------------------------------------------------ attention backward


def _sdpa_bwd_gemm(ctx: OpCtx):
    q, k, v = ctx.ins[1], ctx.ins[2], ctx.ins[3]      # (grad_out, query, key, value, ...)
    return {"b": numel(q.shape[:-2]), "m": q.shape[-2], "n": k.shape[-2], "k": q.shape[-1],
            "dv": v.shape[-1], "causal": bool(ctx.arg(11, "is_causal", False)),
            "unit_dtype": q.dtype}


@register("_scaled_dot_product_efficient_attention_backward",
          "_scaled_dot_product_flash_attention_backward",
          "_scaled_dot_product_cudnn_attention_backward", "_efficient_attention_backward",
          "_flash_attention_backward", kind="attention", gemm=_sdpa_bwd_gemm)
def sdpa_backward_flops(ctx: OpCtx) -> float:
    """Five batched products (recomputed scores, dV, dP, dQ, dK): 2.5x the forward's
    2*b*s_q*s_k*(d + d_v)."""
    g = _sdpa_bwd_gemm(ctx)
    return 2.5 * 2.0 * g["b"] * g["m"] * g["n"] * (g["k"] + g["dv"])


# ------------------------------------------------------------------ other backward ops

#: FLOPs per output element of elementwise backward formulas
POINTWISE_BACKWARD = {
    "threshold_backward": 1, "hardtanh_backward": 2, "leaky_relu_backward": 2,
    "sigmoid_backward": 3, "tanh_backward": 3, "silu_backward": 8, "gelu_backward": 12,
    "elu_backward": 4, "hardswish_backward": 4, "hardsigmoid_backward": 2,
    "softplus_backward": 6, "mish_backward": 14, "nll_loss_backward": 1,
    "max_pool2d_with_indices_backward": 1, "avg_pool2d_backward": 1,
    "adaptive_avg_pool2d_backward": 1, "_adaptive_avg_pool2d_backward": 1,
    "native_dropout_backward": 1, "masked_fill": 1, "binary_cross_entropy_backward": 4,
    "binary_cross_entropy_with_logits_backward": 6, "mse_loss_backward": 2,
    "smooth_l1_loss_backward": 3, "huber_loss_backward": 3, "select_backward": 1,
    "slice_backward": 1, "_unsafe_index_put": 1, "new_zeros": 1,
    # training-mode dropout: a random draw, the mask and the scaled output in one kernel
    "native_dropout": 4, "bernoulli": 3,
}


@register(*POINTWISE_BACKWARD, kind="pointwise")
def pointwise_backward_flops(ctx: OpCtx) -> float:
    """POINTWISE_BACKWARD[name] x output elements."""
    return float(POINTWISE_BACKWARD[packet_name(ctx.name).rstrip("_")] * ctx.out.numel)


@register("_softmax_backward_data", "_log_softmax_backward_data", "nll_loss_forward",
          "nll_loss2d_forward", "mse_loss", "binary_cross_entropy",
          "binary_cross_entropy_with_logits", kind="reduction")
def row_backward_flops(ctx: OpCtx) -> float:
    """Row-wise reductions of the loss and softmax gradients: ~3 FLOPs per input element."""
    return 3.0 * max(t.numel for t in ctx.ins)


@register("native_layer_norm_backward", "native_batch_norm_backward",
          "native_group_norm_backward", "cudnn_batch_norm_backward",
          "_fused_rms_norm_backward", kind="norm")
def norm_backward_flops(ctx: OpCtx) -> float:
    """~10 FLOPs per element: the input gradient's two row reductions and the affine
    parameters' column sums."""
    return 10.0 * ctx.ins[0].numel


def _embedding_bwd_bytes(ctx: OpCtx):
    """Reads grad_out and the indices (sorted, then scanned), writes the whole
    gradient table (zeroed first)."""
    return float(sum(t.ubytes for t in ctx.ins)), 2.0 * ctx.out.nbytes


@register("embedding_dense_backward", "embedding_backward", kind="gather",
          bytes=_embedding_bwd_bytes)
def embedding_backward_flops(ctx: OpCtx) -> float:
    """One add per gathered element (the scatter-add of grad_out rows)."""
    return float(ctx.ins[0].numel)


# ------------------------------------------------------------------ multi-tensor apply

#: ``DepthToMaxConfig`` of MultiTensorApply.cuh: tensors and blocks one launch takes, by
#: depth (the number of tensor lists), for the 4 KB kernel-argument limit and for the
#: 32 KB one CUDA >= 12.1 with a driver >= 530 may allow on sm70+
#: (``supports_large_kernel_arg``). The H100 training records (torch 2.11, 2026-11-25)
#: launch by the 4 KB tables: ResNet-50's AdamW step 26 kernels, SGD 9 (the 32 KB
#: tables would give 8 and 3), so they are the default.
MTA_SMALL = {"tensors": (110, 64, 48, 36, 30), "scalarlist": (96, 64, 48, 36, 30),
             "blocks": (320, 320, 320, 320, 320)}
MTA_LARGE = {"tensors": (770, 448, 336, 252, 210), "scalarlist": (672, 448, 336, 252, 210),
             "blocks": (2240, 2240, 2240, 2240, 2240)}
#: elements one block of a multi-tensor-apply kernel handles (``kChunkSize``)
MTA_CHUNK = 65536


def mta_launches(numels, depth: int, scalarlist: bool = False, large: bool = False) -> int:
    """Kernel launches of ``multi_tensor_apply`` over tensors of ``numels`` (the loop of
    MultiTensorApply.cuh): a launch when the tensor slots fill up (after a tensor's last
    chunk) or the blocks do (one block per 65,536-element chunk); a tensor split across
    launches carries over. Empty tensors are skipped.

    >>> mta_launches([1000] * 111, depth=1), mta_launches([1000] * 111, depth=1, large=True)
    (2, 1)
    >>> mta_launches([65536 * 321], depth=1)
    2
    """
    conf = MTA_LARGE if large else MTA_SMALL
    d = max(1, min(depth, 5)) - 1
    max_t = conf["scalarlist" if scalarlist else "tensors"][d]
    max_b = conf["blocks"][d]
    launches = blocks = tensors = 0
    for n in numels:
        if n == 0:
            continue
        tensors += 1
        chunks = -(-int(n) // MTA_CHUNK)
        for c in range(chunks):
            blocks += 1
            if (tensors == max_t and c == chunks - 1) or blocks == max_b:
                launches += 1
                blocks = 0
                tensors = 0 if c == chunks - 1 else 1
    return launches + (1 if blocks else 0)


#: FLOPs per element of the optimizers' fused kernels
FUSED_OPTIMIZER_FLOPS = {"_fused_adam_": 14, "_fused_adamw_": 16, "_fused_sgd_": 3,
                         "_fused_adagrad_": 8}


def foreach_flops(name: str, elements: int) -> float:
    """A fused optimizer's FLOPs per element (``FUSED_OPTIMIZER_FLOPS``), or the foreach
    op's base pointwise formula (``_foreach_addcmul_`` -> ``addcmul``: 2) per element."""
    from gpusim.graph.ops import POINTWISE
    if name in FUSED_OPTIMIZER_FLOPS:
        return float(FUSED_OPTIMIZER_FLOPS[name] * elements)
    base = name.removeprefix("_foreach_").rstrip("_")
    return float(POINTWISE.get(base, 1) * elements)
