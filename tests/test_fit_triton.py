"""The Triton-kernel law (gpusim.cost.triton) and its fit (validation/fit/fit_triton.py) on a synthetic sweep."""

import dataclasses
import json

import pytest
import torch
from hypothesis import given, settings, strategies as st

import gpusim
from gpusim.cost.kernel import estimate_kernel
from gpusim.cost.triton import heavy_elements, looped_reduction
from gpusim.hw.schema import TRITON_FIGURES
from gpusim.hw.spec import load_spec
from gpusim.lower.lowering import Kernel
from validation.fit import fit_triton
from validation.measure.triton_cases import cases

BASE = dataclasses.replace(load_spec("h100-sxm-calibrated"), **{k: None for k in TRITON_FIGURES})
TRUE = dataclasses.replace(BASE, triton_mem_efficiency=0.85, triton_fixed_us=1.8, triton_min_us=2.2,
                           triton_red_efficiency=0.6, triton_erf_cycles=0.9, triton_tanh_cycles=0.7,
                           triton_exp_cycles=0.5, triton_sqrt_cycles=0.6, triton_div_cycles=0.8)


def _subset():
    """A few cases of every class the fit reads (the sweep has ~90)."""
    cs, seen = [], {}
    for c in cases():
        if seen.get(c["cls"], 0) < (6 if c["cls"] in ("poi", "chain") else 10 if c["cls"] == "math_heavy" else 2) or (
                c["cls"] == "red" and c["fn"] == "sum_rows" and seen["red"] < 4):
            seen[c["cls"]] = seen.get(c["cls"], 0) + 1
            cs.append(c)
    return cs


def _synthetic_sweep(path, spec):
    """A sweep whose 'measured' times are the law's on ``spec`` (a test fixture, not a GPU's)."""
    lines = [{"kind": "environment", "gpu_name": "synthetic", "utc": "2026-11-28T00:00:00"}]
    for c in _subset():
        g, ks = fit_triton.predicted_kernels(c, BASE)
        kern = []
        for i, k in enumerate(ks):
            red = any(g.g.nodes[n]["kind"] in ("reduction", "norm") for n in k.ops)
            cls = "red" if looped_reduction(g, k.ops, BASE) else ("per" if red else "poi")
            kern.append({"name": f"triton_{cls}_fused_{i}", "us": estimate_kernel(g, k, spec).us})
        lines.append(dict(c, kind="triton_case", kernels=kern))
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def test_fit_recovers_the_figures_of_a_synthetic_sweep(tmp_path):
    p = tmp_path / "sweep.jsonl"
    _synthetic_sweep(p, TRUE)
    env, cs = fit_triton.read_sweep(str(p))
    rows, unpaired = fit_triton.kernel_rows(cs, BASE)
    assert not unpaired
    figs = fit_triton.fit_stream(rows, BASE)
    figs.update(fit_triton.fit_rest(rows, BASE, figs))
    for k in TRITON_FIGURES:
        if k != "triton_l2_bandwidth_gbs":         # not fitted: the chains are too noisy
            assert figs[k] == pytest.approx(getattr(TRUE, k), rel=0.02), k


def test_without_figures_the_roofline_is_unchanged():
    g = gpusim.capture(lambda x: torch.nn.functional.gelu(x) * 2, (torch.empty(1 << 20, device="meta"),))
    k = Kernel(tuple(g.compute_nodes), "generated")
    from gpusim.cost.roofline import estimate_group
    assert estimate_kernel(g, k, BASE).us == estimate_group(g, k.ops, BASE).us


def test_heavy_elements_count_libdevice_calls():
    x = torch.empty(1000, device="meta")
    g = gpusim.capture(lambda x: torch.sigmoid(torch.erf(x)) + 1, (x,))
    assert heavy_elements(g, g.compute_nodes) == {"erf": 1000, "tanh": 0, "exp": 1000, "sqrt": 0, "div": 0}
    bn = gpusim.capture(lambda x, m, v: torch.nn.functional.batch_norm(x, m, v, training=False),
                        (torch.empty(2, 4, 5, 5, device="meta"), torch.empty(4, device="meta"),
                         torch.empty(4, device="meta")))
    assert heavy_elements(bn, bn.compute_nodes) == {"erf": 0, "tanh": 0, "exp": 0, "sqrt": 200, "div": 200}


@settings(max_examples=25, deadline=None)
@given(n=st.integers(10, 26), l2=st.floats(500, 20000), cycles=st.floats(0.01, 5))
def test_law_monotone(n, l2, cycles):
    """A faster L2 read or fewer cycles per heavy op never makes a kernel slower."""
    x = torch.empty(1 << n, device="meta", dtype=torch.bfloat16)
    g = gpusim.capture(lambda x: torch.tanh(x * 2) + x, (x,))
    k = Kernel(tuple(g.compute_nodes), "generated")
    s = dataclasses.replace(TRUE, triton_l2_bandwidth_gbs=l2, triton_tanh_cycles=cycles)
    assert estimate_kernel(g, k, dataclasses.replace(s, triton_l2_bandwidth_gbs=2 * l2)).us <= estimate_kernel(g, k, s).us
    assert estimate_kernel(g, k, dataclasses.replace(s, triton_tanh_cycles=cycles / 2)).us <= estimate_kernel(g, k, s).us
    assert estimate_kernel(g, k, s).us >= s.triton_min_us


def test_write_figures_replaces_only_the_triton_lines(tmp_path):
    p = tmp_path / "spec.toml"
    p.write_text('[model]\nmem_efficiency = 0.9\ntriton_min_us = { value = 1.0 }\n\n')
    fit_triton.write_figures(str(p), ['triton_min_us = { value = 2.0 }'])
    assert p.read_text() == '[model]\nmem_efficiency = 0.9\ntriton_min_us = { value = 2.0 }\n'
