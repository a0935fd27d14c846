"""The cross-generation rules' constants and the evidence behind them (recorded green-context
sweeps: validation/sweeps/{h100,h200}-sm-scaling.json)."""

import pytest

from gpusim.hw.arch import TENSOR_LOAD_RULE, rule_constant, rule_provenance
from gpusim.cost.roofline import matmul_efficiency
from gpusim.hw.spec import load_spec


def test_rules_file_is_what_the_sweeps_give():
    from validation.fit.fit_sm_scaling import main
    assert main(["--check"]) == 0


def test_every_rule_constant_has_provenance():
    for section, key in (("bandwidth_sm", "fitted_exponent"), ("tensor_load", "e0"),
                         ("tensor_load", "shared_tflops")):
        source, ref = rule_provenance(section, key)
        assert source == "measured" and "validation.measure.sm_scaling" in ref, (section, key)
    source, ref = rule_provenance("bandwidth_sm", "exponent")   # adopted: says why
    assert source == "assumed" and "fitted_exponent" in ref


def test_exponent_transfers_between_gpus_better_than_the_series_law():
    """Fitted on one GPU's curves (8-132 SMs), the other GPU's curves: the measured
    exponent's median error at most 6% and under half the series law's (H100 <-> H200,
    measured 4.9% / 5.1% against 10.3% / 12.7%)."""
    from validation.fit import fit_sm_scaling as F
    docs = F.sweeps()
    specs = {g: load_spec(s) for g, s in F.GPUS.items()}
    p = rule_constant("bandwidth_sm", "fitted_exponent")
    for src, dst in (("h100", "h200"), ("h200", "h100")):
        fitted = F.transfer_error(docs, specs, src, dst, p)
        series = F.transfer_error(docs, specs, src, dst, 1.0)
        assert fitted < 6.0 and fitted < series / 2, (src, dst, fitted, series)


def test_tensor_load_rule_fits_both_gpus_curves():
    from validation.fit import fit_sm_scaling as F
    e0, c, med, mx = F.fit_tensor_load(F.sweeps())
    assert 0.85 < e0 <= 1.0 and med < 3.0, (e0, c, med, mx)


@pytest.mark.parametrize("low,high", [("rtx3090", "a100"), ("v100", "a100"),
                                      ("rtx4090", "a100"), ("t4", "l4")])
def test_tensor_efficiency_falls_with_the_gpus_tensor_rate(low, high):
    from validation.fit.derive_specs import tensor_load_efficiency
    a, b = load_spec(low), load_spec(high)
    assert a.peak_tflops["fp16_tc"] < b.peak_tflops["fp16_tc"]
    assert tensor_load_efficiency(a) > tensor_load_efficiency(b)


@pytest.mark.parametrize("name", ["v100-sxm2-16gb", "l4", "rtx3090ti", "a100-sxm4-40gb"])
def test_a_gpu_without_a_published_gemm_takes_the_tensor_load_rule(name):
    from validation.fit.derive_specs import published_matmul, tensor_load_efficiency
    spec = load_spec(name)
    assert name not in published_matmul()
    assert TENSOR_LOAD_RULE in spec.provenance["matmul_tc_efficiency"][1]
    assert spec.matmul_tc_efficiency == pytest.approx(tensor_load_efficiency(spec), abs=1e-4)


@pytest.mark.parametrize("name", ["rtx3090", "rtx4090", "a100-sxm4-80gb", "t4", "rtx-a6000"])
def test_a_published_gemm_microbenchmark_beats_the_rule(name):
    """A product with a published torch.matmul microbenchmark (component level, by others)
    takes its median rate over the datasheet peak, fp16 on the tensor cores and fp32 on the
    CUDA cores, source measured and the table named."""
    from validation.fit.derive_specs import MATMUL_TABLE, published_rate
    spec = load_spec(name)
    for field, col, unit in (("matmul_tc_efficiency", "fp16", "fp16_tc"),
                             ("matmul_efficiency", "fp32", "fp32")):
        source, ref = spec.provenance[field]
        assert source == "measured" and MATMUL_TABLE in ref and "not run here" in ref
        assert getattr(spec, field) == pytest.approx(
            published_rate(spec, col) / spec.peak_tflops[unit], abs=1e-4)


def test_the_published_table_agrees_with_our_own_hopper_gemms():
    """The published table's H100 and H200 rows against this project's own large-GEMM
    measurement on both (the tensor-load rule, fitted on our green-context sweeps, gives
    0.772 on the whole chip): within 2%, so the table measures what our harness does."""
    from validation.fit.derive_specs import tensor_load_check
    rows = {n: (rule, pub) for n, rule, pub in tensor_load_check()}
    for name in ("h100-sxm", "h200-sxm"):
        rule, pub = rows[name]
        assert abs(rule - pub) / pub < 0.02, (name, rule, pub)


def test_the_tensor_load_rule_misses_other_generations():
    """The rule's error across generations, as documented: off by more than 5% on every
    published GPU that is not Hopper (the power and clock each product runs at under a
    GEMM, not the tensor rate alone, set the fraction: the 70 W T4 reaches 0.65, the RTX
    3090 1.07 of its datasheet peak). If a better law lands, this test says so."""
    from validation.fit.derive_specs import tensor_load_check
    off = {n: (rule - pub) / pub for n, rule, pub in tensor_load_check() if not n.startswith("h")}
    assert len(off) >= 5 and all(abs(e) > 0.05 for e in off.values()), off


def test_matmul_tc_efficiency_may_pass_the_datasheet_peak_within_bounds(tmp_path):
    from gpusim.hw.schema import SpecError, builtin_dir
    text = (builtin_dir() / "rtx3090.toml").read_text()
    assert load_spec("rtx3090").matmul_tc_efficiency > 1.0
    import re
    bad = re.sub(r"^matmul_tc_efficiency = \{ value = [0-9.]+", "matmul_tc_efficiency = { value = 1.5",
                 text, flags=re.M)
    (tmp_path / "x.toml").write_text(bad)
    with pytest.raises(SpecError, match="matmul_tc_efficiency"):
        load_spec(str(tmp_path / "x.toml"))


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
