"""Where a compiled call's host time goes: the profiled host events of a compiled zoo record split
by part (validation.score.compiled_profile) and the unprofiled anatomy records
(validation.measure.compiled_anatomy, scored by validation.score.compiled_anatomy). On recorded
and synthetic data: nothing is clocked here."""

import gzip
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from validation.measure.compiled_anatomy import WRAPPER_PATTERNS, top_functions, wrapper_counts
from validation.score import compiled_anatomy as anat
from validation.score.compiled_profile import PARTS, breakdown, counts, part_of

CF2 = "validation/results/h200/host/2026-11-28-cf2-holdout-compiled-profile.jsonl.gz"


def test_events_go_to_their_part():
    assert part_of("TorchDynamo Cache Lookup") == "dynamo"
    assert part_of("Torch-Compiled Region: 0/0") == "dynamo"
    assert part_of("AOTDispatcher Runtime Wrapper Prologue") == "aot"
    assert part_of("## Call CompiledFxGraph abc ##") == "wrapper"
    assert part_of("triton_per_fused_add_native_layer_norm_view_3") == "launcher"
    assert part_of("cuLaunchKernel") == "cu_triton"
    assert part_of("cuLaunchKernelEx") == "cu_library"
    assert part_of("aten::addmm") == "matmul"
    assert part_of("aten::_cudnn_attention_forward") == "attention"
    assert part_of("aten::cudnn_convolution") == "conv"
    assert part_of("aten::empty_strided") == "alloc"
    assert part_of("cudaMemsetAsync") == "cuda_other"
    assert part_of("Activity Buffer Request") is None        # the profiler's own


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.sampled_from(["TorchDynamo Cache Lookup", "aten::addmm", "cuLaunchKernel",
                                        "Activity Buffer Request", "## Call CompiledFxGraph x ##",
                                        "triton_poi_x", "aten::weird"]),
                       st.floats(0.1, 1e4), min_size=2),
       st.floats(100, 1e5))
def test_the_parts_share_the_unprofiled_wall(ev, wall):
    """The parts sum to the unprofiled wall (the profiler's own events left out of the shares)."""
    if set(ev) == {"Activity Buffer Request"}:
        return
    rec = {"wall_us": wall, "host_profile": {"self_cpu_us_per_call": ev,
                                             "cpu_us_per_call": sum(ev.values())}}
    b = breakdown(rec)
    assert sum(b[p] for p in PARTS) == pytest.approx(wall)
    assert b["_profiler_us"] == pytest.approx(ev.get("Activity Buffer Request", 0.0))


def test_the_recorded_profiles_split():
    """The cf2 lease's profiled compiled cases: every part non-negative, counts from the record."""
    with gzip.open(CF2, "rt") as f:
        recs = [json.loads(ln) for ln in f]
    for r in recs:
        b = breakdown(r)
        assert all(b[p] >= 0 for p in PARTS)
        assert b["wrapper"] > 0 and b["matmul"] > 0
        c = counts(r)
        assert c["matmul"] + c["attention"] + c["conv"] == r["host"]["aten_ops_top"]


def test_wrapper_counts_read_the_generated_call():
    class G:
        source_code = ("import x\nbuf = empty_strided_cuda((4,), (1,))\n"
                       "def call(args):\n    a, = args\n    args.clear()\n"
                       "    assert_size_stride(a, (4,), (1,))\n"
                       "    buf0 = empty_strided_cuda((4,), (1,), torch.float32)\n"
                       "    extern_kernels.mm(a, a, out=buf0)\n"
                       "    triton_poi_0.run(buf0, 4, stream=s)\n"
                       "    del a\n    return (reinterpret_tensor(buf0, (2, 2), (2, 1), 0), )\n")
    c = wrapper_counts([G()])
    assert set(WRAPPER_PATTERNS) <= set(c)
    assert (c["alloc"], c["extern"], c["launches"], c["del"], c["reinterpret"],
            c["assert_size_stride"]) == (1, 1, 1, 1, 1, 1)


def test_top_functions_per_call():
    import cProfile

    def work():
        return sum(i * i for i in range(2000))
    p = cProfile.Profile()
    for _ in range(4):
        p.enable()
        work()
        p.disable()
    top = top_functions(p, 4)
    assert any(r["fn"].endswith(":work") and r["calls"] == 1.0 for r in top)
    assert all(r["tottime_us"] >= 0 for r in top)


def _rec(model, p, host, inside, wall, g):
    return {"model": model, "pass": p, "sizes": {"batch": 1, "hw": 64}, "dtype": "float16",
            "host_us": host, "inductor_us": inside, "outside_us": host - inside, "wall_us": wall,
            "state_before": {"gpt2_wall_us": g}, "state_after": {"gpt2_wall_us": g}}


