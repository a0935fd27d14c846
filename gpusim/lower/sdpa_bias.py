"""Inductor's attention-bias kernels: what a compiled cuDNN attention call does to its mask.

A boolean mask reaches ``aten._scaled_dot_product_cudnn_attention`` as an additive bias
(``where(mask, 0, -inf)``: the ``scalar_tensor`` in the kernel names), and Inductor's
``sdpa_constraint`` (``torch/_inductor/lowering.py``, the layout constraint of the cuDNN and
flash fallbacks) requires every tensor argument to be realised with a dense last dimension
aligned to 8 elements (``ALIGNMENT``, from ATen's ``preprocess_mask``): a bias whose last
dimension is not a multiple of 8 (a static cache's 639 positions) or that is computed in the
graph (the bool mask's conversion) is written by a generated kernel, one per call before
fusion. The calls of one graph read the same mask, so the scheduler fuses those kernels
horizontally, as long as the fused span stays within ``are_long_distant_nodes``'s 64
scheduler nodes (:data:`gpusim.lower.inductor.MAX_DISTANCE`).

Measured: H100 generate records (2026-11-28c), static cache, compiled decode step: Llama-3.2-1B
(16 layers) runs 52 ``triton_poi_fused__scaled_dot_product_cudnn_attention_..`` kernels a
step, three copies per layer (q after its rotary embedding, repeat_kv's key and value
copies) and 4 bias kernels; Qwen2-0.5B (24 layers) 78 = 3 x 24 + 6: four layers' biases per
kernel. Inductor on these graphs (torch 2.14, fake CUDA tensors, scheduler nodes read off
``Scheduler.nodes``) fuses the bias nodes of layers 0-3, 4-7, ... into one kernel each.
"""

from __future__ import annotations

from gpusim.graph.opgraph import OpGraph, numel
from gpusim.lower.dispatch import FUSED_ATTENTION, attention_variant
from gpusim.lower.inductor import ATTENTION_OUTPUTS, MAX_DISTANCE

ALIGNMENT = 8                 # sdpa_constraint: an attention bias's last dimension, in elements
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def needs_bias_copy(graph: OpGraph, n: str, spec) -> bool:
    """Whether compiled attention node ``n`` has a mask that Inductor writes as a bias in a
    kernel of its own: a cuDNN/flash call (:func:`gpusim.lower.dispatch.attention_variant`)
    with a bool mask (its conversion is computed inside the call's decomposition), or with a
    graph input as mask whose last dimension breaks the 8-element alignment (copied). A float
    mask the graph computes (BEiT's relative position bias) is written aligned by the kernel
    that computes it: no extra kernel (H100 BEiT records)."""
    a = graph.g.nodes[n]
    info = a.get("sdpa") or {}
    if a["kind"] != "attention" or not info.get("mask") or spec is None:
        return False
    if attention_variant(graph, n, spec) not in FUSED_ATTENTION:
        return False
    if str(info.get("mask_dtype")).endswith("bool"):
        return True
    shape = tuple(info.get("mask_shape") or ())
    mask = _mask_of(graph, n)[0]
    base = graph.g.nodes[mask]["base"] if mask in graph.g else None
    return bool(shape and shape[-1] % ALIGNMENT) and base in graph.g \
        and graph.g.nodes[base]["kind"] == "input"


def _mask_of(graph: OpGraph, n: str) -> tuple:
    a = graph.g.nodes[n]
    ins = a.get("inputs") or []
    return (ins[3] if len(ins) > 3 else None, tuple((a.get("sdpa") or {}).get("mask_shape") or ()))


def bias_kernels(graph: OpGraph, groups: list, spec, Kernel) -> dict:
    """``{attention node: [bias kernel]}`` for the first call of each fused run, given the
    kernel groups of one compiled graph in order (:func:`gpusim.lower.inductor.inductor_groups`).

    Scheduler order counts one node per group and :data:`ATTENTION_OUTPUTS` more per attention
    call, as :func:`gpusim.lower.inductor._fuse` does; calls that read one mask join a run while
    the run spans at most :data:`MAX_DISTANCE` nodes. A run's kernel reads the mask once and
    writes one bias per call."""
    at, runs = 0, {}                      # mask -> list of runs [(order, node), ...]
    for g in groups:
        n = g[0]
        if len(g) == 1 and needs_bias_copy(graph, n, spec):
            mine = runs.setdefault(_mask_of(graph, n), [])
            if mine and at - mine[-1][0][0] <= MAX_DISTANCE:
                mine[-1].append((at, n))
            else:
                mine.append([(at, n)])
        at += 1 + (ATTENTION_OUTPUTS if graph.g.nodes[n]["kind"] == "attention" and len(g) == 1 else 0)
    out = {}
    for (_, shape), rs in runs.items():
        for run in rs:
            head = run[0][1]
            elems = float(numel(shape)) if shape else 0.0
            dt = DTYPE_BYTES.get(graph.g.nodes[head]["dtype"], 2)
            out[head] = [Kernel((head,), "generated", role="aux",
                        bytes=elems * (1 + dt * len(run)))]
    return out
