"""The training-zoo harness (validation.measure.train_run) on CPU: case plan, the step's phases,
one record per case (a failing case writes a failed row and the run goes on), kernels
attributed to phases from profiler events (recorded-shape data), and the competitors'
pass (MemTracker under FakeTensorMode)."""

from types import SimpleNamespace

import pytest

from validation.measure import timing as measure
from validation.measure import train_run
from validation.measure import train_plan
from validation.measure import zoo_run
from validation.records.store import read_records

torch = pytest.importorskip("torch")


def _entry(name, family, d):
    return SimpleNamespace(name=name, family=family, library="test", defaults=d, large=d,
                           dtypes=("float32",), channels_last=False)


class TinyZoo:
    """A zoo of two tiny models with gpusim.models.zoo's get/build/inputs interface."""

    ENTRIES = {"tiny:cnn": _entry("tiny:cnn", "cnn", {"batch": 2, "hw": 16}),
               "tiny:t5": _entry("tiny:t5", "encdec", {"batch": 2, "seq": 8, "tgt": 4}),
               "tiny:broken": _entry("tiny:broken", "cnn", {"batch": 2, "hw": 16})}

    def get(self, name):
        return self.ENTRIES[name]

    def build(self, name, device="meta", dtype=torch.float32, channels_last=False, **sizes):
        with torch.device(device):
            if name == "tiny:cnn":
                m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                        torch.nn.Flatten(), torch.nn.Linear(4, 10))
            elif name == "tiny:t5":
                hf = pytest.importorskip("transformers")
                m = hf.T5ForConditionalGeneration(hf.T5Config(
                    vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1,
                    num_decoder_layers=1, num_heads=2, decoder_start_token_id=0, use_cache=False))
            else:
                raise RuntimeError("cannot build this model")
        m = m.to(device=device, dtype=dtype).eval()
        return m, self.inputs(name, m, device, dtype, channels_last, **sizes)

    def inputs(self, name, module, device="meta", dtype=torch.float32, channels_last=False,
               **sizes):
        e = self.ENTRIES[name]
        sz = dict(e.defaults, **sizes)
        if e.family == "cnn":
            return (torch.randn(sz["batch"], 3, sz["hw"], sz["hw"], device=device, dtype=dtype),)
        ids = torch.randint(3, 64, (sz["batch"], sz["seq"]), device=device)
        mask = torch.ones(sz["batch"], sz["seq"], device=device, dtype=torch.long)
        return (ids, mask, torch.randint(3, 64, (sz["batch"], sz["tgt"]), device=device))


def test_plan_covers_models_precisions_optimizers_most_valuable_first():
    zoo = pytest.importorskip("gpusim.models.zoo")
    cases = train_plan.plan_cases(zoo)
    ids = [c.case_id for c in cases]
    assert len(ids) == len(set(ids))
    n = len(train_plan.MODELS)
    # 2 sizes x 3 precisions x (SGD, AdamW) per model, fused AdamW for FUSED, compiled:
    # bf16 at both sizes and fp32 small
    assert len(cases) == n * 12 + 6 * len(train_plan.FUSED) + 3 * len(train_plan.COMPILED)
    first = cases[:n]
    assert {c.model for c in first} == set(train_plan.MODELS)
    assert all(c.extra["precision"] == "bf16" and c.extra["optimizer"] == "adamw"
               and c.size == "small" and c.run == "eager" for c in first)
    assert [c.tier for c in cases] == sorted(c.tier for c in cases)
    k = 3 * len(train_plan.COMPILED)
    assert [c.run for c in cases[-k:]] == ["compiled"] * k
    assert [c.tier for c in cases if c.run == "compiled"][:len(train_plan.COMPILED)] == [6] * len(train_plan.COMPILED)
    fp16 = [c for c in cases if c.extra["precision"] == "fp16"]
    assert fp16 and all(c.extra["grad_scaler"] and c.extra["amp"] == "float16" for c in fp16)
    assert all(not c.extra["grad_scaler"] for c in cases if c.extra["precision"] != "fp16")
    losses = {c.model: c.extra["loss"] for c in cases}
    assert losses["tv:resnet50"] == "cross_entropy" and losses["hf:gpt2"] == "lm"
    assert losses["hf:t5-small"] == "lm" and losses["hf:bert-base"] == "mean_last_hidden"
    llama = [c for c in cases if c.model == "hf:llama-3.2-1b"]
    assert max(c.sizes["batch"] for c in llama) <= 2
    assert train_plan.plan_cases(zoo, patterns=["*__fp16__sgd__*"]) == [
        c for c in cases if c.extra["precision"] == "fp16" and c.extra["optimizer"] == "sgd"]


