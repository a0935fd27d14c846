"""The model zoo: every model builds on meta and captures at its default sizes with every
kernel-launching op modelled; names and sizes are checked with one-line errors."""

import sys
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("timm")
pytest.importorskip("transformers")

from gpusim.models import zoo  # noqa: E402
from gpusim.capture.tracing import capture  # noqa: E402
from gpusim.util.errors import GpusimError  # noqa: E402
from gpusim.models.examples import ModelError  # noqa: E402

_GRAPHS = {}            # name -> OpGraph at default sizes: each model is captured once
_SECONDS = {}


def graph_of(name):
    if name not in _GRAPHS:
        module, args = zoo.build(name)
        t0 = time.perf_counter()
        _GRAPHS[name] = capture(module, args, name=name)
        _SECONDS[name] = time.perf_counter() - t0
    return _GRAPHS[name]


def test_zoo_covers_the_families_and_libraries():
    assert len(zoo.ZOO) >= 26
    fams = {e.family for e in zoo.ZOO.values()}
    assert fams == {"cnn", "vit", "encoder", "decoder", "encdec"}
    assert {e.library for e in zoo.ZOO.values()} == {"torchvision", "timm", "transformers"}
    for name in ("tv:resnet50", "tv:swin_t", "timm:deit_small_patch16_224", "hf:bert-base",
                 "hf:llama-3.2-1b", "hf:mistral-7b", "hf:t5-small", "hf:bart-base"):
        assert name in zoo.ZOO
    for name, e in zoo.ZOO.items():
        assert e.name == name and name.split(":")[0] in ("tv", "timm", "hf")
        assert e.defaults["batch"] == 1 and set(e.large) <= set(e.defaults)
        assert "float32" in e.dtypes and set(e.dtypes) <= {"float32", "float16", "bfloat16"}
        assert not e.channels_last or e.family == "cnn"
    assert sum(e.channels_last for e in zoo.ZOO.values()) >= 4


def test_catalogue_rows():
    rows = zoo.catalogue()
    assert len(rows) == len(zoo.ZOO)
    assert all(len(r) == 5 and all(isinstance(c, str) for c in r) for r in rows)
    assert rows[0][4] == "batch=1 hw=224"


@pytest.mark.parametrize("name", list(zoo.ZOO))
def test_model_captures_at_defaults(name):
    e = zoo.ZOO[name]
    module, args = zoo.build(name)
    assert not module.training
    assert all(t.device.type == "meta" for t in args)
    g = graph_of(name)
    assert g.unmodelled == [], [(n, g.node(n)["op"]) for n in g.unmodelled]
    assert g.meta["module_calls"] > 0
    assert len(g.compute_nodes) > 20
    assert _SECONDS[name] < 30, f"{name} took {_SECONDS[name]:.1f} s to capture"
    kinds = {g.node(n)["kind"] for n in g.compute_nodes}
    if e.family == "cnn":
        assert "conv" in kinds
        layouts = [g.node(n)["layout"] for n in g.compute_nodes if g.node(n)["kind"] == "conv"]
        # the stem sees the NCHW image; later convs follow their input's strides (ConvNeXt's
        # permutes hand some convs channels-last tensors, as eager PyTorch does)
        assert layouts[0] == "nchw" and set(layouts) <= {"nchw", "nhwc"}
    else:       # SDPA, or attention written out (Swin: matmul, softmax, matmul)
        assert "attention" in kinds or any("softmax" in g.node(n)["op"] for n in g.compute_nodes)
    if e.library == "transformers":
        # eager's masking utilities read the device (``mask.all()``): one host sync or more
        assert g.meta["syncs"] and len(g.meta["syncs"]) == len(g.meta["sync_nodes"])
        assert all(g.node(n)["kind"] == "other" for n in g.meta["sync_nodes"])
    else:
        assert g.meta["syncs"] == []


def _attention(g):
    return [g.node(n)["sdpa"] for n in g.compute_nodes if g.node(n)["kind"] == "attention"]


