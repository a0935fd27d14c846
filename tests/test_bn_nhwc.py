"""Channels-last training batch norm: the kernels eager dispatch emits per layout and dtype, and their
fitted law, checked on the H100 ``bn_train`` sweep's profiler lists
(validation/results/h100/bn_train.json)."""

from __future__ import annotations

import json
import os
import statistics

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import gpusim
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.lower.dispatch_train import bn_nhwc_grid
from validation.fit.fit_bn_nhwc import KERNEL_NAMES, point_lowering

SWEEP = os.path.join(os.path.dirname(__file__), "..", "validation", "results", "h100", "bn_train.json")


def _cl_points(dtypes=("bfloat16", "float32")):
    with open(SWEEP) as f:
        pts = json.load(f)["sweeps"]["bn_train"]
    return [p for p in pts if p["layout"] == "channels_last" and p["dtype"] in dtypes]


def _step(channels_last: bool, amp: bool):
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32),
                                torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(32, 10)).to("meta", memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lf = torch.nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = lf(model(x), y)
        loss.backward()
        opt.step()
    x = torch.empty(8, 16, 28, 28, device="meta").to(memory_format=fmt)
    return step, (x, torch.zeros(8, dtype=torch.long, device="meta"))


@pytest.mark.parametrize("channels_last,amp,variants", [
    (True, True, ["", "bn_nhwc_stats", "", "bn_nhwc_transform", "", "bn_nhwc_reduce", "bn_nhwc_elemt"]),
    (True, False, ["bn_nhwc_fw", "bn_nhwc_bw"]),
    (False, True, ["bn_train", "bn_train", "bn_train", "bn_backward"]),
    (False, False, ["bn_train", "bn_backward"]),
])
def test_training_batch_norm_kernels_follow_layout_and_dtype(channels_last, amp, variants):
    """A channels-last step's batch norm runs ATen's channels-last kernels under bf16 autocast (8 x
    28 x 28 rows: a grid reduction, so a semaphore fill before the statistics and before the
    backward reduce) and cuDNN's NHWC kernels in fp32; an NCHW step keeps the NCHW classes."""
    p = gpusim.predict(*_step(channels_last, amp), gpu="h100")
    g = p.graph.g
    got = [k.variant for k in p.lowering.kernels if "batch_norm" in g.nodes[k.ops[0]]["op"]]
    assert got == variants


def test_nhwc_kernels_match_the_profiler_lists_and_the_fitted_law_prices_them():
    """Every channels-last point of the sweep: gpusim's batch-norm kernels are the profiler's, one
    for one (the harness's three gradient-accumulation adds aside), the semaphore fills included
    exactly where ATen's launch configuration reduces over 8 or more grid rows; and the H100
    calibrated spec's bn_nhwc figures (validation/fit/fit_bn_nhwc.py) price each of the six
    kernel classes within 15% median."""
    spec = load_spec(calibrated_name("h100"))
    errs: dict = {}
    for p in _cl_points():
        measured = [m for m in p["kernels"] if "CUDAFunctor_add" not in m["name"]]
        n, c = p["shape"][0] * p["shape"][2] * p["shape"][3], p["shape"][1]
        fills = sum("FillFunctor" in m["name"] for m in measured)
        assert fills == (2 if p["dtype"] == "bfloat16" and bn_nhwc_grid(n, c, True)[1] > 1 else 0), p["shape"]
        assert len(measured) == (2 if p["dtype"] == "float32" else 5 + fills), p["shape"]
        for k, est in point_lowering(p, spec):
            meas = next(m["us"] for m in measured if KERNEL_NAMES[k.variant] in m["name"])
            errs.setdefault(k.variant, []).append(abs(est.us / meas - 1))
    assert len(errs) == 6
    for cls, e in errs.items():
        assert statistics.median(e) < 0.15, cls


@given(st.integers(1, 1 << 22), st.integers(1, 4096), st.booleans())
def test_nhwc_grid_is_atens_launch_config(reduction, channels, coop):
    """512-thread blocks, rows a power of two, at most 128 grid rows, the rows covered at 16 a
    thread or fewer unless the grid is capped; a cooperative kernel reduces over the grid only
    from 8 rows."""
    by, gy = bn_nhwc_grid(reduction, channels, coop)
    assert by & (by - 1) == 0 and 1 <= gy <= 128
    assert by * min(1 << (channels.bit_length() - 1), 32) <= 512
    if coop and gy == 1:
        assert -(-reduction // (by * 16)) < 8
    if gy < 128 and gy > 1:
        assert by * gy * 16 >= reduction


# ------------------------------------------------------------------ compiled steps: layout copies


def _compiled_step():
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32),
                                torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(32, 10)).to("meta")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lf = torch.nn.CrossEntropyLoss()

    def step(x, y, amp):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = lf(model(x), y)
        loss.backward()
        opt.step()
    return step, (torch.empty(8, 16, 28, 28, device="meta"), torch.zeros(8, dtype=torch.long, device="meta"))


@pytest.mark.parametrize("amp", [True, False])
def test_compiled_step_copies_weights_only_in_forward_and_not_past_a_cast(amp):
    """Inductor's layout copies: a backward convolution reads the NHWC weight the forward graph
    converted and saved (H100 compiled ResNet-50 steps: no copy kernel in backward); under
    autocast the weight's cast writes it channels-last (56 ``triton_poi_fused__to_copy`` and no
    ``triton_poi_fused_convolution`` in the bf16 forward; fp32: 18 such copies, the image and 17
    filters)."""
    step, args = _compiled_step()
    p = gpusim.predict(lambda x, y: step(x, y, amp), args, gpu="h100", mode="compiled")
    g = p.graph.g
    copies = [g.nodes[k.ops[0]].get("phase") for k in p.lowering.kernels
              if k.impl == "generated" and k.role == "aux" and g.nodes[k.ops[0]]["kind"] == "conv"]
    assert "backward" not in copies
    assert copies == ([] if amp else ["forward"] * 3)      # fp32: the image and two 3x3 weights
