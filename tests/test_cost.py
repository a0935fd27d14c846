"""Cost model and simulation: seed arithmetic and invariants (hypothesis)."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusim.capture.tracing import capture
from gpusim.cost.roofline import estimate_group, quantisation_efficiency
from gpusim.graph.opgraph import GraphBuilder
from gpusim.hw.spec import load_spec
from gpusim.predict.pipeline import predict
from gpusim.sim.timeline import simulate

H100 = load_spec("h100")
SPECS = ["a100", "a100-sxm4-40gb", "v100", "rtx3090", "rtx3090ti", "rtx-a6000", "h100", "h200"]


def test_seed_3090ti_add_rate():
    """x + 2 on 2^28 float32 elements: 8 bytes per element over 1008 GB/s = 126 G elem/s
    at peak; the model must land at or just below it."""
    n = 1 << 28
    p = predict(lambda x: x + 2, (torch.empty(n, device="meta"),), gpu="rtx3090ti")
    rate = n / (p.device_us * 1e-6)
    assert 0.85 * 126e9 <= rate <= 126e9


def test_seed_fusion_ratio_large():
    """x+b -> relu -> *s: 7 tensor-sizes eager, 3 fused; at 2^27 elements the device
    speed-up approaches 7/3."""
    from gpusim.fusion.search import search
    n = 1 << 27
    x = torch.empty(n, device="meta")
    r = search(lambda x, b: torch.relu(x + b) * 3.0, (x, x.clone()), gpu="h100", algo="exact")
    assert r.unfused.bytes == 7 * 4 * n and r.fused.bytes == 3 * 4 * n
    # fixed per-kernel costs push it a little past 7/3 (the H100 measured 2.38x)
    assert 2.2 < r.speedup_device < 2.5


def test_small_kernels_are_latency_bound():
    p = predict(lambda x: x + 2, (torch.empty(1024, device="meta"),), gpu="h100")
    assert p.kernels[0].bound == "latency"
    assert p.kernels[0].us == pytest.approx(max(H100.kernel_min_us, H100.kernel_fixed_us), rel=0.05)


def test_big_matmul_is_compute_bound_on_tensor_cores():
    a = torch.empty(8192, 8192, device="meta", dtype=torch.float16)
    p = predict(torch.mm, (a, a), gpu="h100")
    k = p.kernels[0]
    assert k.bound == "compute" and k.unit == "fp16_tc"
    tflops = k.flops / k.us / 1e6
    assert 0.4 * 989 < tflops < 989
    p32 = predict(torch.mm, (a.float(), a.float()), gpu="h100")
    assert p32.kernels[0].unit == "fp32"      # TF32 is off by default in PyTorch


def test_wave_quantisation():
    full = {"m": 128 * 132, "n": 128, "k": 4096, "b": 1}
    one_more = {"m": 128 * 133, "n": 128, "k": 4096, "b": 1}
    assert quantisation_efficiency(full, H100) == pytest.approx(1.0)
    assert quantisation_efficiency(one_more, H100) == pytest.approx(133 / 264)


def test_every_spec_predicts():
    for s in SPECS:
        p = predict(lambda x: torch.relu(x) @ x, (torch.empty(512, 512, device="meta"),), gpu=s)
        assert p.device_us > 0 and p.end_to_end_us >= p.device_us - 1e-9


def _chain(n_elems, k=3):
    b = GraphBuilder()
    prev = b.input("x", (n_elems,))
    for i in range(k):
        prev = b.op(f"p{i}", "pointwise", [prev])
    b.output(prev)
    return b.build()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(6, 30), st.floats(1.01, 4.0), st.sampled_from(["bandwidth", "flops", "l2"]),
       st.sampled_from(["eager", "compiled", "cudagraph"]), st.booleans())
def test_more_bandwidth_or_flops_never_slower(log2n, factor, what, mode, matmul):
    n = 1 << log2n
    if matmul:
        m = max(16, int(n ** 0.5))
        b = GraphBuilder()
        x = b.input("x", (m, m))
        y = b.matmul("mm", x, x, m, m, m)
        b.output(b.op("act", "pointwise", [y]))
        g = b.build()
    else:
        g = _chain(n)
    base = H100
    if what == "bandwidth":
        faster = base.replace(bandwidth_gbs=base.bandwidth_gbs * factor)
    elif what == "l2":
        faster = base.replace(l2_bandwidth_gbs=base.l2_bandwidth_gbs * factor)
    else:
        faster = base.replace(peak_tflops={k: v * factor for k, v in base.peak_tflops.items()})
    p0, p1 = predict(g, gpu=base, mode=mode), predict(g, gpu=faster, mode=mode)
    assert p1.device_us <= p0.device_us + 1e-9
    assert p1.end_to_end_us <= p0.end_to_end_us + 1e-9
    assert all(k.us >= 0 for k in p1.kernels) and p1.end_to_end_us >= 0


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 6), st.integers(4, 24))
def test_views_cost_nothing(n_views, log2n):
    x = torch.empty(1 << log2n, device="meta")

    def f(x):
        y = x + 1
        for i in range(n_views):
            y = y.view(-1, 2) if i % 2 == 0 else y.reshape(-1)
        return y.unsqueeze(0).squeeze(0)
    g = capture(f, (x,))
    assert len(g.compute_nodes) == 1
    assert all(g.node(v)["bytes_read"] == 0 == g.node(v)["flops"] for v in g.view_nodes)
    p = predict(g, gpu="h100", mode="compiled")
    q = predict(lambda x: x + 1, (x,), gpu="h100", mode="compiled")
    assert p.device_us == q.device_us


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.5, 500), min_size=1, max_size=30),
       st.sampled_from(["eager", "compiled", "cudagraph"]))
def test_simulation_bounds(durations, mode):
    b = GraphBuilder()
    prev = b.input("x", (1,))
    for i in range(len(durations)):
        prev = b.op(f"p{i}", "pointwise", [prev])
    g = b.build()
    ks = [estimate_group(g, [n], H100) for n in g.compute_nodes]
    ks = [k.__class__(**{**k.__dict__, "us": d}) for k, d in zip(ks, durations)]
    tl = simulate(ks, H100, mode)
    assert tl.device_us == pytest.approx(sum(durations))
    # a call can never be faster than its GPU work or its host work
    assert tl.end_to_end_us >= max(tl.device_us, tl.host_us) - 1e-6
    assert tl.idle_us >= 0 and tl.latency_us >= tl.device_us


def test_l2_resident_intermediate_is_cheaper_to_read():
    small = _chain(1 << 20, 2)      # 4 MiB: fits in L2
    k_small = estimate_group(small, ["p1"], H100)
    assert k_small.bytes_read_l2 == 4 << 20
    big = _chain(1 << 28, 2)        # 1 GiB: does not
    assert estimate_group(big, ["p1"], H100).bytes_read_l2 == 0


def test_register_pressure_makes_very_large_fusion_cost_more():
    """Past the measured range, each extra boundary tensor or op slows a fused kernel, so
    unbounded fusion is not free; inside it (what the H200 records cover) nothing changes."""
    from gpusim.cost.roofline import estimate_group, register_pressure
    from gpusim.graph.opgraph import GraphBuilder
    from gpusim.hw.spec import load_spec
    assert register_pressure(9, 10) == 1.0 and register_pressure(1, 40) == 1.0
    assert register_pressure(20, 10) > 1.0 and register_pressure(5, 14) > register_pressure(5, 12)
    spec = load_spec("h100")
    b = GraphBuilder()
    xs = [b.input(f"x{i}", (1 << 20,)) for i in range(14)]
    acc = b.op("a0", "pointwise", [xs[0], xs[1]])
    for i in range(2, 14):
        acc = b.op(f"a{i - 1}", "pointwise", [acc, xs[i]])
    b.output(acc)
    g = b.build()
    k = estimate_group(g, g.compute_nodes, spec)
    # 14 inputs + 1 output cross the boundary: 5 past the free range
    assert k.us > (k.mem_us + k.fixed_us) * 1.2