def test_hf_graphs_are_what_eager_runs():
    # a mask of ones: eager checks it on the host and runs attention without a mask
    bert = _attention(graph_of("hf:bert-base"))
    assert len(bert) == 12 and not any(s["mask"] or s["is_causal"] for s in bert)
    assert bert[0]["head_dim"] == 64 and bert[0]["dropout"] == 0.0
    assert graph_of("hf:bert-base").meta["syncs"] == ["aten.all.default"]
    # fp32 grouped-query attention: no fused kernel takes it in torch 2.11 (gpusim.capture.sdpa), so
    # eager runs the math fallback: two batched GEMMs and a softmax per layer
    g = graph_of("hf:llama-3.2-1b")
    ops = [g.node(n)["op"] for n in g.compute_nodes]
    assert _attention(g) == [] and ops.count("aten.bmm.default") == 32 + 1    # + RoPE's
    assert ops.count("aten.softmax.int") == 16 and ops.count("aten.repeat_interleave.self_int") == 32
    m, args = zoo.build("hf:llama-3.2-1b", dtype="bfloat16")
    llama = _attention(capture(m, args))
    assert len(llama) == 16 and all(s["is_causal"] and not s["mask"] for s in llama)
    assert llama[0]["heads"] == 32 and llama[0]["enable_gqa"] and llama[0]["kv_heads"] == 8
    # T5's position bias is a permuted gather (last-dim stride = heads): its 12 self-
    # attentions run the math fallback; the 6 cross-attentions (contiguous bias) stay fused
    t5 = _attention(graph_of("hf:t5-small"))
    assert len(t5) == 6 and all(s["mask"] and s["mask_dtype"] == "float32" for s in t5)


def test_channels_last_conv_layout():
    module, args = zoo.build("tv:resnet50", channels_last=True, dtype="float16")
    assert args[0].is_contiguous(memory_format=torch.channels_last)
    g = capture(module, args)
    convs = [g.node(n) for n in g.compute_nodes if g.node(n)["kind"] == "conv"]
    assert len(convs) == 53 and all(c["layout"] == "nhwc" for c in convs)
    assert all(c["dtype"] == "float16" for c in convs)


def test_sizes_and_dtypes_apply():
    m, (ids, mask, dec) = zoo.build("hf:bart-base", batch=2, seq=64, tgt=16, dtype="bfloat16")
    assert ids.shape == (2, 64) and mask.shape == (2, 64) and dec.shape == (2, 16)
    assert ids.dtype == torch.int64 and next(m.parameters()).dtype == torch.bfloat16
    m, (x,) = zoo.build("timm:vit_small_patch16_224", batch=3, hw=256)
    assert x.shape == (3, 3, 256, 256)
    m2 = zoo.build("tv:resnet18")[0]
    assert zoo.inputs("tv:resnet18", m2, batch=4)[0].shape == (4, 3, 224, 224)
    assert zoo.build("timm:deit_small")[0] is not None      # alias


@pytest.mark.parametrize("call,words", [
    (lambda: zoo.build("tv:resnet5"), "torchvision.models.list_models() has no 'resnet5' "
     "(close: tv:resnet50"),
    (lambda: zoo.build("hf:nope"), "hf:bert-base"),
    (lambda: zoo.build("tv:resnet50", seq=128), "has no size 'seq'; its sizes are batch=1, hw=224"),
    (lambda: zoo.build("tv:resnet50", batch=0), "must be a positive integer"),
    (lambda: zoo.build("tv:resnet50", batch=2.5), "must be a positive integer"),
    (lambda: zoo.build("tv:vit_b_16", hw=230), "multiple of 16"),
    (lambda: zoo.build("hf:bert-base", seq=1024), "between 1 and 512"),
    (lambda: zoo.build("hf:gpt2", channels_last=True), "vision models only"),
    (lambda: zoo.build("hf:gpt2", dtype="float8"), "unknown dtype"),
])
def test_bad_names_and_sizes(call, words):
    with pytest.raises(ModelError) as ei:
        call()
    msg = str(ei.value)
    assert words in msg and "\n" not in msg
    assert isinstance(ei.value, GpusimError)


def test_missing_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)      # makes `import timm` fail
    with pytest.raises(ModelError, match=r"install the zoo extra: pip install 'gpusim\[zoo\]'"):
        zoo.build("timm:resnet50d")


def test_capture_times_table(capsys):
    """Prints capture time per model (run with -s to see it); all models within budget."""
    for name in zoo.ZOO:
        graph_of(name)
    total = sum(_SECONDS[n] for n in zoo.ZOO)
    with capsys.disabled():
        print("\nzoo capture seconds: " + ", ".join(f"{n} {_SECONDS[n]:.2f}" for n in zoo.ZOO)
              + f"; total {total:.1f}")
    assert total < 150
