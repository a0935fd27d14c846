"""The zoo runner's and sweeps' GPU-independent parts, on CPU: case planning and order,
file names, splitting profiler events by call, counting syncs / launches / aten ops."""

import re
from types import SimpleNamespace

import pytest

from validation.measure import timing as measure
from validation.measure import zoo_run
from validation.measure import zoo_inputs
from validation.measure import zoo_plan
from validation.measure.microbench import SWEEPS, sdpa_backend


def _entry(name, family, dtypes, cl=False):
    if family in ("cnn", "vit"):
        d, lg = {"batch": 1, "hw": 224}, {"batch": 32, "hw": 224}
    else:
        d, lg = {"batch": 1, "seq": 128}, {"batch": 8, "seq": 512}
    return SimpleNamespace(name=name, family=family, library="x", description="", defaults=d,
                           large=lg, dtypes=tuple(dtypes), channels_last=cl)


FAKE_ZOO = {
    "tv:resnet50": _entry("tv:resnet50", "cnn", ("float32", "float16", "bfloat16"), cl=True),
    "hf:bert-base": _entry("hf:bert-base", "encoder", ("float32", "bfloat16")),
    "hf:gpt2": _entry("hf:gpt2", "decoder", ("float32", "float16", "bfloat16")),
}


def test_plan_order_large_main_dtype_first_then_batch1_then_rest_compiled_last():
    cases = zoo_plan.plan_cases(FAKE_ZOO, compiled=("hf:gpt2", "tv:resnet50", "nope"))
    ids = [c.case_id for c in cases]
    assert ids[:3] == ["tv:resnet50__large__float16__nchw__eager",
                       "hf:bert-base__large__bfloat16__nchw__eager",
                       "hf:gpt2__large__bfloat16__nchw__eager"]
    assert ids[3:6] == ["tv:resnet50__default__float16__nchw__eager",
                        "hf:bert-base__default__bfloat16__nchw__eager",
                        "hf:gpt2__default__bfloat16__nchw__eager"]
    tiers = [c.tier for c in cases]
    assert tiers == sorted(tiers)
    # every (model, size, dtype, layout) once; channels_last only where the entry says
    assert len(ids) == len(set(ids))
    n_eager = 2 * (3 * 2 + 2 + 3)
    assert sum(c.run == "eager" for c in cases) == n_eager
    assert all(not c.channels_last for c in cases if c.model != "tv:resnet50")
    assert [c.case_id for c in cases if c.run == "compiled"] == [
        "hf:gpt2__large__bfloat16__nchw__compiled", "tv:resnet50__large__float16__nchw__compiled"]
    assert ids[-2:] == [c.case_id for c in cases if c.run == "compiled"]
    # channels_last after all NCHW eager cases, large main dtype first
    cl = [c for c in cases if c.channels_last]
    assert cl[0].case_id == "tv:resnet50__large__float16__cl__eager"
    assert min(ids.index(c.case_id) for c in cl) > max(
        ids.index(c.case_id) for c in cases if c.run == "eager" and not c.channels_last)


def test_plan_filters_by_pattern():
    cases = zoo_plan.plan_cases(FAKE_ZOO, compiled=(), patterns=["hf:*__large__*"])
    assert {c.model for c in cases} == {"hf:bert-base", "hf:gpt2"}
    assert all(c.size == "large" for c in cases)
    cases = zoo_plan.plan_cases(FAKE_ZOO, compiled=(), patterns=["tv:resnet50"])
    assert len(cases) == 2 * 3 * 2


def test_next_case_deadline_and_compiled_reserve():
    cases = zoo_plan.plan_cases(FAKE_ZOO, compiled=("hf:gpt2",))
    assert zoo_plan.next_case(cases, 0, 100, 30) is cases[0]
    assert zoo_plan.next_case(cases, 80, 100, 30).run == "compiled"
    assert zoo_plan.next_case(cases, 80, 100, 0) is cases[0]
    assert zoo_plan.next_case(cases, 100, 100, 30) is None
    assert zoo_plan.next_case([], 0, 100, 30) is None


