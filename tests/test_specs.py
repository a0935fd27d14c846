"""GPU knowledge as data (issues #21 item 2, #22): every spec figure carries its provenance,
no figure fitted on one GPU is another GPU's default, the architecture table answers the
capability questions dispatch asks, and `gpusim specs GPU` shows where each figure came from."""

import math
import tomllib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gpusim.hw import arch
from gpusim.capture.tracing import capture
from gpusim.cli.commands import main
from gpusim.hw.spec import canonical_names, list_specs, load_spec, parse_spec, transfer_spec
from gpusim.hw.spec_io import dump_spec, figure_keys, figure_line
from gpusim.hw.schema import CLASS_FIGURES, SOURCES, SpecError, builtin_dir
from gpusim.predict.pipeline import lower

SPECS = list_specs()
DATASHEET = [s for s in SPECS if s.source == "datasheet"]
CALIBRATED = [s for s in SPECS if s.source == "measured"]


def _gpu_token(spec) -> str:
    """``h100-sxm`` -> ``H100``, ``rtx-a6000`` -> ``RTX-A6000``: the part a measured ref
    must name."""
    parts = spec.name.upper().split("-")
    return "-".join(parts[:2]) if parts[0] == "RTX" and len(parts) > 1 else parts[0]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_builtin_figure_has_provenance(spec):
    for key in figure_keys(spec):
        assert key in spec.provenance, (spec.name, key)
        source, ref = spec.provenance[key]
        assert source in SOURCES and ref.strip(), (spec.name, key, source, ref)


@pytest.mark.parametrize("spec", DATASHEET, ids=lambda s: s.name)
def test_no_datasheet_spec_carries_another_gpus_measurement(spec):
    """A measured figure in a datasheet spec was measured on that GPU; no kernel-class
    figure equals one a calibration fitted on some GPU unless a named rule derived it."""
    others = {_gpu_token(s) for s in SPECS} - {_gpu_token(spec)}
    for key, (source, ref) in spec.provenance.items():
        if source == "measured":
            who = ref.split(",")[0].upper()
            assert _gpu_token(spec) in who and not any(t in who for t in others), (key, ref)
    for key in CLASS_FIGURES:
        mine = getattr(spec, key)
        if mine is None:
            continue
        source, ref = spec.provenance[key]
        if source == "derived" and "gpusim.hw.arch.BANDWIDTH_LATENCY_RULE" in ref:
            # a memory-bound class: the bandwidth-latency law with k from the other GPUs
            from validation.fit.derive_specs import FIELDS, calibrated, derived_lines
            assert key in FIELDS, (spec.name, key)
            assert f"value = {mine}," in derived_lines(spec, calibrated())[key], (spec.name, key)
            assert f"{spec.name}-calibrated:" not in ref, (spec.name, key)   # never its own
            continue
        if source == "derived" and "gpusim.hw.arch.SM_CYCLE_RULE" in ref:
            # a CUDA-core class bound by the SMs: FLOPs per SM-cycle from the other GPUs
            from validation.fit.derive_specs import SM_FIELDS, calibrated, derived_lines
            assert key in SM_FIELDS, (spec.name, key)
            assert f"value = {mine}," in derived_lines(spec, calibrated())[key], (spec.name, key)
            assert f"{spec.name}-calibrated:" not in ref, (spec.name, key)   # never its own
            continue
        if source == "derived":
            # the named rule: from a calibrated GPU of the same architecture row, not this GPU's
            assert "gpusim.hw.arch.SAME_ARCH_RULE" in ref, (spec.name, key, ref)
            (cal,) = [c for c in CALIBRATED if f"{c.name} = " in ref]
            assert cal.compute_capability == spec.compute_capability, (spec.name, key)
            assert _gpu_token(cal) != _gpu_token(spec) or "pcie" in spec.name, (spec.name, key)
            assert getattr(cal, key) == mine, (spec.name, key)
            continue
        for cal in CALIBRATED:
            assert mine != getattr(cal, key), (spec.name, key, cal.name)


@pytest.mark.parametrize("name", ["rtx3090", "v100", "t4", "rtx4090", "a100"])
def test_datasheet_specs_have_no_fitted_class_figure(name):
    """Off Hopper, a class figure exists only where the bandwidth-latency rule or the
    SM-cycle rule derived it."""
    from validation.fit.derive_specs import FIELDS, SM_FIELDS
    spec = load_spec(name)
    have = [k for k in CLASS_FIGURES if getattr(spec, k) is not None]
    assert set(have) <= set(FIELDS) | set(SM_FIELDS)
    assert all(("BANDWIDTH_LATENCY_RULE" if k in FIELDS else "SM_CYCLE_RULE")
               in spec.provenance[k][1] for k in have)
    assert "conv_efficiency_scale" not in have and "conv_stem_tflops" not in have


