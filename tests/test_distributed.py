"""Across GPUs: capture from the user's own builder under the fake process group (gpusim.capture.distributed), what
DDP and FSDP2 launch (gpusim.lower.distributed), one rank's two streams (gpusim.sim.ranks), memory per rank
(gpusim.sim.rank_memory), the API and the CLI. Small models: seconds, not minutes."""

import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

import gpusim
from gpusim.capture.distributed import capture_distributed
from gpusim.cli.commands import main
from gpusim.lower.distributed import assign_buckets
from gpusim.models.resolve import load_builder
from gpusim.predict.distributed import DistPrediction, predict_distributed
from gpusim.util.errors import GpusimError

BUILDERS = Path(__file__).resolve().parent / "data" / "dist_builders.py"


def builder(name):
    return load_builder(f"{BUILDERS}:{name}")


@pytest.fixture(scope="module")
def ddp4():
    return predict_distributed(builder("ddp_mlp"), "h100", 4)


@pytest.fixture(scope="module")
def fsdp4():
    return predict_distributed(builder("fsdp_mlp"), "h100", 4)


# ------------------------------------------------------------------ buckets


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.sampled_from(["float32", "bfloat16"])), min_size=1, max_size=40),
       st.integers(1, 4000), st.integers(1, 20000))
def test_buckets_cover_every_parameter_once_and_respect_caps(params, first, cap):
    ps = [(f"p{i}", b, d) for i, (b, d) in enumerate(params)]
    buckets = assign_buckets(ps, [first, cap])
    keys = [k for b in buckets for k in b[0]]
    assert sorted(keys) == sorted(k for k, _, _ in ps)                      # each parameter once
    size = {k: b for k, b, _ in ps}
    dtype = {k: d for k, _, d in ps}
    for keys_, nbytes, dt in buckets:
        assert {dtype[k] for k in keys_} == {dt}                             # one dtype per bucket
        assert nbytes == sum(size[k] for k in keys_)
        # a bucket closes at the first parameter that takes it to its cap: without its last one it was below
        assert nbytes - size[keys_[-1]] < max(first, cap)
    order = {k: i for i, (k, _, _) in enumerate(ps)}
    for keys_, _, _ in buckets:                                              # buckets keep the walk's order
        assert [order[k] for k in keys_] == sorted(order[k] for k in keys_)


def test_first_bucket_is_small_then_the_cap():
    ps = [(f"p{i}", 600_000, "float32") for i in range(100)]
    buckets = assign_buckets(ps, [1 << 20, 25 << 20])
    assert len(buckets[0][0]) == 2 and buckets[0][1] >= 1 << 20
    assert all(b[1] >= 25 << 20 for b in buckets[1:-1])


# ------------------------------------------------------------------ capture


def test_ddp_capture_records_config_and_undoes_patches():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    set_device = torch.cuda.set_device
    cap, cfg = capture_distributed(builder("ddp_mlp"), 4)
    assert cfg.strategy == "ddp" and cfg.world == 4
    assert cfg.ddp["bucket_cap_mb"] == 25 and cfg.ddp["first_bucket_bytes"] == 1 << 20
    assert not cfg.ddp["gradient_as_bucket_view"] and not cfg.ddp["no_sync"]
    assert len(cfg.ddp_params) == 18
    assert set(cap.graph.meta["grad_of"]) == {k for k, _, _ in cfg.ddp_params}
    assert "__new__" not in vars(DistributedDataParallel)
    assert torch.cuda.set_device is set_device and not dist.is_initialized()
    assert not torch.cuda.is_available() or torch.cuda.device_count() > 0


def test_no_sync_is_recorded():
    _, cfg = capture_distributed(builder("ddp_accumulate"), 2)
    assert cfg.ddp["no_sync"]


def test_fsdp_units_and_bf16_compute():
    cap, cfg = capture_distributed(builder("fsdp_mlp"), 4)
    assert cfg.strategy == "fsdp" and len(cfg.units) == 5
    root = [u for u in cfg.units if u.is_root]
    assert len(root) == 1 and not root[0].reshard_after_forward
    assert all(u.reshard_after_forward for u in cfg.units if not u.is_root)
    assert {(u.param_dtype, u.reduce_dtype, u.master_dtype) for u in cfg.units} == {("bfloat16", "float32", "float32")}
    mms = [a for _, a in cap.graph.g.nodes(data=True) if a["kind"] == "matmul"]
    assert mms and all(a["dtype"] == "bfloat16" for a in mms)               # FSDP's bf16 compute
    assert sum(len(u.params) for u in cfg.units) == 18
    assert cfg.hook_calls > 100                  # FSDP2's hooks, counted on stand-in units


