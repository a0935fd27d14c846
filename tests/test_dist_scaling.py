"""Issue 33, scaling over one GPU: NCCL's SM share (gpusim.cost.collectives.kernel_channels / sm_share_factor, applied
by gpusim.sim.ranks), the host at N ranks (gpusim.hw.host.at_ranks), the records' decomposition
(validation/score/dist_scaling.py) and the two measurements' record writing on CPU."""

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpusim.cost import collectives as C
from gpusim.hw.host import NOT_RANK_SCALED, PYTHON_FIGURES, at_ranks, load_host
from gpusim.hw.links import link_spec
from gpusim.models.resolve import load_builder
from gpusim.predict.distributed import predict_distributed

NV = link_spec("nvlink4")
BUILDERS = Path(__file__).resolve().parent / "data" / "dist_builders.py"


def test_simple_channels_follow_nccls_rule():
    # Simple: one channel per 512 threads x 64 B; all 24 ring channels from 768 KiB (DDP's 25 MiB buckets)
    assert C.nccl_protocol("all_reduce", 25 << 20, 2, NV) == "simple"
    assert C.kernel_channels("all_reduce", 25 << 20, 2, NV) == 24
    assert C.kernel_channels("all_reduce", 25 << 20, 4, NV) == 24
    assert C.ring("all_reduce", 25 << 20, 4, NV, "h200").channels == 24
    # LL: the existing LL rule (1 channel for a few KiB)
    assert C.kernel_channels("all_reduce", 4096, 2, NV) == C.ll_channels(4096, 2, NV) == 1
    assert C.ring("all_reduce", 0, 2, NV).channels is None


def test_link_without_simple_rule_runs_simple_on_every_ring_channel():
    coll = {k: v for k, v in NV.nccl_coll.items() if not k.startswith("simple_")}
    bare = dataclasses.replace(NV, nccl_coll=coll)
    assert C.kernel_channels("all_reduce", 2 << 20, 2, bare) == coll["coll_channels"]
    assert C.kernel_channels("all_reduce", 2 << 20, 2, dataclasses.replace(NV, nccl_coll={})) is None


def test_sm_share_factor_is_sms_over_sms_left():
    assert C.sm_share_factor(24, 132) == pytest.approx(132 / 108)
    assert C.sm_share_factor(None, 132) == 1.0
    assert C.sm_share_factor(0, 132) == 1.0


@given(st.integers(1, 64), st.integers(1, 64), st.integers(80, 200))
def test_more_channels_never_slow_compute_less(a, b, sms):
    lo, hi = sorted((a, b))
    assert 1.0 <= C.sm_share_factor(lo, sms) <= C.sm_share_factor(hi, sms)


def test_host_at_ranks_scales_host_time_only():
    ref = load_host("reference")
    assert at_ranks(ref, 4) is ref                       # no figure: the host as it is
    h = ref.replace(ranks_host_factor=1.5)
    assert at_ranks(h, 1) is h                           # one rank: as it is
    two = at_ranks(h, 2)
    assert two.eager_op_us == pytest.approx(1.5 * h.eager_op_us)
    assert two.kernel_launch_us == pytest.approx(1.5 * h.kernel_launch_us)
    for k in NOT_RANK_SCALED:
        assert getattr(two, k) == getattr(h, k)
    assert two.eager_forward_factor == h.eager_forward_factor     # a ratio, not a time
    for k in PYTHON_FIGURES:                                          # no Python figure: the host factor
        assert getattr(two, k) == pytest.approx(1.5 * getattr(h, k))


def test_python_factor_prices_the_models_python_alone():
    h = load_host("reference").replace(ranks_python_factor=2.0)
    two = at_ranks(h, 4)
    for k in PYTHON_FIGURES:
        assert getattr(two, k) == pytest.approx(2.0 * getattr(h, k))
    assert two.eager_op_us == h.eager_op_us and two.kernel_launch_us == h.kernel_launch_us
    both = at_ranks(h.replace(ranks_host_factor=1.25), 2)
    assert both.eager_op_us == pytest.approx(1.25 * h.eager_op_us)
    assert both.python_torch_call_us == pytest.approx(2.0 * h.python_torch_call_us)


@pytest.fixture(scope="module")
def ddp2():
    return predict_distributed(load_builder(f"{BUILDERS}:ddp_mlp"), "h200", 2)


def test_ranks_factor_slows_the_ranks_not_world_one(ddp2):
    host = load_host("reference").replace(ranks_host_factor=2.0)
    slow = predict_distributed(load_builder(f"{BUILDERS}:ddp_mlp"), "h200", 2, host=host)
    assert slow.world1_step_us == pytest.approx(ddp2.world1_step_us)
    assert slow.synced_step_us > ddp2.synced_step_us


