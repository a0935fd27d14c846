"""The broad-sample harness (validation.measure.broad_run) on CPU: the stable hash sample, the
plan, batch halving on out-of-memory, and one zoo-format record per case written through
zoo_run's own per-case measurement (AMP recorded, Hugging Face rows rebuildable)."""

import hashlib

import pytest

from validation.measure import broad_run
from validation.records.store import read_records

torch = pytest.importorskip("torch")


def test_sample_is_the_lowest_sha1_names_under_the_size_limit():
    names = [f"model_{i}" for i in range(50)]
    big = set(names[::7])                                  # pretrained at 448 px: skipped
    size = lambda n: 448 if n in big else 224              # noqa: E731
    got = broad_run.sample_timm(10, names, size)
    want = [n for n in sorted(names, key=lambda n: hashlib.sha1(n.encode()).hexdigest())
            if n not in big][:10]
    assert [n for n, _ in got] == want and all(hw == 224 for _, hw in got)
    # stable: the same names in another order give the same sample; a larger N extends it
    assert broad_run.sample_timm(10, names[::-1], size) == got
    assert broad_run.sample_timm(12, names, size)[:10] == got


def test_plan_interleaves_hf_configs_amp_first_then_fp32():
    timm_models = [(f"resnet{i}", 224) for i in range(12)]
    cases = broad_run.plan_cases(timm_models, ("bert", "gpt2", "t5"), fp32=True)
    amp = [c for c in cases if c.extra["amp"] == "float16"]
    assert len(amp) == 15 and cases[:15] == amp
    assert [c.extra["amp"] for c in cases[15:]] == [None] * 15
    models = [c.model for c in amp]
    assert models[0] == "hfcfg:bert" and "hfcfg:gpt2" in models[1:8]
    assert all(c.sizes == {"batch": 256, "hw": 224} for c in amp if c.model.startswith("timm:"))
    t5 = next(c for c in amp if c.model == "hfcfg:t5")
    assert t5.sizes == {"batch": 64, "seq": 256, "tgt": 64} and t5.family == "encdec"
    assert all(c.extra["quick"] and c.run == "eager" and c.dtype == "float32" for c in cases)


class OomZoo(broad_run.BroadZoo):
    """Tiny Hugging Face configs; building at a batch over 16 runs 'out of memory'."""

    def __init__(self):
        super().__init__({
            "gpt2": ("GPT2LMHeadModel", {"vocab_size": 64, "n_positions": 32, "n_embd": 16,
                                         "n_layer": 1, "n_head": 2, "use_cache": False},
                     "decoder", "decoder"),
            "vit": ("ViTModel", {"hidden_size": 16, "num_hidden_layers": 1,
                                 "num_attention_heads": 2, "intermediate_size": 32,
                                 "image_size": 32, "patch_size": 16}, "image", "vit")})

    def build(self, name, device="meta", dtype=None, channels_last=False, **sizes):
        if sizes.get("batch", 0) > 16:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if name == "hfcfg:broken":
            raise ValueError("no such model")
        return super().build(name, device, dtype, channels_last, **sizes)

    def get(self, name):
        if name == "hfcfg:broken":
            raise KeyError(name)
        return super().get(name)


def test_cpu_run_halves_on_oom_and_writes_zoo_rows(tmp_path):
    pytest.importorskip("transformers")
    zoo = OomZoo()
    cases = [broad_run.make_case("hfcfg:gpt2", "decoder", {"batch": 64, "seq": 8}, "bfloat16", 0, 0),
             broad_run.make_case("hfcfg:vit", "vit", {"batch": 2, "hw": 32}, None, 0, 1),
             broad_run.make_case("hfcfg:broken", "cnn", {"batch": 2, "hw": 32}, None, 0, 2)]
    out = str(tmp_path / "broad.jsonl.gz")
    s = broad_run.run(out, cases, device="cpu", zoo=zoo)
    rows = read_records(out)
    assert [r["model"] for r in rows] == ["hfcfg:gpt2", "hfcfg:vit", "hfcfg:broken"]
    gpt2, vit, broken = rows
    # 64 -> 32 -> 16: two halvings, the id names the batch measured
    assert gpt2["sizes"] == {"batch": 16, "seq": 8} and gpt2["batch_halvings"] == 2
    assert gpt2["case_id"] == "hfcfg:gpt2__batch16_seq8__bfloat16__eager"
    assert gpt2["amp"] == "bfloat16" and gpt2["dtype"] == "float32"
    assert gpt2["hf_config"]["class"] == "GPT2LMHeadModel" and gpt2["hf_config"]["kwargs"]["n_layer"] == 1
    # zoo_run's fields: host statistics of the call, wall time, profile reps
    assert gpt2["host"]["aten_ops_top"] > 0 and gpt2["wall_us"] > 0
    assert gpt2["profile"]["reps"] == 2 and "kernel_count" in gpt2
    assert "amp" not in vit and vit["batch_halvings"] == 0
    assert broken["failed"] == "ValueError: no such model" and s["failed"] == {cases[2].case_id: broken["failed"]}
    # rebuildable from the row alone
    m, args = broad_run.BroadZoo.from_row(gpt2).build(gpt2["model"], device="meta", **gpt2["sizes"])
    assert type(m).__name__ == gpt2["hf_config"]["class"] and args[0].shape == (16, 8)


