"""The weight-streaming law of skinny 16-bit GEMMs (gpusim.cost.laws.gemm with gemm_stream_*),
fitted by validation/fit/fit_skinny.py on the H200's recorded sweep
(validation/results/h200/skinny_gemm.jsonl)."""

import dataclasses
import os

import pytest
import torch

import gpusim
from gpusim.cost.laws import STREAM_ROWS
from gpusim.hw.spec import load_spec
from validation.fit import fit_skinny

SWEEP = os.path.join(os.path.dirname(__file__), "..", "validation", "results", "h200", "skinny_gemm.jsonl")
SPEC = load_spec("h200-sxm-calibrated")
FLUSHED = dataclasses.replace(SPEC, gemm_stream_us=None, gemm_stream_efficiency=None)


def _points():
    _, rows = fit_skinny.read(SWEEP)
    return {(r["M"], r["N"], r["K"], r["bias"]): r for r in rows}


def _linear_us(spec, rows: int, n: int, k: int) -> float:
    w = torch.empty(n, k, dtype=torch.bfloat16, device="meta")
    x = torch.empty(rows, k, dtype=torch.bfloat16, device="meta")
    p = gpusim.predict(lambda x: torch.nn.functional.linear(x, w), (x,), gpu=spec)
    mains = [e for e in p.kernels if e.kind == "matmul"]
    assert len(mains) == 1
    return mains[0].us


def test_spec_figures_are_the_fit_of_the_recorded_sweep():
    _, rows = fit_skinny.read(SWEEP)
    points = [p for p in map(fit_skinny.point, rows) if p is not None]
    intercept, rate, (k_us, k_ns), _ = fit_skinny.report(points, SPEC)
    assert SPEC.gemm_stream_us == pytest.approx(max(0.0, intercept - SPEC.kernel_fixed_us), abs=2e-3)
    assert SPEC.gemm_stream_efficiency == pytest.approx(rate * 1e6 / SPEC.bandwidth, abs=2e-4)
    assert (SPEC.gemm_stream_k_us, SPEC.gemm_stream_k_ns) == pytest.approx((k_us, k_ns), abs=2e-3)


@pytest.mark.parametrize("m,n,k", [(1, 8192, 2048), (8, 14336, 4096), (1, 128256, 2048), (32, 10240, 2560),
                                   (1, 2048, 2048), (8, 512, 2048)])
def test_decode_products_match_the_sweep(m, n, k):
    """Weight streams of decode steps land within 10% of the sweep's main kernel (the small
    unsplit ones on the K-loop floor); the dispatch sweep's flushed figure (gemm_mem_efficiency)
    is 40% or more slower on each large one (32 MB and over), and 10% or more faster on the small ones."""
    rec = _points()[(m, n, k, False)]
    meas = sum(x["us"] for x in rec["kernels"] if "splitkreduce" not in x["name"].lower())
    assert _linear_us(SPEC, m, n, k) == pytest.approx(meas, rel=0.10)
    if n * k * 2 >= 32e6:
        assert _linear_us(FLUSHED, m, n, k) > 1.4 * meas
    else:
        assert _linear_us(FLUSHED, m, n, k) < 0.9 * meas


def test_wider_products_keep_the_dispatch_law():
    """Above STREAM_ROWS rows (prefills, the zoo's forwards) the stream figures do not apply."""
    assert _linear_us(SPEC, STREAM_ROWS + 1, 8192, 2048) == _linear_us(FLUSHED, STREAM_ROWS + 1, 8192, 2048)
    assert _linear_us(SPEC, STREAM_ROWS, 8192, 2048) < _linear_us(FLUSHED, STREAM_ROWS, 8192, 2048)


def test_a_gpu_without_the_sweep_keeps_its_law():
    """A GPU with neither the sweep nor figures carried from one (the A100's datasheet spec) streams at the
    dispatch law; the H100 has the H200's carried by named rules (validation/fit/carry_decode.py)."""
    assert load_spec("a100").gemm_stream_efficiency is None
    assert load_spec("h100-sxm-calibrated").provenance["gemm_stream_efficiency"][0] == "derived"
