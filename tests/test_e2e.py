"""End to end on real leases (issue #13): which host calibration belongs to which zoo
record, a lease's host profile beside a GPU's spec, and the stream's steady state
(``stream_busy_factor``: measured by ``calibrate``, a GPU figure applied by the simulation)."""

import json
import os

import torch

from gpusim import capture, predict
from validation.fit.calibrate import fit_host
from gpusim.hw.spec import calibrated_name, load_spec
from gpusim.hw.host import FIELDS, load_host
from validation.score.zoo_accuracy import lease_host, lease_setup, load_zoo_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "validation", "results")
LEASE3 = {g: os.path.join(RESULTS, g, "host", "2026-11-23-lease3.toml") for g in ("h100", "h200")}


def test_each_compiled_record_gets_its_own_leases_host_figures():
    for gpu, toml in LEASE3.items():
        recs = load_zoo_records(RESULTS, gpu)
        compiled = [r for r in recs if r["run"] != "eager"]
        assert compiled
        # device_compiled.sh: calibrate --host-only, then every compiled record of the lease
        assert {lease_host(RESULTS, gpu, r) for r in compiled} == {toml}
        # the eager zoo leases ran no host calibration: none is borrowed from a later lease
        assert all(lease_host(RESULTS, gpu, r) is None for r in recs if r["run"] == "eager")


def test_a_record_before_any_calibration_or_long_after_gets_none():
    rec = {"env": {"utc": "2026-11-23T14:10:00+00:00"}}      # before the H100 lease-3 one
    assert lease_host(RESULTS, "h100", rec) is None
    rec = {"env": {"utc": "2026-11-23T17:00:00+00:00"}}      # hours after lease 5's
    assert lease_host(RESULTS, "h100", rec) is None
    assert lease_host(RESULTS, "h100", {}) is None


def test_a_lease_is_predicted_with_its_host_profile_and_the_gpus_spec():
    gpu = load_spec(calibrated_name("h200"))
    s, host = lease_setup(gpu, LEASE3["h200"])
    assert s == gpu                                           # lease 3 measured no stream figure
    assert host.eager_op_us != load_host().eager_op_us        # the lease's host is not the reference
    lease = load_host(LEASE3["h200"])
    kind = load_host("h200-sxm-host")
    for k in FIELDS:    # what the lease measured, else its machine kind's figure
        assert getattr(host, k) == (getattr(lease, k) if getattr(lease, k) is not None
                                    else getattr(kind, k)), k
    # lease 3 timed no reference forwards: it borrows its machine kind's factor
    assert lease.eager_forward_factor is None
    assert host.eager_forward_factor == kind.eager_forward_factor
    big, _ = _two_cases()
    a = predict(big, gpu=gpu, mode="eager", host=host)
    assert a.host is host and a.spec is gpu
    # a later lease measured the GPU's steady state beside its host: the lab applies it
    later = os.path.join(RESULTS, "h200", "host", "2026-11-24-lease4.toml")
    s4, h4 = lease_setup(gpu, later)
    assert s4.stream_busy_factor > 1.0 and s4.mem_efficiency == gpu.mem_efficiency
    assert not hasattr(h4, "stream_busy_factor")


def _two_cases():
    big = capture(lambda a, b: torch.relu(a @ b),
                  (torch.empty(4096, 4096, device="meta"), torch.empty(4096, 4096, device="meta")))
    tiny = capture(lambda x: torch.relu(x + 1), (torch.empty(16, device="meta"),))
    return big, tiny


def test_stream_busy_factor_stretches_the_gpu_lane_not_the_kernel_sum():
    spec = load_spec(calibrated_name("h100"))
    busy = spec.replace(stream_busy_factor=1.05)
    big, tiny = _two_cases()
    for mode in ("eager", "compiled", "cudagraph"):
        a, b = predict(big, gpu=spec, mode=mode), predict(big, gpu=busy, mode=mode)
        assert b.device_us == a.device_us                       # what the profiler sums
        assert b.end_to_end_us > a.end_to_end_us                 # device-bound: 5% longer
        assert abs(b.end_to_end_us - a.end_to_end_us - 0.05 * a.device_us) < 0.01 * a.device_us
        # host-bound: the host, not the stream, sets the pace
        t0, t1 = predict(tiny, gpu=spec, mode=mode), predict(tiny, gpu=busy, mode=mode)
        if mode != "cudagraph":
            assert abs(t1.end_to_end_us - t0.end_to_end_us) < 1e-6


def test_fit_host_reads_the_stream_microbenchmark():
    with open(LEASE3["h100"] + ".raw.json") as f:
        raw = json.load(f)["host"]                       # a real lease's host timings
    out, diag = fit_host(raw, 1.28)
    assert "stream_busy_factor" not in diag             # lease 3 predates the benchmark
    out, diag = fit_host(dict(raw, stream={"kernels": 64, "kernel_sum_us": 1000.0,
                                           "wall_us": 1052.0}), 1.28)
    # a GPU figure: the diagnostics carry it to the GPU spec, never to the host profile
    assert "stream_busy_factor" not in out and set(out) <= set(FIELDS)
    assert abs(diag["stream_busy_factor"] - 1.052) < 1e-9 and diag["stream"]["kernels"] == 64
    out, diag = fit_host(dict(raw, stream={"kernels": 64, "kernel_sum_us": 1000.0,
                                           "wall_us": 990.0}), 1.28)
    assert diag["stream_busy_factor"] == 1.0            # never faster than the kernels
