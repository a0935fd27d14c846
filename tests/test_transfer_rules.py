"""The cross-generation rules' constants and the evidence behind them (recorded green-context
sweeps: validation/sweeps/{h100,h200}-sm-scaling.json)."""

import pytest

from gpusim.arch import TENSOR_LOAD_RULE, rule_constant, rule_provenance
from gpusim.cost import matmul_efficiency
from gpusim.hardware import load_spec


def test_rules_file_is_what_the_sweeps_give():
    from validation.fit_sm_scaling import main
    assert main(["--check"]) == 0


def test_every_rule_constant_has_provenance():
    for section, key in (("bandwidth_sm", "fitted_exponent"), ("tensor_load", "e0"),
                         ("tensor_load", "shared_tflops")):
        source, ref = rule_provenance(section, key)
        assert source == "measured" and "validation.sm_scaling" in ref, (section, key)
    source, ref = rule_provenance("bandwidth_sm", "exponent")   # adopted: says why
    assert source == "assumed" and "fitted_exponent" in ref


def test_exponent_transfers_between_gpus_better_than_the_series_law():
    """Fitted on one GPU's curves (8-132 SMs), the other GPU's curves: the measured
    exponent's median error at most 6% and under half the series law's (H100 <-> H200,
    measured 4.9% / 5.1% against 10.3% / 12.7%)."""
    from validation import fit_sm_scaling as F
    docs = F.sweeps()
    specs = {g: load_spec(s) for g, s in F.GPUS.items()}
    p = rule_constant("bandwidth_sm", "fitted_exponent")
    for src, dst in (("h100", "h200"), ("h200", "h100")):
        fitted = F.transfer_error(docs, specs, src, dst, p)
        series = F.transfer_error(docs, specs, src, dst, 1.0)
        assert fitted < 6.0 and fitted < series / 2, (src, dst, fitted, series)


def test_tensor_load_rule_fits_both_gpus_curves():
    from validation import fit_sm_scaling as F
    e0, c, med, mx = F.fit_tensor_load(F.sweeps())
    assert 0.85 < e0 <= 1.0 and med < 3.0, (e0, c, med, mx)


@pytest.mark.parametrize("low,high", [("rtx3090", "a100"), ("v100", "a100"),
                                      ("rtx4090", "a100"), ("t4", "l4")])
def test_tensor_efficiency_falls_with_the_gpus_tensor_rate(low, high):
    a, b = load_spec(low), load_spec(high)
    assert a.peak_tflops["fp16_tc"] < b.peak_tflops["fp16_tc"]
    assert a.matmul_tc_efficiency > b.matmul_tc_efficiency
    assert TENSOR_LOAD_RULE in a.provenance["matmul_tc_efficiency"][1]


@pytest.mark.parametrize("name", ["h100-sxm", "h200-sxm", "h100-pcie"])
def test_a_row_with_a_calibrated_gpu_keeps_its_measured_gemms(name):
    """Hopper datasheet specs: the other Hopper's calibration measured these kernels; the
    cross-generation rule is for rows without one."""
    assert load_spec(name).matmul_tc_efficiency is None


def test_tensor_efficiency_only_for_tensor_units():
    spec = load_spec("rtx3090")
    assert matmul_efficiency(spec, "fp16_tc") == spec.matmul_tc_efficiency
    assert matmul_efficiency(spec, "fp32") == spec.matmul_efficiency != spec.matmul_tc_efficiency
    cal = load_spec("h100-sxm-calibrated")          # its own measurement covers every unit
    assert cal.matmul_tc_efficiency is None
    assert matmul_efficiency(cal, "bf16_tc") == cal.matmul_efficiency
