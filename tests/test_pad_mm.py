"""pad_mm's compute-bound gate against the compiled LM heads the H100 records show padded or not."""

import pytest

from gpusim.hw.spec import load_spec
from gpusim.lower.pad_mm import mm_compute_bound


@pytest.mark.parametrize("gpu", ["h100-sxm-calibrated", "h200-sxm-calibrated"])
def test_gate_pads_bart_and_gpt2_heads(gpu):
    spec = load_spec(gpu)
    assert mm_compute_bound(1024, 768, 50265, "bfloat16", spec)     # BART: no align kernel
    assert mm_compute_bound(4096, 768, 50257, "bfloat16", spec)     # GPT-2: no align kernel


def test_gate_leaves_opus_mt_head_unpadded_on_the_h100():
    # 384 x 512 x 58101, intensity 219: the compiled record runs cuBLAS's align1 kernel
    assert not mm_compute_bound(384, 512, 58101, "bfloat16", load_spec("h100-sxm-calibrated"))


def test_fp32_gate_is_half_the_balance_and_16bit_the_whole():
    spec = load_spec("h100-sxm-calibrated")
    for dtype, unit, factor in (("float32", "fp32", 0.5), ("bfloat16", "bf16_tc", 1.0)):
        balance = spec.peak_flops(unit) / (spec.bandwidth_gbs * 1e9)
        n = int(3 * 0.75 * balance)              # a square product's intensity is n / 3
        assert mm_compute_bound(n, n, n, dtype, spec) == (0.75 > factor)
