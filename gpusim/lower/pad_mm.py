"""Inductor's ``pad_mm`` (``torch/_inductor/fx_passes/pad_mm.py``): which misaligned GEMMs it pads.

A 16-bit (fp32) GEMM whose M, K or N is not a multiple of 8 (4) elements runs cuBLAS's slow
align1/align2 kernels; ``pad_mm`` copies the offending operands into aligned buffers when the
product is compute-bound (:func:`mm_compute_bound`) and the padded call, copies included,
benchmarks 1.1x faster (:func:`gpusim.lower.lowering.padding` asks the cost model)."""

from __future__ import annotations

from gpusim.graph.opgraph import HALF_DTYPES, OpGraph

#: ``pad_mm.is_mm_compute_bound``: arithmetic intensity above ``0.5 x`` the machine balance;
#: the records put the gate at the dense balance (peak / bandwidth) x ``PAD_MM_BALANCE``, as if
#: torch's balance took a tensor-core figure twice the dense peak (PyTorch's device table,
#: ``torch/_inductor/analysis/device_info.py``, lists the H100's bf16 at 1979 TOPS, the
#: datasheet's with-sparsity figure; which path torch 2.11 takes was not read). Measured (H100
#: compiled records, bf16): OPUS-MT's LM head (384 x 512 x 58101, intensity 219) is left
#: unpadded (cuBLAS align1, 285 us), BART's (1024 x 768 x 50265, 435) and GPT-2's (4096 x 768
#: x 50257, 639) are padded: the gate lies between 219 and 435 (dense balance 295; half of it,
#: 148, would pad OPUS-MT). H200: BART and GPT-2 padded (gate <= 435; dense balance 206).
#: fp32 keeps torch's half (that table's fp32 figure is the dense one; no fp32 record pads).
PAD_MM_BALANCE = 1.0
PAD_MM_BALANCE_FP32 = 0.5


def mm_compute_bound(m: int, k: int, n: int, dtype: str, spec) -> bool:
    """Whether Inductor's ``pad_mm`` counts an ``m x k @ k x n`` product as compute-bound
    on ``spec`` (only those are benchmarked padded against unpadded): intensity
    ``mnk / (mk + kn + mn)`` above :data:`PAD_MM_BALANCE` (fp32: :data:`PAD_MM_BALANCE_FP32`)
    x the dense machine balance."""
    unit = "bf16_tc" if dtype == "bfloat16" else "fp16_tc" if dtype == "float16" else "fp32"
    balance = spec.peak_flops(unit) / (spec.bandwidth_gbs * 1e9)
    factor = PAD_MM_BALANCE if dtype in HALF_DTYPES else PAD_MM_BALANCE_FP32
    return m * n * k / (m * k + n * k + m * n) > factor * balance


def pad_mm_operands(graph: OpGraph, n: str, spec) -> list[float]:
    """Bytes of each operand ``pad_mm`` pads for matmul ``n``: a dimension not a multiple
    of 8 (16-bit) or 4 (fp32) elements, on a GEMM compute-bound on ``spec``
    (:func:`mm_compute_bound`). Inductor then benchmarks padded against
    unpadded and keeps the padding only if it is 1.1x faster (:func:`gpusim.lower.lowering.realize`
    asks the cost model the same question)."""
    a = graph.g.nodes[n]
    gm = a.get("gemm")
    if a["kind"] != "matmul" or not gm or spec is None:
        return []
    align = 8 if a["dtype"] in HALF_DTYPES else 4 if a["dtype"] == "float32" else 0
    m, k, nn, b = gm["m"], gm["k"], gm["n"], gm.get("b", 1)
    bad = [d for d in (m, k, nn) if align and d % align and d != 1]
    if not bad:
        return []
    if not mm_compute_bound(m, k, nn, a["dtype"], spec):
        return []
    size = 2 if a["dtype"] in HALF_DTYPES else 4
    out = []
    if m % align or k % align:
        out.append(2.0 * b * m * k * size)           # read and write the activation
    if k % align or nn % align:
        out.append(2.0 * b * k * nn * size)          # the weight, every call
    return out