def test_summary_counts_timm_and_hf_apart():
    rows = [{"case_id": "timm:a", "model": "timm:a", "wall_us": 2000.0, "kernel_count": 100,
             "elapsed_s": 2.0, "batch_halvings": 1},
            {"case_id": "timm:b", "model": "timm:b", "wall_us": 4000.0, "kernel_count": 300,
             "elapsed_s": 3.0, "batch_halvings": 0},
            {"case_id": "timm:c", "model": "timm:c", "failed": "TimeoutError: no result within 30 s",
             "elapsed_s": 30.0},
            {"case_id": "hfcfg:bert", "model": "hfcfg:bert", "wall_us": 1000.0, "kernel_count": 50,
             "elapsed_s": 1.0}]
    lines = broad_run.summarize(rows).splitlines()
    assert lines[0] == ("timm: 3 rows, 2 measured, 1 failed, 1 with a halved batch; median 200 "
                        "kernels, wall 3.00 ms, case 3.0 s")
    assert lines[1].startswith("Hugging Face configs: 1 rows, 1 measured, 0 failed")
    assert lines[2] == "  1x TimeoutError: no result within 30 s (e.g. timm:c)"


class SleepZoo(broad_run.BroadZoo):
    """``sleep:warm``: a first call of 0.2 s (kernel loading), then fast; ``sleep:slow``:
    every call takes batch x 5 ms."""

    def get(self, name):
        from types import SimpleNamespace
        return SimpleNamespace(name=name, family="cnn", library="test",
                               defaults={"batch": 2, "hw": 8})

    def build(self, name, device="meta", dtype=None, channels_last=False, **sizes):
        import time

        class Sleep(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.ones(1))
                self.calls = 0

            def forward(self, x):
                self.calls += 1
                if name == "sleep:warm":
                    time.sleep(0.2 if self.calls == 1 else 0.001)
                else:
                    time.sleep(0.005 * x.shape[0])
                return x * self.w
        m = Sleep()
        return m, self.inputs(name, m, device, dtype, **sizes)

    def inputs(self, name, module, device="meta", dtype=None, channels_last=False, **sizes):
        return (torch.randn(sizes["batch"], 3, sizes["hw"], sizes["hw"], device=device),)


def test_probe_halves_on_the_fastest_call_not_the_first(monkeypatch, tmp_path):
    monkeypatch.setattr(broad_run, "SLOW_S", 0.05)
    zoo = SleepZoo()
    warm = broad_run.make_case("sleep:warm", "cnn", {"batch": 16, "hw": 8}, None, 0, 0)
    slow = broad_run.make_case("sleep:slow", "cnn", {"batch": 16, "hw": 8}, None, 0, 1)
    out = str(tmp_path / "b.jsonl.gz")
    broad_run.run(out, [warm, slow], device="cpu", zoo=zoo)
    w, s = read_records(out)
    # a slow first call alone halves nothing
    assert w["sizes"]["batch"] == 16 and w["batch_halvings"] == 0
    assert w["probe"]["calls_s"][0] > 0.15 and len(w["probe"]["calls_s"]) == 2
    # every call 80 ms > 50 ms: three calls, then halved once (to 40 ms a call)
    assert len(s["probe"]["calls_s"]) == 3 and s["probe"]["batch"] == 16
    assert s["sizes"]["batch"] == 8 and s["batch_halvings"] == 1


def test_skip_done_remeasures_failed_and_first_call_halved_rows():
    rows = [{"model": "timm:a", "amp": "float16"},
            {"model": "timm:b", "amp": "float16", "failed": "RuntimeError: x"},
            {"model": "timm:c", "amp": "float16", "batch_halvings": 2},             # first-call rule
            {"model": "timm:d", "amp": "float16", "batch_halvings": 1, "probe": {"batch": 256}},
            {"model": "timm:a", "amp": None}]
    assert broad_run.done_models(rows) == {("timm:a", "float16"), ("timm:d", "float16"),
                                           ("timm:a", None)}


def test_merge_replaces_models_measured_again(tmp_path):
    from validation.records.store import write_records
    old = [{"model": "timm:a", "amp": "float16", "sizes": {"batch": 16}},
           {"model": "timm:b", "amp": "float16", "sizes": {"batch": 256}}]
    new = [{"model": "timm:a", "amp": "float16", "sizes": {"batch": 256}},
           {"model": "timm:c", "amp": "float16", "sizes": {"batch": 256}}]
    write_records(str(tmp_path / "old.jsonl.gz"), old)
    write_records(str(tmp_path / "new.jsonl.gz"), new)
    out = str(tmp_path / "merged.jsonl.gz")
    assert broad_run.main(["--merge", str(tmp_path / "old.jsonl.gz"), str(tmp_path / "new.jsonl.gz"),
                           "--out", out]) == 0
    assert read_records(out) == [old[1]] + new
