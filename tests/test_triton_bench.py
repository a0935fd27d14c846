"""The Triton-kernel microbenchmark's cases (validation/measure/triton_cases.py) and the fit read them on a CPU."""

import pytest
import torch

import gpusim
from gpusim.hw.spec import load_spec
from gpusim.lower.reductions import channels_last
from gpusim.predict.pipeline import lower
from validation.measure.triton_cases import FUNCS, cases, make_inputs
from validation.score.triton_time import kernel_class

EXPECTED = {"poi": ["poi"], "poi_inputs": ["poi"], "poi_math": ["poi"], "bcast": ["poi"], "per": ["per"],
            "red": ["red"]}


def test_case_names_unique_and_classes_interleaved():
    cs = cases()
    assert len({c["case"] for c in cs}) == len(cs)
    # a run cut short still covers every class: each appears among the first len(classes) cases
    classes = {c["cls"] for c in cs}
    assert {c["cls"] for c in cs[:len(classes)]} == classes


@pytest.mark.parametrize("case", [c for c in cases() if c["shapes"][0][0] in (1 << 22, 4096, 32, 8192)][:12],
                         ids=lambda c: c["case"])
def test_cases_lower_to_their_class(case):
    """gpusim captures each case on meta tensors and lowers it to the Triton class it measures
    (a chain, split by a graph break on the GPU, is one graph here)."""
    spec = load_spec("h100-sxm-calibrated")
    g = gpusim.capture(FUNCS[case["fn"]], tuple(make_inputs(case, "meta")))
    got = [kernel_class(g, k, spec, channels_last(g)) for k in lower(g, "compiled", spec=spec).kernels]
    if case["cls"] in EXPECTED:
        assert got == EXPECTED[case["cls"]]
    assert got


def test_chain_is_two_graphs_on_the_gpu_one_for_gpusim():
    f = FUNCS["chain_scale_shift_softmax_rows"]
    assert f.stages == ("scale_shift", "softmax_rows")
    g = gpusim.capture(f, (torch.empty(64, 1024, device="meta", dtype=torch.bfloat16),))
    assert len(g.compute_nodes) == 3