def test_bandwidth_latency_rule_beats_copying_a_fraction_leave_one_gpu_out():
    """Fitted on one Hopper, scored on the other, for every memory-bound class: the law in
    SMs x clock and bandwidth predicts the other GPU's measured fraction better than
    copying the fraction (median absolute error, both directions)."""
    from validation.fit.derive_specs import loo_errors
    rule, copy = loo_errors()
    assert rule < 10.0 and rule < copy / 2, (rule, copy)


def test_derived_specs_are_up_to_date():
    """The unit-fraction rule's figures in hwspecs/ are what the calibrated specs give now."""
    from validation.fit.derive_specs import main
    assert main(["--check"]) == 0


def test_calibrated_specs_keep_their_fitted_figures():
    for spec in CALIBRATED:
        for k in CLASS_FIGURES:
            assert getattr(spec, k) is not None, (spec.name, k)
            source, ref = spec.provenance[k]
            assert source == "measured" and "validation/fit/fit_dispatch.py" in ref, (k, ref)
            assert f"validation/sweeps/{_gpu_token(spec).lower()}" in ref, (k, ref)


def _spec_text(**changes) -> str:
    text = (builtin_dir() / "rtx3090.toml").read_text()
    for old, new in changes.items():
        start = text.index(f"\n{old} = ") + 1
        end = text.index("\n", start)
        text = text[:start] + new + text[end:]
    return text


