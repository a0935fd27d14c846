"""The host side of the simulation: host reads drain the stream, a library op's helper
kernels cost a launch, and `predict` names the fastest of eager / torch.compile / CUDA
graphs."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusim import capture, predict
from gpusim.cli import main
from gpusim.hardware import load_spec
from gpusim.predict import MODE_LABELS, modes_by_speed
from gpusim.simulate import is_sync, kernel_overhead_us

SPEC = load_spec("h100-sxm-calibrated")


def _checked(x):
    y = (x @ x) + 1
    if (y > 0).all():           # a host read of a device value: eager syncs here
        y = y * 2
    return y.relu()


def _unchecked(x):
    y = (x @ x) + 1
    y = y * 2
    return y.relu()


def _graph(fn, n):
    return capture(fn, (torch.empty(n, n, device="meta"),))


@settings(max_examples=6, deadline=None)
@given(st.sampled_from([64, 512, 2048, 4096]))
def test_sync_waits_for_the_stream_to_drain(n):
    p = predict(_graph(_checked, n), gpu=SPEC, mode="eager")
    syncs = [k for k in p.kernels if is_sync(k)]
    assert len(syncs) == 1 and len(p.timeline.syncs) == 1
    i = p.kernels.index(syncs[0])
    gpu_done = max(e.end_us for e in p.timeline.events if e.lane == "gpu" and e.kernel == i)
    # after the read, the host issues nothing before the GPU has finished the read's copy
    later = [e for e in p.timeline.events if e.lane == "host" and e.kernel is not None and e.kernel > i]
    assert min(e.start_us for e in later) >= gpu_done - 1e-6
    name, wait = p.timeline.syncs[0]
    assert wait >= 0
    if n >= 2048:   # a long GEMM before the read: the host really waits for it
        assert wait > 0.5 * p.kernels[0].us
        assert any(e.name.startswith("sync wait") for e in p.timeline.events)


def test_a_sync_never_makes_a_call_faster():
    for n in (64, 1024, 4096):
        with_sync = predict(_graph(_checked, n), gpu=SPEC, mode="eager")
        without = predict(_graph(_unchecked, n), gpu=SPEC, mode="eager")
        assert with_sync.end_to_end_us >= without.end_to_end_us


def test_helper_kernels_cost_a_launch_not_a_dispatch():
    g = capture(lambda x, w: torch.nn.functional.conv2d(x, w, padding=1),
                (torch.empty(8, 64, 56, 56, device="meta", dtype=torch.float16),
                 torch.empty(64, 64, 3, 3, device="meta", dtype=torch.float16)))
    p = predict(g, gpu=SPEC, mode="eager")
    aux = [k for k in p.kernels if k.role == "aux"]
    assert aux, "a half-precision NCHW conv runs cuDNN's layout transforms"
    for k in aux:
        assert kernel_overhead_us(k, SPEC, "eager") == SPEC.kernel_launch_us
    main_k = [k for k in p.kernels if k.role == "main"][0]
    assert kernel_overhead_us(main_k, SPEC, "eager") > SPEC.kernel_launch_us


def test_modes_ranked_fastest_first():
    g = _graph(_unchecked, 256)
    ranked = modes_by_speed(g, SPEC)
    assert sorted(m for m, _ in ranked) == sorted(MODE_LABELS)
    e2e = [p.end_to_end_us for _, p in ranked]
    assert e2e == sorted(e2e)
    eager = predict(g, gpu=SPEC, mode="eager")
    again = dict(modes_by_speed(g, SPEC, have=eager))
    assert again["eager"] is eager
    assert [p.end_to_end_us for _, p in modes_by_speed(g, SPEC, have=eager)] == e2e


def test_predict_prints_syncs_and_the_fastest_mode(capsys):
    assert main(["predict", "gelu_tanh", "--gpu", "h100-sxm-calibrated"]) == 0
    out = capsys.readouterr().out
    assert "fastest " in out and "host figures" in out
