"""The decode sweeps' laws carried from the H200's calibration to the H100's (validation/fit/carry_decode.py)."""

import pytest

from gpusim.hw.spec import load_spec, transfer_spec
from validation.fit import carry_decode as cd

H200, H100 = load_spec("h200-sxm-calibrated"), load_spec("h100-sxm-calibrated")


def test_the_h100_spec_holds_what_the_rules_give_now():
    assert cd.main(["--check"]) == 0


def test_every_carried_figure_is_derived_and_names_its_source():
    for f in cd.FIELDS:
        if getattr(H200, f) is None:
            continue
        src, ref = H100.provenance[f]
        assert src == "derived" and cd.MARK in ref and "h200-sxm-calibrated = " in ref, (f, src, ref)


def test_a_gpu_carried_onto_itself_keeps_its_figures():
    """The rules are identities when source and target are the same GPU (each rule can fail this), except a
    class at or above the copy stream, which the bandwidth-latency rule puts at the stream (mem_efficiency)."""
    got = cd.carried(H200, H200)
    for f, v in got.items():
        if cd.bandwidth_figure(f) and cd.of_datasheet(H200, f) >= H200.mem_efficiency:
            assert cd.of_datasheet(H200.replace(**{f: v}), f) == pytest.approx(H200.mem_efficiency), f
        else:
            assert v == pytest.approx(getattr(H200, f), rel=1e-9), f


def test_times_carry_unchanged_and_rates_by_the_bandwidth():
    got = cd.carried(H200, H100.replace(**{f: None for f in cd.FIELDS}))
    assert got["gemm_stream_k_ns"] == H200.gemm_stream_k_ns
    # the H100 streams fewer TB/s than the H200 (less bandwidth, same SMs) but no smaller a share of it
    assert got["attention_decode_tbps"] < H200.attention_decode_tbps
    assert got["attention_decode_tbps"] * 1e3 / H100.bandwidth_gbs >= H200.attention_decode_tbps * 1e3 / H200.bandwidth_gbs
    assert got["gemm_stream_efficiency"] <= 1.0


def test_refused_across_architectures_or_clocks():
    with pytest.raises(ValueError):
        cd.carried(H200, load_spec("a100-sxm4-80gb"))
    with pytest.raises(ValueError):
        cd.carried(H200, H100.replace(boost_clock_mhz=1755.0))


def test_a_measured_figure_is_never_replaced(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text('[model]\ngemm_stream_us = { value = 9.0, source = "measured", ref = "X" }\n')
    out = cd.rewrite(p, cd.lines(H200, H100.replace(**{f: None for f in cd.FIELDS})))
    assert 'gemm_stream_us = { value = 9.0, source = "measured"' in out
    assert out.count("gemm_stream_us = ") == 1 and "gemm_stream_k_ns = " in out


def test_transfer_back_to_the_source_gpu_drops_its_own_figures():
    t = transfer_spec(H100, "h200")
    assert t.gemm_stream_efficiency is None and t.attention_decode_tbps is None
    assert "gemm_stream_efficiency" not in t.provenance
    assert t.gemm_kloop_ns == H100.gemm_kloop_ns          # the H100's own fits still carry
