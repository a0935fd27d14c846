"""Inductor's ``pad_mm`` (``torch/_inductor/fx_passes/pad_mm.py``): which misaligned GEMMs it pads.

A 16-bit (fp32) GEMM whose M, K or N is not a multiple of 8 (4) elements runs cuBLAS's slow
align1/align2 kernels; ``pad_mm`` copies the offending operands into aligned buffers when its benchmark
says the padded call is 1.1x faster than the unpadded one (:func:`gpusim.lower.lowering.padding` asks the
cost model the same question).

Measured (``validation/results/h200/pad_mm_gate.jsonl``: H200, torch 2.11, 23 compiled ``nn.Linear``
heads over odd vocabularies; docs/inductor.md):

* **Torch's compute-bound gate passes every product.** ``is_mm_compute_bound`` compares the intensity with
  half a machine balance from ``get_device_tflops``, which for a GPU torch's device table lacks returns
  Triton's estimate: 0.535 (bf16, fp16) and 0.033 (fp32) on the H200, 1000x under the peak, so every
  misaligned product is benchmarked (23 of 23 points ran two benchmarks). gpusim keeps a gate of its own
  (:func:`mm_compute_bound`): below the dense machine balance a product is memory-bound, padded or not, and
  the benchmark finds no 1.1x; there gpusim's class prices (the align classes' compute rate against a
  padded GEMM at the bandwidth) would pad what Inductor leaves alone (Swin's 49-token window bmm runs
  cuBLAS's align1 kernel in the compiled records, 46 us; priced 33 unpadded against 17 padded).
* **The benchmark times the padding in eager.** It compares the unpadded call with ATen's
  ``constant_pad_nd`` of each operand it cannot plan away (a graph input: a parameter weight; an operand
  written by a GEMM, convolution or attention call) plus the padded call. ``constant_pad_nd`` fills the
  padded buffer, then copies the operand in; a linear's weight is read transposed (``weight.t()``), one
  32-byte sector per element (:data:`SECTOR_BYTES`): 270 us for 768 x 50257 in 16 bits, 297 in fp32, where
  the compiled program's own Triton copy of it takes 38. Its decisions: ``ori_ms > 1.1 x pad_ms`` in all 23
  points (OPUS-MT's head: 289 against 276 us, unpadded).
"""

from __future__ import annotations

import math

from gpusim.graph.opgraph import DTYPE_BYTES, HALF_DTYPES, OpGraph

#: gpusim's gate (:func:`mm_compute_bound`): intensity above the dense machine balance (peak / bandwidth)
#: x ``PAD_MM_BALANCE`` (fp32: ``PAD_MM_BALANCE_FP32``). The records bound it: on the H100 OPUS-MT's LM head
#: (384 x 512 x 58101, intensity 219) stays unpadded and BART's (1024 x 768 x 50265, 435) and GPT-2's
#: (4096 x 768 x 50257, 639) are padded; Swin's window bmm (intensity 14) stays unpadded on both GPUs; the
#: H200 sweep's heads below intensity 206 (its dense balance) all stay unpadded. fp32 keeps half the
#: balance (no fp32 record or sweep point pads: its SIMT GEMM is as slow padded)
PAD_MM_BALANCE = 1.0
PAD_MM_BALANCE_FP32 = 0.5

#: the DRAM access granularity: a warp's strided reads cost a 32-byte sector per element (CUDA C++
#: Best Practices Guide, "Coalesced Access to Global Memory"); with it, the H200's transposing pad copies
#: run at 1.00x (16-bit) and 0.95x (fp32) of the datasheet bandwidth (pad_mm_gate sweep)
SECTOR_BYTES = 32
#: the producers whose output ``pad_mm`` cannot plan padded (``should_exclude_padding_time``): their
#: operand's padding copy is timed in the benchmark, as a graph input's is
UNPLANNED_KINDS = ("input", "matmul", "conv", "attention")


def _dims(graph: OpGraph, n: str):
    a = graph.g.nodes[n]
    gm = a.get("gemm")
    if a["kind"] != "matmul" or not gm:
        return None
    align = 8 if a["dtype"] in HALF_DTYPES else 4 if a["dtype"] == "float32" else 0
    if not align:
        return None
    return align, DTYPE_BYTES[a["dtype"]], gm["m"], gm["k"], gm["n"], gm.get("b", 1)


def _bad(d: int, align: int) -> bool:
    return d % align != 0 and d != 1


def mm_compute_bound(m: int, k: int, n: int, dtype: str, spec) -> bool:
    """Whether gpusim lets ``pad_mm``'s benchmark decide an ``m x k @ k x n`` product on ``spec``:
    intensity ``mnk / (mk + kn + mn)`` above :data:`PAD_MM_BALANCE` (fp32: :data:`PAD_MM_BALANCE_FP32`)
    x the dense machine balance."""
    unit = "bf16_tc" if dtype == "bfloat16" else "fp16_tc" if dtype == "float16" else "fp32"
    balance = spec.peak_flops(unit) / (spec.bandwidth_gbs * 1e9)
    factor = PAD_MM_BALANCE if dtype in HALF_DTYPES else PAD_MM_BALANCE_FP32
    return m * n * k / (m * k + n * k + m * n) > factor * balance


def pad_mm_operands(graph: OpGraph, n: str, spec) -> list[float]:
    """Bytes each copy the compiled program runs to pad matmul ``n`` moves (one generated kernel per
    operand with a dimension not a multiple of 8 (16-bit) or 4 (fp32) elements); [] when none needs it,
    the product is under gpusim's gate (:func:`mm_compute_bound`) or there is no ``spec`` to price the
    choice with (:func:`gpusim.lower.lowering.padding` keeps them only when the benchmark would)."""
    d = _dims(graph, n) if spec is not None else None
    if d is None:
        return []
    align, size, m, k, nn, b = d
    if not mm_compute_bound(m, k, nn, graph.g.nodes[n]["dtype"], spec):
        return []
    out = []
    if _bad(m, align) or _bad(k, align):
        out.append(2.0 * b * m * k * size)           # read and write the activation
    if _bad(k, align) or _bad(nn, align):
        out.append(2.0 * b * k * nn * size)          # the weight, every call
    return out


def benchmark_pad_bytes(graph: OpGraph, n: str) -> list[float]:
    """DRAM traffic of the eager padding copies ``pad_mm``'s benchmark times for matmul ``n``, one entry
    per timed operand (:data:`UNPLANNED_KINDS`): ATen's ``constant_pad_nd``, a fill of the padded buffer
    and a copy of the operand into it; a linear's weight is read transposed, a sector per element."""
    d = _dims(graph, n)
    if d is None:
        return []
    align, size, m, k, nn, b = d
    a = graph.g.nodes[n]
    ins = a.get("inputs") or []

    def up(x):
        return math.ceil(x / align) * align if _bad(x, align) else x

    def timed(i):
        return i < len(ins) and graph.g.nodes[ins[i]]["kind"] in UNPLANNED_KINDS
    out = []
    if (_bad(m, align) or _bad(k, align)) and timed(0):
        out.append(b * size * (up(m) * up(k) + 2 * m * k))
    if (_bad(k, align) or _bad(nn, align)) and timed(1):
        transposed = "linear" in str(a.get("op", ""))
        read = b * k * nn * (SECTOR_BYTES if transposed else size)
        out.append(b * size * (up(k) * up(nn) + k * nn) + read)
    return out