def test_cpu_run_writes_one_record_per_case_with_phases(tmp_path):
    zoo = TinyZoo()
    models = {"tiny:cnn": ({"batch": 2, "hw": 16}, {"batch": 3, "hw": 16}),
              "tiny:broken": ({"batch": 2, "hw": 16}, {"batch": 3, "hw": 16}),
              "tiny:t5": ({"batch": 2, "seq": 8, "tgt": 4}, {"batch": 2, "seq": 8, "tgt": 4})}
    cases = train_plan.plan_cases(zoo, models=models, fused=(), compiled=())
    pick = ["tiny:cnn__batch2_hw16__fp32__sgd__eager", "tiny:broken__batch2_hw16__bf16__adamw__eager",
            "tiny:t5__batch2_seq8_tgt4__fp32__adamw__eager", "tiny:cnn__batch2_hw16__fp16__adamw__eager"]
    cases = [c for c in cases if c.case_id in pick]
    out = str(tmp_path / "train.jsonl.gz")
    s = train_run.run(out, cases, device="cpu", zoo_mod=zoo, reps=1)
    rows = {r["case_id"]: r for r in read_records(out)}
    assert set(rows) == set(pick)
    assert s["failed"] == {"tiny:broken__batch2_hw16__bf16__adamw__eager":
                           "RuntimeError: cannot build this model"}
    assert rows["tiny:broken__batch2_hw16__bf16__adamw__eager"]["amp"] == "bfloat16"
    cnn = rows["tiny:cnn__batch2_hw16__fp32__sgd__eager"]
    assert cnn["optimizer_class"] == "SGD" and cnn["optimizer_defaults"]["momentum"] == 0.9
    assert cnn["optimizer_defaults"]["foreach"] is True and cnn["loss"] == "cross_entropy"
    assert cnn["num_classes"] == 10 and cnn["amp"] is None and cnn["env"]["device"] == "cpu"
    host = {ph: cnn["phases"][ph]["host"]["aten_ops_top_counts"] for ph in train_run.PHASES}
    assert "aten::conv2d" in host["forward"] and "aten::cross_entropy_loss" in host["forward"]
    assert "aten::convolution_backward" in host["backward"]
    assert "aten::conv2d" not in host["backward"]
    assert any(k.startswith("aten::_foreach") for k in host["optimizer"])
    assert cnn["wall"]["n"] >= 10 and cnn["wall_us"] > 0
    fp16 = rows["tiny:cnn__batch2_hw16__fp16__adamw__eager"]
    assert fp16["grad_scaler"] and fp16["amp"] == "float16"
    sc = fp16["grad_scaler_scale"]
    assert sc["after_warmup"] > 0 and "after_profile" in sc and "at_end" in sc
    # the scaled loss's backward, the unscale and inf check in the optimizer phase
    assert "aten::mul" in fp16["phases"]["backward"]["host"]["aten_ops_top_counts"]
    assert "aten::_amp_foreach_non_finite_check_and_unscale_" in \
        fp16["phases"]["optimizer"]["host"]["aten_ops_top_counts"]
    t5 = rows["tiny:t5__batch2_seq8_tgt4__fp32__adamw__eager"]
    assert t5["loss"] == "lm" and t5["num_classes"] is None
    assert "aten::embedding_backward" in t5["phases"]["backward"]["host"]["aten_ops_top_counts"]
    assert t5["phases"]["optimizer"]["host"]["aten_ops_top"] > 0


def test_phase_kernels_follow_the_launch_not_the_device_time():
    # forward launches k1 (main thread); backward's kernels are launched by autograd's
    # device thread (thread 2) and run on the GPU after the backward range has ended on
    # the host clock; the optimizer launches one foreach kernel
    ranges = [(0, 10, "forward"), (10, 20, "backward"), (20, 30, "optimizer")]
    cpu = [("aten::mm", 1, 1, 3, 0), ("cudaLaunchKernel", 1, 2, 3, 11),
           ("aten::mm", 2, 12, 14, 0), ("cudaLaunchKernel", 2, 13, 14, 12),
           ("cudaLaunchKernel", 2, 15, 16, 13),
           ("aten::_foreach_add_", 1, 21, 25, 0), ("cudaLaunchKernel", 1, 22, 23, 14)]
    dev = [("gemm_fwd", 8, 5.0, 11), ("gemm_bwd", 25, 7.0, 12), ("reduce_bwd", 33, 2.0, 13),
           ("multi_tensor_apply", 40, 3.0, 14)]
    phases, method = measure.phase_kernels(cpu, dev, ranges)
    assert method == "correlation"
    assert [k["name"] for k in phases["forward"]["kernels"]] == ["gemm_fwd"]
    assert [k["name"] for k in phases["backward"]["kernels"]] == ["gemm_bwd", "reduce_bwd"]
    assert [k["name"] for k in phases["optimizer"]["kernels"]] == ["multi_tensor_apply"]
    assert phases["backward"]["host"]["cuda_launches"] == 2
    assert phases["optimizer"]["host"]["aten_ops_top_counts"] == {"aten::_foreach_add_": 1}
    # two profiled steps: median per kernel within each phase
    r2 = ranges + [(s + 100, e + 100, p) for s, e, p in ranges]
    cpu2 = cpu + [(n, t, s + 100, e + 100, c + 100 if c else 0) for n, t, s, e, c in cpu]
    dev2 = dev + [(n, s + 100, d + 2.0, c + 100) for n, s, d, c in dev]
    phases2, _ = measure.phase_kernels(cpu2, dev2, r2)
    assert phases2["backward"]["kernels"] == [{"name": "gemm_bwd", "us": 8.0},
                                              {"name": "reduce_bwd", "us": 3.0}]
    assert phases2["backward"]["per_call_kernel_count"] == [2, 2]