def test_safe_names():
    for cid in ("timm:deit_small_patch16_224__large__bfloat16__nchw__eager",
                "hf:llama-3.2-1b__default__float32__cl__compiled", "a/b c:*?"):
        s = zoo_plan.safe_name(cid)
        assert re.fullmatch(r"[A-Za-z0-9._-]+", s), s
    assert zoo_plan.safe_name("hf:gpt2__large") == "hf_gpt2__large"
    assert zoo_plan.safe_name("::") == "case"


def test_top_level_aten_ops_nest_by_time_per_thread():
    ev = [("aten::linear", 1, 0, 10), ("aten::t", 1, 1, 2), ("aten::addmm", 1, 3, 9),
          ("cudaLaunchKernel", 1, 4, 5), ("aten::relu", 1, 11, 15),
          ("aten::clamp_min", 1, 12, 14), ("aten::add", 2, 1, 3)]
    assert measure.top_level_aten(ev) == ["aten::linear", "aten::add", "aten::relu"]


def test_host_stats_counts_syncs_launches_and_dtoh():
    cpu = [("aten::item", 1, 0, 10), ("aten::_local_scalar_dense", 1, 1, 9),
           ("cudaMemcpyAsync", 1, 2, 3), ("cudaStreamSynchronize", 1, 4, 8),
           ("aten::nonzero", 1, 20, 30), ("cudaStreamSynchronize", 1, 25, 26),
           ("aten::add", 1, 40, 45), ("cudaLaunchKernel", 1, 41, 42),
           ("aten::mm", 1, 50, 60), ("cuLaunchKernelEx", 1, 51, 52),
           ("cudaLaunchKernelExC", 1, 53, 54), ("cudaLaunchHostFunc", 1, 55, 56)]
    dev = [("Memcpy DtoH (Device -> Pinned)", 5, 1), ("Memcpy DtoH (Device -> Pinned)", 27, 1),
           ("void add_kernel", 43, 2)]
    h = measure.host_stats(cpu, dev)
    assert h["host_syncs"] == 2
    assert h["sync_calls"] == {"cudaStreamSynchronize": 2}
    assert h["sync_aten_ops"] == {"aten::_local_scalar_dense": 1, "aten::item": 1, "aten::nonzero": 1}
    assert h["memcpy_dtoh"] == 2
    assert h["cuda_launches"] == 3
    assert h["aten_ops_top"] == 4
    assert h["aten_ops_top_counts"] == {"aten::item": 1, "aten::nonzero": 1, "aten::add": 1,
                                        "aten::mm": 1}


def test_split_reps_by_correlation_and_time_and_median():
    # two calls; each launches two kernels; a flush kernel before each is launched outside
    ranges = [(100, 130), (300, 330)]
    flushes = [50, 250]
    cpu = [("cudaLaunchKernel", 1, 60, 61, 1),                    # flush 1
           ("aten::add", 1, 101, 110, 0), ("cudaLaunchKernel", 1, 102, 103, 2),
           ("aten::mul", 1, 111, 120, 0), ("cudaLaunchKernel", 1, 112, 113, 3),
           ("cudaDeviceSynchronize", 1, 140, 200, 0),               # ours, outside the calls
           ("cudaLaunchKernel", 1, 260, 261, 4),                    # flush 2
           ("aten::add", 1, 301, 310, 0), ("cudaLaunchKernel", 1, 302, 303, 5),
           ("aten::mul", 1, 311, 320, 0), ("cudaLaunchKernel", 1, 312, 313, 6)]
    dev = [("fill", 62, 40, 1), ("add_k", 140, 10, 2), ("mul_k", 150, 20, 3),
           ("fill", 262, 40, 4), ("add_k", 340, 12, 5), ("mul_k", 352, 22, 6)]
    cpu_per, dev_per, method = measure.split_reps(cpu, dev, ranges, flushes)
    assert method == "correlation"
    assert [[k[0] for k in d] for d in dev_per] == [["add_k", "mul_k"]] * 2
    assert all("cudaDeviceSynchronize" not in [e[0] for e in c] for c in cpu_per)
    kernels, counts = measure.median_kernels(dev_per)
    assert counts == [2, 2] and kernels == [{"name": "add_k", "us": 11.0}, {"name": "mul_k", "us": 21.0}]
    # without correlation ids: by device start inside [call start, next flush)
    dev2 = [(n, s, d, None) for n, s, d, _ in dev]
    cpu2 = [e for e in cpu if not e[0].startswith("cuda")]
    _, dev_per2, method2 = measure.split_reps(cpu2, dev2, ranges, flushes)
    assert method2 == "time"
    assert [[k[0] for k in d] for d in dev_per2] == [["add_k", "mul_k"]] * 2


