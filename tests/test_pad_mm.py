"""pad_mm's choice (gpusim.lower.pad_mm, gpusim.lower.lowering.padding) against what torch.compile did:
the H200 pad_mm_gate sweep (validation/results/h200/pad_mm_gate.jsonl) and the LM heads of the records."""

import json
import os

import pytest
import torch

from gpusim.capture.tracing import capture
from gpusim.hw.spec import load_spec
from gpusim.lower.pad_mm import SECTOR_BYTES, benchmark_pad_bytes, mm_compute_bound
from gpusim.predict.api import predict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEP = os.path.join(ROOT, "validation", "results", "h200", "pad_mm_gate.jsonl")


def _head(m, k, n, dtype="bfloat16"):
    dt = getattr(torch, dtype)
    return torch.nn.Linear(k, n, bias=False, dtype=dt), (torch.randn(m, k, dtype=dt),)


def padded(m, k, n, gpu, dtype="bfloat16") -> bool:
    """Whether gpusim's compiled lowering pads the head (a generated copy before its GEMM)."""
    lin, args = _head(m, k, n, dtype)
    return any(k.role == "aux" for k in predict(lin, args, gpu=load_spec(gpu), mode="compiled").kernels)


def _sweep():
    with open(SWEEP) as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if r.get("kind") == "pad_mm_gate" and r["dtype"] != "float32"]


def test_the_sweep_measured_the_benchmark_rule():
    # Inductor pads exactly where its eager benchmark finds the padded call 1.1x faster
    for r in _sweep():
        ran_padded = any(k["name"].startswith("triton_") for k in r["kernels"])
        b = r["bench_pair"]
        assert ran_padded == (b["ori_ms"] > 1.1 * b["pad_ms"]), r["M"]


def test_lowering_agrees_with_the_h200_sweep():
    rows = _sweep()
    agree = sum(padded(r["M"], r["K"], r["N"], "h200-sxm-calibrated", r["dtype"])
                == any(k["name"].startswith("triton_") for k in r["kernels"]) for r in rows)
    # 20 points (bf16, fp16); the misses are M 512 in each dtype (421 us unpadded against 1.1 x 365
    # padded, a close call inside the align1 law's error there, -13%); the gate alone, with the padding
    # priced as the compiled program's copy, missed 4 (M 384 and OPUS-MT's head, padded)
    assert agree >= len(rows) - 2, f"{agree} of {len(rows)}"


@pytest.mark.parametrize("gpu", ["h100-sxm-calibrated", "h200-sxm-calibrated"])
def test_record_heads(gpu):
    assert not padded(384, 512, 58101, gpu)        # OPUS-MT: cuBLAS align1 in both GPUs' compiled records
    assert padded(1024, 768, 50265, gpu)           # BART: no align kernel
    assert padded(4096, 768, 50257, gpu)           # GPT-2: no align kernel


def test_benchmark_times_the_transposed_weight_by_sectors():
    lin, args = _head(384, 512, 58101)
    g = capture(lin, args)
    (b,) = benchmark_pad_bytes(g, "linear")          # the activation is aligned: only the weight
    elems = 512 * 58101
    assert b == 2 * (512 * 58104 + elems) + SECTOR_BYTES * elems


def test_gate_is_the_dense_balance_and_half_for_fp32():
    spec = load_spec("h100-sxm-calibrated")
    for dtype, unit, factor in (("float32", "fp32", 0.5), ("bfloat16", "bf16_tc", 1.0)):
        balance = spec.peak_flops(unit) / (spec.bandwidth_gbs * 1e9)
        n = int(3 * 0.75 * balance)              # a square product's intensity is n / 3
        assert mm_compute_bound(n, n, n, dtype, spec) == (0.75 > factor)


@pytest.mark.parametrize("gpu", ["h100-sxm-calibrated", "h200-sxm-calibrated"])
def test_swin_window_bmm_stays_unpadded(gpu):
    # 49 x 32 @ 32 x 49 per window (intensity 14): cuBLAS's align1 kernel in the compiled records
    assert not mm_compute_bound(49, 32, 49, "bfloat16", load_spec(gpu))
