"""Models by the names their libraries use (:mod:`gpusim.models.zoo_any`): ``timm:NAME``,
``tv:NAME`` and ``hf:ID`` (a config folder, never a download), with one-line refusals."""

import importlib.util
import os

import pytest
import torch

pytest.importorskip("timm")
pytest.importorskip("torchvision")
hf = pytest.importorskip("transformers")

from gpusim.models import zoo                                   # noqa: E402
from gpusim.cli.commands import main                              # noqa: E402
from gpusim.models.examples import ModelError                   # noqa: E402
from gpusim.models.resolve import model_graph                    # noqa: E402
from gpusim.predict.pipeline import predict                       # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bench():
    spec = importlib.util.spec_from_file_location(
        "any_model", os.path.join(ROOT, "benchmarks", "any_model.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: fast names from benchmarks/any_model.py's hash sample (asserted to be in it)
FAST = ["timm:seresnet18", "timm:test_mambaout", "tv:resnext101_32x8d", "tv:regnet_y_400mf"]


def test_hash_sampled_names_predict():
    sample = _bench().sampled_names(40, 20)
    assert sample == _bench().sampled_names(40, 20)         # stable
    fast = [n for n in FAST if n in sample]     # a newer library may move a few out
    assert len(fast) >= 2, sample
    for name in fast:
        p = predict(model_graph(name), gpu="h100")
        assert p.kernels and p.device_us > 0 and not p.unmodelled_ops, name


def test_timm_uses_pretrained_cfg_input_size():
    import timm
    for name in ("vit_betwixt_patch16_reg1_gap_256", "seresnet18", "maxvit_small_tf_512"):
        want = timm.models.get_pretrained_cfg(name).input_size[-1]
        assert zoo.get(f"timm:{name}").defaults == {"batch": 1, "hw": want}
    assert zoo.get("timm:convnext_tiny.fb_in22k_ft_in1k_384").defaults["hw"] == 384   # a tag's
    _, (x,) = zoo.build("timm:vit_betwixt_patch16_reg1_gap_256")
    assert tuple(x.shape) == (1, 3, 256, 256)


def test_torchvision_families_infer_inputs():
    assert zoo.get("tv:efficientnet_b3").defaults["hw"] == 300    # its weights' crop size
    _, (v,) = zoo.build("tv:r3d_18")
    assert tuple(v.shape) == (1, 3, 16, 112, 112)                 # video: B, C, T, H, W
    _, args = zoo.build("tv:raft_small", hw=128)
    assert len(args) == 2                                         # optical flow: two images
    m, (x,) = zoo.build("tv:lraspp_mobilenet_v3_large")           # no backbone download
    assert tuple(x.shape) == (1, 3, 520, 520) and next(m.parameters()).is_meta
    m, _ = zoo.build("tv:regnet_y_400mf")                         # widths computed on CPU
    assert all(p.is_meta for p in m.parameters())


@pytest.mark.parametrize("name, msg", [
    ("timm:resnet5O", "timm.list_models() has no 'resnet5O'"),
    ("tv:resnet_18", "torchvision.models.list_models() has no 'resnet_18' (close: tv:resnet18"),
    ("hf:nobody/no-such-model-here", "no config for hf:nobody/no-such-model-here in the local "
     "cache; pass a directory with config.json"),
    ("hf:./no/such/dir", "no such folder or config.json"),
])
def test_bad_names(name, msg):
    with pytest.raises(ModelError, match=None) as e:
        zoo.get(name)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_detectors_refuse_saying_why(capsys):
    assert main(["predict", "tv:ssdlite320_mobilenet_v3_large"]) == 2
    err = capsys.readouterr().err
    assert "filter boxes by score and run NMS" in err and len(err.strip().splitlines()) == 1


def test_cli_refusal_is_one_line(capsys, tmp_path):
    assert main(["predict", f"hf:{tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "no config.json in that folder" in err and len(err.strip().splitlines()) == 1


def _save(cfg, path):
    cfg.save_pretrained(path)
    return f"hf:{path}"


def test_hf_config_folder(tmp_path):
    small = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                 intermediate_size=128)
    enc = _save(hf.BertConfig(**small, architectures=["BertForMaskedLM"]), tmp_path / "bert")
    e = zoo.get(enc)
    assert e.family == "encoder" and e.defaults == {"batch": 1, "seq": 128}
    m, args = zoo.build(enc, seq=32)
    assert type(m).__name__ == "BertForMaskedLM"                  # the architectures class
    assert [tuple(a.shape) for a in args] == [(1, 32), (1, 32)]   # input_ids, attention_mask
    assert next(m.parameters()).is_meta
    # config.json itself works too, and AutoModel without architectures
    dec = _save(hf.GPT2Config(n_layer=2, n_embd=64, n_head=2, n_positions=256),
                tmp_path / "gpt2")
    m, args = zoo.build(dec + "/config.json")
    assert type(m).__name__ == "GPT2Model" and len(args) >= 1
    with pytest.raises(ModelError, match="seq=300 must be between 1 and 256"):
        zoo.build(dec, seq=300)                                   # max positions
    ed = _save(hf.T5Config(num_layers=2, d_model=64, num_heads=2, d_ff=128, d_kv=32,
                           architectures=["T5ForConditionalGeneration"]), tmp_path / "t5")
    _, args = zoo.build(ed, seq=16, tgt=8)
    assert [tuple(a.shape) for a in args if a is not None] == [(1, 16), (1, 16), (1, 8)]
    vit = _save(hf.ViTConfig(**small, image_size=64, patch_size=16), tmp_path / "vit")
    _, args = zoo.build(vit, batch=2)
    assert tuple(args[0].shape) == (2, 3, 64, 64)
    p = predict(model_graph(enc, sizes={"seq": 32}), gpu="h100")
    assert p.kernels and not p.unmodelled_ops


def test_size_takes_several_keys(tmp_path):
    from gpusim.models.resolve import parse_sizes
    assert parse_sizes(["batch=2,seq=64", "tgt=8"]) == {"batch": 2, "seq": 64, "tgt": 8}
    for bad in (["n=5,"], ["n=1,n=2"]):
        with pytest.raises(Exception, match="--size"):
            parse_sizes(bad)


def test_short_names_still_curated():
    assert zoo.get("hf:bert-base").description.startswith("BERT-base")
    assert zoo.get("tv:resnet50").name in zoo.ZOO


def test_hf_id_from_the_local_cache(tmp_path, monkeypatch):
    """A hub id resolves from the local Hugging Face cache (its layout: refs/main names
    the snapshot holding config.json), offline."""
    import huggingface_hub.constants as c
    repo = tmp_path / "models--someorg--tiny-gpt2"
    snap = repo / "snapshots" / ("0" * 40)
    hf.GPT2Config(n_layer=1, n_embd=32, n_head=2, architectures=["GPT2LMHeadModel"]) \
        .save_pretrained(snap)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    e = zoo.get("hf:someorg/tiny-gpt2")
    assert e.family == "decoder" and "gpt2" in e.description
    m, args = zoo.build("hf:someorg/tiny-gpt2", seq=16)
    assert type(m).__name__ == "GPT2LMHeadModel" and [tuple(a.shape) for a in args] == [(1, 16)]