def test_fsdp_hook_calls_grow_with_units_and_parameters():
    from gpusim.capture.distributed import FSDPUnit, fake_world, fsdp_hook_calls

    def units(k, params):
        return [FSDPUnit("<root>", [("r", 1, 1, "float32")] * 2, "bfloat16", "float32", "float32", False, True)] + [
            FSDPUnit(str(i), [(f"{i}.{j}", 1, 1, "float32") for j in range(params)], "bfloat16", "float32",
                     "float32", True, False) for i in range(k)]
    with fake_world(2):
        few, more, wider = (fsdp_hook_calls(units(2, 4), 2), fsdp_hook_calls(units(4, 4), 2),
                            fsdp_hook_calls(units(4, 8), 2))
    assert 0 < few < more < wider


def test_users_own_group_is_left_alone():
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        _, cfg = capture_distributed(builder("ddp_mlp"), 2)
        assert cfg.world == 2 and dist.is_initialized()
        with pytest.raises(GpusimError, match="initialised already"):
            capture_distributed(builder("ddp_mlp"), 4)
    finally:
        dist.destroy_process_group()


def test_failing_builder_is_one_line():
    with pytest.raises(GpusimError, match="builder failed.*no GPU here"):
        capture_distributed(builder("broken"), 2)


# ------------------------------------------------------------------ plans and timelines


def test_ddp_plan_counts(ddp4):
    plan = ddp4.plan
    ars = [op for op in plan.ops if op.kind == "all_reduce"]
    assert len(ars) == len(plan.buckets) >= 2
    copies = [op for op in plan.ops if op.kind == "copy"]
    assert len(copies) == 2 * 18                      # into the bucket (x 1/N), back to the gradient
    assert ddp4.comm_us > 0 and math.isclose(ddp4.comm_us, ddp4.exposed_comm_us + ddp4.hidden_comm_us)
    view = predict_distributed(builder("ddp_mlp_view"), "h100", 4, world1=False)
    assert sum(op.kind == "copy" for op in view.plan.ops) == 18
    assert len(view.plan.buckets) > len(plan.buckets)    # bucket_cap_mb=1


def test_fsdp_plan_counts(fsdp4):
    ops = fsdp4.plan.ops
    gathers = [op for op in ops if op.kind == "all_gather"]
    assert len(gathers) == 5 + 4                      # every unit before forward, the resharded ones before backward
    assert sum(op.kind == "reduce_scatter" for op in ops) == 5
    assert fsdp4.plan.scale and all(math.isclose(f, 2 / 4) for f in fsdp4.plan.scale.values())
    keep = predict_distributed(builder("fsdp_mlp_keep"), "h100", 4, world1=False)
    assert sum(op.kind == "all_gather" for op in keep.plan.ops) == 5


@pytest.mark.parametrize("name", ["ddp_mlp", "fsdp_mlp"])
def test_comm_grows_with_world(name):
    comm = [predict_distributed(builder(name), "h100", n, world1=False).comm_us for n in (1, 2, 4, 8)]
    assert comm[0] == 0.0
    assert all(a < b for a, b in zip(comm[1:], comm[2:]))


def test_fsdp_memory_per_rank_shards():
    preds = {n: predict_distributed(builder("fsdp_mlp"), "h100", n, world1=False) for n in (2, 4, 8)}
    units = preds[2].plan.units
    master = sum(u["master_bytes"] for u in units)
    # parameters (and AdamW's two states) are 1/N: the peak falls by about their share
    drop = preds[2].peak_bytes - preds[8].peak_bytes
    assert drop > 0.5 * 3 * master * (1 / 2 - 1 / 8)


def test_prediction_is_plain_numbers_and_traces_both_streams(ddp4):
    d = ddp4.to_dict()
    json.dumps(d)
    for k, v in d.items():
        if k != "config":
            assert v is None or isinstance(v, (int, float, str, bool)), k
    assert ddp4.world1_step_us > 0 and ddp4.scaling >= 1.0
    tids = {e.get("tid") for e in ddp4.trace()["traceEvents"] if e["ph"] == "X"}
    assert {1, 2} <= tids


@pytest.mark.parametrize("fixture", ["ddp4", "fsdp4"])
def test_synchronised_step_is_never_shorter_than_back_to_back(fixture, request):
    p = request.getfixturevalue(fixture)
    assert p.synced_step_us >= p.step_us - 1e-6
    assert p.to_dict()["synced_step_us"] == p.synced_step_us == p.rank.span_us