def test_anatomy_rows_gauge_the_state(tmp_path):
    recs = [_rec("a", 0, 1000, 800, 1100, 1000.0), _rec("a", 1, 2000, 1600, 2100, 2000.0),
            _rec("b", 0, 900, 700, 950, 1000.0)]
    path = os.path.join(tmp_path, "x.jsonl")
    with open(path, "w") as f:
        for r in recs + [{"model": "c", "failed": "boom"}]:
            f.write(json.dumps(r) + "\n")
    rs = anat.rows(anat.load(path))
    assert [r["model"] for r in rs] == ["a", "a", "b"]
    assert [r["state"] for r in rs] == [1.0, 2.0, 1.0]
    assert "| a | 1 | x2.00 | 2000 | 1600 | 400 |" in anat.markdown(rs)


def test_compiled_reference_walls_keep_each_forwards_fastest_window(monkeypatch):
    """calibrate's compiled reference forwards: timed in windows, the forwards taking turns, the
    fastest window of each kept (a slow episode in one window does not reach the factor); a forward
    that fails to compile is left out with its error. torch.compile and the clock are stand-ins."""
    import torch

    from validation.measure import reference_forwards as rf
    seq = iter([2532.0, 4536.0, 1666.0, 3321.0, 1900.0, 5000.0])
    calls = []

    def fake_wall(fn, args, **kw):
        calls.append(fn.name)
        return {"median_us": next(seq)}

    class Fwd:
        def __init__(self, name):
            self.name = name

        def __call__(self, *a):
            return None
    monkeypatch.setattr(rf, "reference_forwards",
                        lambda device: [("gpt2", Fwd("gpt2"), ()), ("resnet50", Fwd("resnet50"), ())])
    monkeypatch.setattr(torch, "compile", lambda m, **kw: m)
    monkeypatch.setattr(rf.measure, "time_wall", fake_wall)
    monkeypatch.setattr(rf, "host_profile", lambda fn, args: {"kernels_per_call": 1.0})
    out = rf.compiled_reference_walls("cpu", windows=3)
    assert calls == ["gpt2", "resnet50"] * 3
    assert (out["gpt2"], out["resnet50"]) == (1666.0, 3321.0)
    assert out["windows"] == {"gpt2": [2532.0, 1666.0, 1900.0], "resnet50": [4536.0, 3321.0, 5000.0]}
    assert rf.fastest_walls([out]) == {"gpt2": 1666.0, "resnet50": 3321.0}

    def broken(m, **kw):
        if m.name == "resnet50":
            raise RuntimeError("no compiler")
        return m
    monkeypatch.setattr(torch, "compile", broken)
    seq = iter([1500.0, 1400.0])
    out = rf.compiled_reference_walls("cpu", windows=2)
    assert out["gpt2"] == 1400.0 and "resnet50" not in out
    assert "no compiler" in out["failed"]["resnet50"]


def test_the_recorded_anatomy_in_units_of_a_trivial_call():
    """Lease ca's anatomy records: per call of each class in units of the same process's
    _reinterpret_tensor, an extern GEMM of the transformers lands in 13-18 units in every row
    whatever the unit's own speed (0.95-2.5 us): the composition is the model's, the unit the host's."""
    recs = anat.load("validation/results/h200/host/2026-11-28-compiled-anatomy.jsonl")
    assert len(recs) == 14
    units, gemm = [], []
    for r in recs:
        pc = anat.per_call(r)
        units.append(pc["unit"])
        if r["model"].startswith("hf:"):
            gemm.append(pc["addmm"] / pc["unit"])
    assert max(units) / min(units) > 2
    assert all(13 < g < 18 for g in gemm)
    assert "| hf:opus-mt-en-de | 1 | 2.11 |" in anat.units_markdown(recs)


def test_window_factors_compare_one_timing_a_round_with_the_fastest_window():
    from gpusim.hw.host import load_host
    from gpusim.hw.spec import load_spec
    from validation.score.compiled_forward import window_factors
    spec, host = load_spec("h200-sxm-calibrated"), load_host("h200-sxm-host")
    raw = {"compiled_reference_walls_rounds": [
        {"gpt2": 1666.0, "resnet50": 3321.0,
         "windows": {"gpt2": [2532.0, 1666.0, 1900.0], "resnet50": [4536.0, 3321.0, 5000.0]}},
        {"gpt2": 1700.0, "resnet50": 3500.0,
         "windows": {"gpt2": [1800.0, 1700.0, 1750.0], "resnet50": [3600.0, 3500.0, 3550.0]}}]}
    wf = window_factors(raw, spec, host)
    assert wf["first_window"] > wf["fastest_window"] > 0
    # the fastest window's factor is the one calibrate fits from the same walls
    from validation.measure.reference_forwards import fastest_walls, forward_factor
    assert wf["fastest_window"] == pytest.approx(forward_factor(
        fastest_walls(raw["compiled_reference_walls_rounds"]), spec,
        host.replace(compiled_forward_factor=None), mode="compiled")[0])
    assert window_factors({"compiled_reference_walls_rounds": [{"gpt2": 1.0}]}, spec, host) is None