def test_sdpa_backend_from_kernel_names():
    assert sdpa_backend(["void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>"]) == "flash"
    assert sdpa_backend(["fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::"
                         "AttentionKernel<...>::Params)"]) == "efficient"
    assert sdpa_backend(["cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16"]) == "cudnn"
    assert sdpa_backend(["ampere_sgemm_128x64_tn", "softmax_warp_forward", "gemm"]) == "math"


def test_sweep_points_cover_the_brief():
    pts = {k: [m for m, _ in g(dev="meta")] for k, g in SWEEPS.items()}
    conv = pts["conv2d"]
    assert {m["layout"] for m in conv} == {"nchw", "channels_last"}
    assert {m["dtype"] for m in conv} == {"float32", "float16", "bfloat16"}
    assert {m["N"] for m in conv} == {1, 32}
    assert any(m["groups"] == m["Cin"] > 1 and m["k"] == 5 for m in conv)
    gemm = pts["gemm"]
    assert {m["M"] for m in gemm} == {1, 16, 128, 512, 4096}
    assert {50257, 1000, 30522, 1001, 32001} <= {m["N"] for m in gemm}
    assert any(not m["aligned_k"] for m in gemm)
    sd = pts["sdpa"]
    assert {m["mask"] for m in sd} >= {"none", "bool", "float", "causal"}
    assert {m["D"] for m in sd} >= {64, 80, 128}
    ops = {m["op"] for m in pts["misc"]}
    assert ops >= {"max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "batch_norm_eval",
                   "group_norm", "layer_norm", "embedding", "index_select", "gather", "arange",
                   "ones", "new_zeros", "cumsum", "cat", "add_broadcast", "softmax"}
    bt = pts["bn_train"]          # channels-last training batch norm: no record has it yet
    assert {(m["layout"], m["dtype"]) for m in bt} == {
        (lay, dt) for lay in ("nchw", "channels_last") for dt in ("float32", "float16", "bfloat16")}


def test_records_appended_one_row_per_case(tmp_path):
    from validation.records.store import read_records
    failed = {"case_id": "hf:gpt2__large__bfloat16__nchw__eager", "failed": "RuntimeError: x"}
    ok = {"case_id": "tv:resnet18__default__float16__nchw__eager", "kernel_sum_us": 1.5}
    out = str(tmp_path / "zoo.jsonl.gz")
    zoo_run.write_record(out, failed)
    zoo_run.write_record(out, ok)
    assert read_records(out) == [failed, ok]
    assert zoo_run.done_ids(out) == {ok["case_id"]}          # failed cases are re-run
    with open(out, "ab") as f:                                # a run killed mid-append
        f.write(b"\x1f\x8b\x08\x00garbage")
    assert read_records(out) == [failed, ok]


def test_inputs_match_zoo_build_on_meta():
    zoo = pytest.importorskip("gpusim.models.zoo")
    pytest.importorskip("transformers")
    pytest.importorskip("torchvision")
    import torch
    for name, sizes in (("tv:resnet18", {"batch": 2, "hw": 64}),
                        ("hf:bert-base", {"batch": 2, "seq": 16}),
                        ("hf:t5-small", {"batch": 2, "seq": 16, "tgt": 8})):
        e = zoo.ZOO[name]
        m, args = zoo.build(name, device="meta", dtype=torch.bfloat16, **sizes)
        mine = zoo_inputs.make_inputs(e, m, sizes, "meta", torch.bfloat16, False)
        assert [(a.shape, a.dtype) for a in args] == [(a.shape, a.dtype) for a in mine]