def test_overlap_factor_is_the_channel_law(ddp2):
    assert ddp2.overlap_factor == pytest.approx(132 / 108)
    assert ddp2.config["overlap_source"].startswith("law")
    assert ddp2.slowdown_us >= 0.0


def test_records_decomposition():
    from validation.score import dist_scaling as D
    assert D.is_tensor_core("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_TNT")
    assert D.is_tensor_core("sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16")
    assert not D.is_tensor_core("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16")
    assert not D.is_tensor_core("void at::native::batch_norm_backward_kernel<c10::BFloat16")
    rows = D.rows()
    assert len(rows) >= 10 and all(r["case"].startswith("ddp") and r["world"] >= 2 for r in rows)
    tc = [r["tc"] / r["tc_w1"] for r in rows if r.get("tc_w1", 0) > 1.0]
    assert tc and min(tc) > 1.2       # tensor-core kernels beside a resident NCCL kernel are slower in every record


def test_sm_share_dry_run_writes_every_case(tmp_path):
    from validation.measure import sm_share
    out = tmp_path / "s.jsonl"
    assert sm_share.main(["--dry-run", "--out", str(out)]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert recs[0]["kind"] == "environment"
    assert len(recs) - 1 == len(sm_share.cases()) * (len(sm_share.WAIT_BYTES) + 1)
    assert {r["mode"] for r in recs[1:]} == {"waiting", "busy"}


def test_host_ranks_summary_and_cpu_run(tmp_path, monkeypatch):
    from validation.measure import host_ranks
    s = host_ranks.summary([{k: [1.0, 2.0, 3.0] for k in host_ranks.FIGURES},
                            {k: [2.0, 4.0, 6.0] for k in host_ranks.FIGURES}])
    assert s["median"]["python_us"] == 3.0 and s["slowest"]["python_us"] == 4.0
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(host_ranks.time, "sleep", lambda s: None)
    out = tmp_path / "h.jsonl"
    assert host_ranks.main(["--device", "cpu", "--samples", "1", "--out", str(out)]) == 0
    rec = json.loads(out.read_text().splitlines()[0])
    assert rec["kind"] == "host_ranks" and rec["state"] == "no_comm" and rec["world"] == 1
    assert set(rec["median"]) == set(host_ranks.FIGURES)


def test_lease_hosts_python_factor_is_the_records_probe():
    """hosts/h200-sxm-host.toml's ranks_python_factor is what the records' probe gives (run6, run7), to the digit."""
    from validation.score.dist_scaling import python_factor
    f, many, one, files = python_factor()
    assert many > one > 0 and len(files) >= 2
    assert load_host("h200-sxm-host").ranks_python_factor == pytest.approx(f, abs=5e-4)


def test_fit_host_ranks_from_records(tmp_path):
    from validation.fit import host_ranks as F
    recs = []
    for world, py, op in ((1, 1500.0, 10.0), (2, 2400.0, 11.0), (4, 3000.0, 12.5)):
        fig = {"python_us": py, "eager_op_us": op, "eager_module_us": 1.0}
        recs.append({"kind": "host_ranks", "state": "nccl_live", "world": world, "slowest": fig, "median": fig})
        recs.append({"kind": "host_ranks", "state": "no_comm", "world": world, "slowest": fig, "median": fig})
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = F.fit(F.load([str(path)]))
    assert res["world"] == 4
    assert res["ranks_host_factor"] == pytest.approx(1.25)
    assert res["ranks_python_factor"] == pytest.approx(2.0)
    assert F.fit(F.load([str(path)])[:2])["ranks_host_factor"] is None     # one rank only: nothing to fit


def test_sm_share_law_against_the_microbenchmark():
    """On 2 H200s (run8): beside a waiting 24-channel all-reduce, tensor-core kernels' median slowdown is the law's
    SMs / (SMs - channels) within 5%; streaming adds do not miss the SMs (the sim gives them the bandwidth share)."""
    import statistics

    from validation.score.dist_scaling import law_factor, sm_share_rows
    rows = sm_share_rows()
    tc = [r["waiting_33554432"] for r in rows if r["tensor_core"]]
    assert len(tc) >= 5
    assert statistics.median(tc) == pytest.approx(law_factor(), rel=0.05)
    adds = [r["waiting_33554432"] for r in rows if r["compute"] == "add_fp32"]
    assert adds and all(abs(a - 1.0) < 0.03 for a in adds)
