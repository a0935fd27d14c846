"""validation/measure/dist_run.py's host side of the profiled step (host_phases), on a real CPU profile: torch's own
event names, so a rename in torch fails here rather than on a GPU lease."""

import torch
from torch.profiler import ProfilerActivity, profile

from validation.measure.dist_run import chrome_trace, host_phases


def test_host_phases_split_forward_and_backward_on_a_real_profile():
    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])
    x = torch.randn(8, 16)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(x).sum().backward()
    h = host_phases(chrome_trace(prof))
    assert h["backward_nodes"] >= 8            # 4 addmm + sum's backward + accumulations, one node each at least
    assert h["forward_host_us"] > 0 and h["backward_host_us"] > 0
    # each figure is rounded to 0.1 us on its own, so the two phases' sum may exceed the rounded step by 0.1
    assert h["step_host_us"] >= h["forward_host_us"] + h["backward_host_us"] - 0.1 - 1e-9
    assert h["forward_launches"] == h["backward_launches"] == 0     # no CUDA here


def test_host_phases_counts_launches_by_phase():
    ev = lambda name, cat, ts, dur=1.0: {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur}  # noqa: E731
    trace = {"traceEvents": [ev("aten::mm", "cpu_op", 0.0, 5.0), ev("cudaLaunchKernel", "cuda_runtime", 2.0),
                             ev("autograd::engine::evaluate_function: MmBackward0", "cpu_op", 10.0, 8.0),
                             ev("cudaLaunchKernel", "cuda_runtime", 12.0), ev("cuLaunchKernelEx", "cuda_runtime", 14.0),
                             ev("aten::_foreach_add_", "cpu_op", 30.0, 2.0), ev("cudaLaunchKernel", "cuda_runtime", 31.0)]}
    assert host_phases(trace) == {"forward_host_us": 10.0, "forward_launches": 1, "backward_host_us": 8.0,
                                  "backward_launches": 2, "backward_nodes": 1, "step_host_us": 32.0}
    assert host_phases({"traceEvents": []}) == {}