def test_competitors_memtracker_on_fake_tensors_and_failures_in_one_line():
    zoo = TinyZoo()
    models = {"tiny:cnn": ({"batch": 2, "hw": 16}, {"batch": 3, "hw": 16})}
    case = next(c for c in train_plan.plan_cases(zoo, models=models, fused=(), compiled=())
                if c.extra["precision"] == "fp32" and c.extra["optimizer"] == "adamw")
    from validation.measure.train_competitors import run_competitors
    row = run_competitors(case, zoo, train_run.describe(case, zoo.get(case.model)), "cpu")
    mt = row["memtracker"]
    # AdamW's two moments exist before the tracked step: states + weights + inputs
    assert mt["peak"] > mt["before"] > 0
    assert mt["peak_by_category"]["Optstate"] > 0 and mt["peak_by_category"]["Gradient"] > 0
    for key in ("runtime_estimator_roofline", "runtime_estimator_benchmark"):
        # no GPU here: each estimator's failure is one line, the row is still written
        assert key in row or "\n" not in row[key + "_error"]
    assert row["kind"] == "train_competitors" and row["case_id"] == case.case_id


def test_time_limit_interrupts_a_case():
    import time
    with pytest.raises(TimeoutError):
        with zoo_run.time_limit(0.2):
            time.sleep(2)
    with zoo_run.time_limit(None):
        pass


def test_summary_reports_failures_by_reason_and_the_bf16_table():
    def row(model, prec, opt, fwd, peak_phase, failed=None):
        r = {"case_id": f"{model}__{prec}__{opt}", "model": model, "sizes": {"batch": 8, "seq": 128},
             "precision": prec, "optimizer": opt, "run": "eager"}
        if failed:
            return dict(r, failed=failed)
        ph = {p: {"kernel_count": n} for p, n in zip(train_run.PHASES, (0, fwd, 2 * fwd, 7))}
        return dict(r, phases=ph, kernel_sum_us=2500.0, wall_us=3100.0, profile={"split": "correlation"},
                    memory={"peak_step_case_bytes": 3 << 30, "peak_phase": peak_phase})
    rows = [row("hf:gpt2", "bf16", "adamw", 120, "backward"), row("hf:gpt2", "fp32", "sgd", 90, "forward"),
            row("hf:t5-small", "bf16", "adamw", 0, None, "OutOfMemoryError: CUDA out of memory."),
            row("hf:t5-small", "fp16", "adamw", 0, None, "OutOfMemoryError: CUDA out of memory.")]
    text = train_run.summarize(rows)
    lines = text.splitlines()
    assert lines[0] == "train records: 4 rows, 2 measured, 2 failed; kernel split correlation"
    assert lines[1] == "  2x OutOfMemoryError: CUDA out of memory. (e.g. hf:t5-small__bf16__adamw)"
    gpt2 = [ln for ln in lines if ln.startswith("hf:gpt2")]
    assert len(gpt2) == 1 and gpt2[0].split()[-5:] == ["120/240/7", "2.50", "3.10", "3.00", "backward"]


def test_estimator_output_sink_keeps_an_encoding_for_triton_nvsmi():
    # triton.testing.nvsmi decodes nvidia-smi's bytes with sys.stdout.encoding while the
    # estimator's printout is swallowed: a plain StringIO (encoding None) failed every
    # roofline estimate on the H100
    import contextlib
    import sys
    from validation.measure.train_competitors import _Quiet
    with contextlib.redirect_stdout(_Quiet()):
        print("Estimated total_time: 1.000 ms")
        decoded = b"1980, 2619".decode(sys.stdout.encoding)
    assert decoded == "1980, 2619"