def test_synchronised_step_pays_the_host_lead_and_the_gpu_drain():
    """A host-bound forward (100 tiny ops) before a device-bound GEMM and its backward: back to back, the next
    step's forward is issued while this one's GEMMs run (about max(host, device)); synchronised each step (as
    validation/measure/dist_run.py times it), the host's forward and the GEMMs follow one another."""
    p = predict_distributed(builder("ddp_python_then_gemm"), "h100", 1, world1=False)
    host, device = p.single.timeline.host_us, p.single.timeline.device_us
    assert p.step_us < 1.2 * max(host, device)
    assert p.synced_step_us > max(host, device) + 0.5 * min(host, device)


def test_api_front_door():
    p = gpusim.predict(builder("plain_mlp"), gpu="h100", nproc_per_node=2)
    assert isinstance(p, DistPrediction) and p.strategy == "none" and p.comm_us == 0.0
    with pytest.raises(GpusimError, match="builder"):
        gpusim.predict(builder("plain_mlp"), (1,), gpu="h100", nproc_per_node=2)


def test_nnodes_uses_hierarchical_collectives():
    p = predict_distributed(builder("ddp_mlp"), "h100", 2, 2, world1=False)
    assert p.rank.collectives and all(c.algorithm == "hierarchical ring" for c in p.rank.collectives)
    one = predict_distributed(builder("ddp_mlp"), "h100", 4, 1, world1=False)
    assert p.comm_us > one.comm_us                     # InfiniBand between hosts is slower than NVLink


# ------------------------------------------------------------------ CLI


def test_cli_builder_and_trace(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["predict", f"{BUILDERS}:fsdp_mlp", "--nproc-per-node", "2", "--trace", str(out)]) == 0
    text = capsys.readouterr().out
    assert "FSDP on 2 GPUs" in text and "exposed" in text and "memory per rank" in text
    assert json.loads(out.read_text())["traceEvents"]


def test_cli_max_batch_prints_the_step_and_the_batch(tmp_path, capsys):
    """One command gives the step (compute, exposed communication, host, memory per rank, fits) and
    the largest batch per rank, and writes the trace: the issue's "done when" line (on a GPU of 1.5 GiB
    and a small model, to keep the search's captures few and quick)."""
    spec = Path(__file__).resolve().parents[1] / "hwspecs" / "h100-sxm.toml"
    small = tmp_path / "small.toml"
    small.write_text(spec.read_text().replace("capacity_gib = { value = 80.0", "capacity_gib = { value = 1.5"))
    out = tmp_path / "t.json"
    argv = ["predict", "tv:alexnet", "--train", "--ddp", "--nproc-per-node", "2", "--gpu", str(small),
            "--max-batch", "--trace", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    for word in ("step time", "exposed", "host", "memory per rank", "max batch"):
        assert word in text, word
    batch = int(text.split("max batch")[1].split()[0])
    assert batch >= 2
    assert json.loads(out.read_text())["traceEvents"]


@pytest.mark.parametrize("argv, msg", [
    (["predict", "tv:resnet18", "--ddp", "--nproc-per-node", "2"], "add --train"),
    (["predict", f"{BUILDERS}:ddp_mlp", "--nproc-per-node", "0"], ">= 1"),
    (["predict", f"{BUILDERS}:ddp_mlp", "--nproc-per-node", "2", "--gpu", "rtx3090ti"], "--link"),
    (["predict", "tv:resnet18", "--train", "--nproc-per-node", "2"], "--ddp or --fsdp"),
    (["predict", "tv:resnet18", "--train", "--ddp", "--fsdp"], "choose one"),
])
def test_cli_errors_are_one_line(argv, msg, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------ on the recorded H200 steps


def test_ddp_resnet50_plan_and_memory_match_the_record():
    """The lead's DDP ResNet-50 at world 2 (validation/results/dist/h200-x4-2026-11-28.jsonl): the plan's NCCL
    kernels are the profiler's (5 all-reduces, 2 buffer broadcasts), and rank 0's peak is within 3%."""
    from validation.score import dist_accuracy as S
    rec = next(r for _, r, _ in S.records() if r["case"] == "ddp_resnet50" and r["world"] == 2)
    p = S.predict_case("ddp_resnet50", 2, "h200")
    plan = {}
    for op in p.plan.ops:
        if op.kind != "copy":
            plan[op.kind] = plan.get(op.kind, 0) + 1
    assert plan == S.measured_collectives(rec) == {"all_reduce": 5, "broadcast": 2}
    assert abs(p.peak_bytes / rec["peak_allocated_bytes"] - 1) < 0.03
    assert p.peak_phase == "backward"