def test_user_spec_plain_numbers_load_as_user_figures(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text(_spec_text(bandwidth_gbs="bandwidth_gbs = 1000.0"))
    spec = load_spec(str(p))
    assert spec.bandwidth_gbs == 1000.0
    assert spec.provenance["bandwidth_gbs"][0] == "user"
    assert spec.provenance["l2_mib"][0] == "datasheet"


def test_builtin_specs_must_give_provenance():
    data = tomllib.loads(_spec_text(bandwidth_gbs="bandwidth_gbs = 1000.0"))
    with pytest.raises(SpecError, match="bandwidth_gbs"):
        parse_spec(data, "hwspecs/rtx3090.toml", builtin=True)


@pytest.mark.parametrize("bad", [
    'bandwidth_gbs = { value = 936.0, source = "guessed", ref = "x" }',
    'bandwidth_gbs = { value = 936.0, source = "datasheet", ref = "" }',
    'bandwidth_gbs = { value = 936.0, source = "datasheet" }',
    'bandwidth_gbs = { value = 936.0, source = "datasheet", ref = "x", note = "y" }',
    'bandwidth_gbs = { source = "datasheet", ref = "x" }',
    'bandwidth_gbs = { value = -1.0, source = "datasheet", ref = "x" }',
])
def test_bad_provenance_is_a_spec_error(tmp_path, bad):
    p = tmp_path / "bad.toml"
    p.write_text(_spec_text(bandwidth_gbs=bad))
    with pytest.raises(SpecError, match="bandwidth_gbs"):
        load_spec(str(p))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_dump_spec_round_trips_values_and_provenance(tmp_path, spec):
    p = tmp_path / "x.toml"
    dump_spec(spec, p)
    back = load_spec(str(p))
    for f in ("provenance", "peak_tflops", "bandwidth_gbs", "compute_capability") + CLASS_FIGURES:
        assert getattr(back, f) == getattr(spec, f), f



@pytest.mark.parametrize("value, fmt, written", [(0.61234, ".4f", "0.6123"), (2.5, ".3f", "2.500"),
                                                  (np.float64(0.1), None, "0.1"), (np.int64(7), None, "7"),
                                                  (3, None, "3"), (1e-07, None, "1e-07")])
def test_figure_line_is_a_toml_figure_with_the_fits_decimals(value, fmt, written):
    """The one way a fit writes a figure: ``fmt`` keeps a fit's fixed decimals, numpy's scalars
    are written as Python's numbers, and a ref with quotes stays one TOML string."""
    ref = 'H200, 2026-11-28, python3 -m x --tag "a\\b"'
    line = figure_line("conv_gemm_us", value, "measured", ref, fmt)
    assert line.startswith(f"conv_gemm_us = {{ value = {written}, ")
    back = tomllib.loads(line)["conv_gemm_us"]
    assert back == {"value": float(written) if "." in written or "e" in written else int(written),
                    "source": "measured", "ref": ref}

def test_transfer_spec_takes_the_targets_datasheet_provenance():
    t = transfer_spec(load_spec("h100-sxm-calibrated"), "rtx3090")
    assert t.bandwidth_gbs == 936.0 and "GA102" in t.provenance["bandwidth_gbs"][1]
    assert t.provenance["peak_tflops.fp16_tc"] == load_spec("rtx3090").provenance["peak_tflops.fp16_tc"]


# ---------------------------------------------------------------- architecture table
def test_arch_rows_give_every_fact_with_its_source():
    rows = arch.table()
    assert set(rows) >= {"sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90"}
    for sm, row in rows.items():
        for fact in arch.FACTS:
            source, ref = row.provenance[fact]
            assert source in SOURCES and ref.strip(), (sm, fact)


def test_arch_files_are_not_gpu_specs():
    assert not any(n.startswith("sm_") or n == "architectures" for n in canonical_names())
    assert (builtin_dir() / "arch").is_dir()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_builtin_spec_has_an_architecture_row(spec):
    row = arch.arch_of(spec)
    assert row is not None, spec.compute_capability
    # a spec's tensor-core peaks are the dtypes its generation's tensor cores take
    assert ("tf32_tc" in spec.peak_tflops) == ("tf32" in row.tensor_core_dtypes), spec.name
    assert ("bf16_tc" in spec.peak_tflops) == ("bfloat16" in row.tensor_core_dtypes), spec.name
    assert spec.smem_per_sm_kib == row.max_smem_per_sm_kib, spec.name
    assert spec.registers_per_sm == row.registers_per_sm, spec.name


@pytest.mark.parametrize("gpu,tf32,fp16,bf16,fp32", [
    ("v100", False, "efficient", "math", "efficient"),
    ("t4", False, "efficient", "math", "efficient"),
    ("a100", True, "flash", "flash", "efficient"),
    ("rtx3090", True, "flash", "flash", "efficient"),
    ("l4", True, "flash", "flash", "efficient"),
    ("h100", True, "cudnn", "cudnn", "efficient"),
])
def test_capabilities_come_from_the_architecture_row(gpu, tf32, fp16, bf16, fp32):
    spec = load_spec(gpu)
    assert arch.cudnn_conv_tf32(spec) is tf32
    assert [arch.attention_backend(spec, d) for d in ("float16", "bfloat16", "float32")] \
        == [fp16, bf16, fp32]


def test_fp32_convs_take_the_tf32_transform_path_only_where_cudnn_runs_tf32():
    x = torch.empty(32, 64, 56, 56, device="meta")
    w = torch.empty(64, 64, 3, 3, device="meta")
    g = capture(lambda x, w: F.conv2d(x, w, padding=1), (x, w))
    n = {gpu: len(lower(g, "eager", spec=load_spec(gpu)).kernels) for gpu in ("v100", "t4", "a100")}
    assert n["v100"] == n["t4"] == 1 and n["a100"] > 1, n


def test_bf16_attention_before_sm80_is_priced_as_no_fused_kernel():
    q = torch.empty(2, 4, 128, 64, device="meta", dtype=torch.bfloat16)
    g = capture(lambda q: F.scaled_dot_product_attention(q, q, q), (q,))
    variants = {gpu: [k.variant for k in lower(g, "eager", spec=load_spec(gpu)).kernels if k.variant]
                for gpu in ("v100", "a100", "h100")}
    assert variants == {"v100": ["attention_math"], "a100": ["attention"], "h100": ["attention"]}


# ---------------------------------------------------------------- CLI
def test_specs_gpu_lists_every_figure_with_source_and_ref(capsys):
    assert main(["specs", "v100"]) == 0
    out = capsys.readouterr().out
    spec = load_spec("v100")
    for key in figure_keys(spec):
        line = next(line for line in out.splitlines() if line.startswith(key + " "))
        if key in spec.provenance:
            source, ref = spec.provenance[key]
            assert source in line and ref[:40] in line, line
    assert "conv_efficiency_scale" in out          # named among the classes without a figure


def test_specs_table_counts_figures_by_source(capsys):
    assert main(["specs"]) == 0
    out = capsys.readouterr().out
    assert "figures by source" in out
    assert all(n in out for n in ("t4", "l4", "rtx4090", "h100-pcie", "v100-sxm2-32gb"))


@pytest.fixture(scope="module")
def small_cnn():
    from gpusim.models.resolve import model_graph
    return model_graph("conv_bn_relu", "float16", {"batch": 4})


@pytest.mark.parametrize("gpu", canonical_names())
def test_every_builtin_spec_predicts(gpu, small_cnn):
    from gpusim.predict.pipeline import predict
    r = predict(small_cnn, gpu=gpu)
    assert math.isfinite(r.device_us) and r.device_us > 0
