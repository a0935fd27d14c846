"""The validation harness's GPU-independent parts, on CPU: executing a partition as
sub-modules, what torch.compile is predicted to run, and the calibration fit."""

import json
import os

import pytest
import torch

from validation.fit.calibrate import fit_spec
from gpusim.capture.tracing import capture_full
from gpusim.models.examples import build_example
from gpusim.hw.spec import load_spec
from gpusim.lower.lowering import realize
from gpusim.predict.pipeline import predict
from gpusim.fusion.search import search
from validation.measure.runner import _flat_inputs, _full_args, partitioned_callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("name,sizes", [
    ("lstm_cell", {"batch": 4, "inp": 16, "hidden": 16}),       # a group reads a later GEMM
    ("transformer_block", {"batch": 1, "seq": 8, "d": 32, "heads": 2}),
    ("gelu_tanh", {"n": 256}),
])
def test_partitions_run_as_submodules_compute_the_same_function(name, sizes):
    torch.manual_seed(0)
    fn, args = build_example(name, device="cpu", **sizes)
    cap = capture_full(fn, args, name=name)
    ref = fn(*args)
    ref = ref if isinstance(ref, (tuple, list)) else (ref,)
    for algo in ("greedy", "bytes", "exact"):
        res = search(cap.graph, gpu="h100", algo=algo, fold_bn=False)
        split, subs = partitioned_callable(cap, [list(g) for g in res.partition.groups],
                                           compile_groups=False)
        out = split(*_flat_inputs(_full_args(fn, args)))
        out = out if isinstance(out, (tuple, list)) else (out,)
        assert len(subs) == len(res.partition.groups)
        for o, r in zip(out, ref):
            torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-5)


def test_inductor_runs_gemms_extern_and_their_epilogue_apart():
    fn, args = build_example("matmul_sigmoid", m=64, n=64, k=64)
    cap = capture_full(fn, args)
    g = cap.graph
    mm, sig = g.compute_nodes
    assert [k.ops for k in realize(g, [mm, sig], "compiled")] == [(mm,), (sig,)]
    # one region entry for the group, but two kernels
    spec = load_spec("h200-sxm-calibrated")
    p = predict(g, gpu=spec, mode="compiled", partition=[[mm, sig]], regions=True)
    assert len(p.kernels) == 2
    p1 = predict(g, gpu=spec, mode="compiled", partition=[[mm], [sig]], regions=True)
    assert p1.end_to_end_us > p.end_to_end_us     # a second region costs a second entry


def test_calibration_fit_reproduces_the_committed_spec():
    raw_path = os.path.join(ROOT, "validation", "calibration", "h200-calibrate.raw.json")
    with open(raw_path) as f:
        raw = json.load(f)
    committed = load_spec("h200-sxm-calibrated")
    fitted, diag = fit_spec(raw, load_spec("h200-sxm"), name="h200-sxm-calibrated")
    for field in ("mem_efficiency", "kernel_min_us", "aten_strided_efficiency_16bit",
                  "matmul_efficiency", "gemm_min_us"):
        assert getattr(fitted, field) == pytest.approx(getattr(committed, field), rel=1e-9), field
    # the host's figures go to its host profile, not to the GPU spec
    from gpusim.hw.host import load_host
    host = load_host("h200-sxm-host")
    for field in ("eager_op_us", "compiled_kernel_us", "compiled_region_us", "compiled_input_us"):
        assert diag["host_changes"][field] == pytest.approx(getattr(host, field), rel=1e-9), field
