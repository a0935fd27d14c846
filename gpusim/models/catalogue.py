"""The zoo's catalogue: every curated and held-out model, its builder, sizes, limits and dtypes.
Read through :mod:`gpusim.models.zoo` (``get``, ``build``, ``inputs``); names a library lists beyond
the catalogue are registered here on first use by :mod:`gpusim.models.zoo_any`.

Every model is built from its configuration with random weights, nothing downloaded; Hugging Face
models carry the explicit config of the checkpoint they are named after (:mod:`gpusim.models.zoo` says more).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from gpusim.models.examples import ModelError

FAMILIES = ("cnn", "vit", "encoder", "decoder", "encdec")
_INSTALL = "install the zoo extra: pip install 'gpusim[zoo]'"


@dataclass(frozen=True)
class ZooModel:
    """One zoo entry: what it is and the sizes and dtypes the validation measures."""

    name: str
    family: str          # "cnn" | "vit" | "encoder" | "decoder" | "encdec"
    library: str         # "torchvision" | "timm" | "transformers"
    description: str
    defaults: dict       # default sizes, e.g. {"batch": 1, "hw": 224}
    large: dict          # large-batch sizes for validation, e.g. {"batch": 32}
    dtypes: tuple        # dtype names to validate
    channels_last: bool  # validate NHWC too
    holdout: bool = False  # held-out test model: never used to develop or fit gpusim


ZOO: dict[str, ZooModel] = {}
#: Held-out models (:data:`HOLDOUT`): architectures and sizes gpusim was never developed
#: or fitted on, measured once to score it on models it never saw. ``build``/``get``
#: accept them; ``ZOO``, the catalogue and the zoo's validation runs leave them out.
HOLDOUT: dict[str, ZooModel] = {}
_BUILDERS: dict[str, Callable] = {}     # name -> fn(sizes) -> (module, input_kind, extra)
_LIMITS: dict[str, dict] = {}           # name -> {size: (lo, hi, multiple_of)}
_INPUTS: dict[str, Callable] = {}       # name -> fn(module, sizes, device, dtype, channels_last)
#: name -> why capture cannot follow the model (said instead of the tracer's words)
REFUSALS: dict[str, str] = {}

_VISION_DEFAULTS = {"batch": 1, "hw": 224}
_VISION_LARGE = {"batch": 32, "hw": 224}
_CNN_DTYPES = ("float32", "float16", "bfloat16")
_TF_DTYPES = ("float32", "bfloat16")
_TF_DTYPES_FP16 = ("float32", "float16", "bfloat16")


def _add(name, family, library, description, defaults, large, dtypes, channels_last,
         builder, limits=None, holdout=False):
    assert family in FAMILIES and name not in ZOO and name not in HOLDOUT
    (HOLDOUT if holdout else ZOO)[name] = ZooModel(
        name, family, library, description, dict(defaults), dict(large), tuple(dtypes),
        bool(channels_last), bool(holdout))
    _BUILDERS[name] = builder
    _LIMITS[name] = dict(limits or {})


# --------------------------------------------------------------------- imports
def _lib(modname: str):
    try:
        return __import__(modname)
    except ImportError:
        raise ModelError(f"{modname} is not installed; {_INSTALL}") from None


def _tv():
    _lib("torchvision")
    import torchvision.models as tvm
    return tvm


def _timm():
    return _lib("timm")


def _hf():
    hf = _lib("transformers")
    if int(hf.__version__.split(".")[0]) < 5:
        # the configs below use transformers 5's names (rope_parameters); 4.x would
        # silently ignore them and build a different model
        raise ModelError(f"the zoo's Hugging Face models need transformers >= 5, found "
                         f"{hf.__version__}; {_INSTALL}")
    return hf


# --------------------------------------------------------------------- vision
def _tv_model(fn_name, **kw):
    def make(sizes):
        return getattr(_tv(), fn_name)(weights=None, **kw)
    return make


def _tv_vit(fn_name):
    def make(sizes):
        return getattr(_tv(), fn_name)(weights=None, image_size=sizes["hw"])
    return make


def _tv_regnet(**params):
    """torchvision's RegNet builders compute block widths with torch ops, which fail
    under a ``meta`` default device: compute them on the CPU, then build as
    ``torchvision.models.regnet_*`` does."""
    def make(sizes):
        from functools import partial
        tvm = _tv()
        with torch.device("cpu"):
            bp = tvm.regnet.BlockParams.from_init_params(**params)
        return tvm.RegNet(bp, norm_layer=partial(torch.nn.BatchNorm2d, eps=1e-05, momentum=0.1))
    return make


def _timm_model(name, fixed_size=False):
    def make(sizes):
        kw = {"img_size": sizes["hw"]} if fixed_size else {}
        return _timm().create_model(name, pretrained=False, **kw)
    return make


_CNNS = [
    ("tv:resnet18", "torchvision", "ResNet-18 (11.7M params)", _tv_model("resnet18"), False),
    ("tv:resnet50", "torchvision", "ResNet-50 (25.6M params)", _tv_model("resnet50"), True),
    ("tv:mobilenet_v3_large", "torchvision", "MobileNetV3-Large: depthwise convs, "
     "squeeze-excite, hardswish (5.5M params)", _tv_model("mobilenet_v3_large"), True),
    ("tv:mobilenet_v2", "torchvision", "MobileNetV2: inverted residuals, ReLU6 (3.5M params)",
     _tv_model("mobilenet_v2"), False),
    ("tv:efficientnet_b0", "torchvision", "EfficientNet-B0: MBConv, SiLU, squeeze-excite "
     "(5.3M params)", _tv_model("efficientnet_b0"), True),
    ("tv:regnet_y_1_6gf", "torchvision", "RegNetY-1.6GF: grouped convs, squeeze-excite "
     "(11.2M params)", _tv_regnet(depth=27, w_0=48, w_a=20.71, w_m=2.65, group_width=24,
                                 se_ratio=0.25), False),
    ("tv:convnext_tiny", "torchvision", "ConvNeXt-Tiny: 7x7 depthwise convs, LayerNorm, "
     "GELU MLPs (28.6M params)", _tv_model("convnext_tiny"), True),
    ("tv:densenet121", "torchvision", "DenseNet-121: dense concatenation (8.0M params)",
     _tv_model("densenet121"), False),
    ("timm:resnet50d", "timm", "timm ResNet-50-D: deep stem, avg-pool shortcut (25.6M params)",
     _timm_model("resnet50d"), False),
    ("timm:efficientnet_b0", "timm", "timm EfficientNet-B0 (5.3M params)",
     _timm_model("efficientnet_b0"), False),
]
for _n, _lib_name, _d, _b, _cl in _CNNS:
    _add(_n, "cnn", _lib_name, _d, _VISION_DEFAULTS, _VISION_LARGE, _CNN_DTYPES, _cl, _b,
         {"hw": (32, 1024, 1)})

_VITS = [
    ("tv:vit_b_16", "torchvision", "ViT-B/16: 12 layers, 768 wide, 12 heads (86.6M params)",
     _tv_vit("vit_b_16"), _TF_DTYPES_FP16, {"hw": (16, 1024, 16)}),
    ("tv:swin_t", "torchvision", "Swin-T: shifted-window attention, 4 stages "
     "(28.3M params)", _tv_model("swin_t"), _TF_DTYPES, {"hw": (32, 1024, 32)}),
    ("timm:deit_small_patch16_224", "timm", "DeiT-S/16: 12 layers, 384 wide, 6 heads "
     "(22.1M params)", _timm_model("deit_small_patch16_224", True), _TF_DTYPES,
     {"hw": (16, 1024, 16)}),
    ("timm:vit_small_patch16_224", "timm", "ViT-S/16 (timm): 12 layers, 384 wide, 6 heads "
     "(22.1M params)", _timm_model("vit_small_patch16_224", True), _TF_DTYPES_FP16,
     {"hw": (16, 1024, 16)}),
]
for _n, _lib_name, _d, _b, _dt, _lim in _VITS:
    _add(_n, "vit", _lib_name, _d, _VISION_DEFAULTS, _VISION_LARGE, _dt, False, _b, _lim)


# --------------------------------------------------------------------- transformers
def _hf_model(cfg_name, model_name, **cfg):
    def make(sizes):
        hf = _hf()
        config = getattr(hf, cfg_name)(**cfg)
        return getattr(hf, model_name)(config)
    return make


_ENC_DEFAULTS = {"batch": 1, "seq": 128}
_ENC_LARGE = {"batch": 8, "seq": 512}

_ENCODERS = [
    ("hf:bert-base", "BERT-base (uncased): 12 layers, 768 wide, 12 heads, SDPA with a "
     "padding mask (BertModel, 110M params)",
     _hf_model("BertConfig", "BertModel", vocab_size=30522, hidden_size=768,
               num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
               max_position_embeddings=512, type_vocab_size=2), 512, _TF_DTYPES_FP16),
    ("hf:roberta-base", "RoBERTa-base: 12 layers, 768 wide, 12 heads (RobertaModel, "
     "125M params)",
     _hf_model("RobertaConfig", "RobertaModel", vocab_size=50265, hidden_size=768,
               num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
               max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
               bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5), 512, _TF_DTYPES),
    ("hf:distilbert", "DistilBERT-base (uncased): 6 layers, 768 wide, 12 heads "
     "(DistilBertModel, 66M params)",
     _hf_model("DistilBertConfig", "DistilBertModel", vocab_size=30522, dim=768, n_layers=6,
               n_heads=12, hidden_dim=3072, max_position_embeddings=512), 512, _TF_DTYPES),
    ("hf:albert-base", "ALBERT-base-v2: 12 layers sharing one set of weights, 128-wide "
     "factorised embedding, 768 wide, 12 heads (AlbertModel, 12M params)",
     _hf_model("AlbertConfig", "AlbertModel", vocab_size=30000, embedding_size=128,
               hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
               intermediate_size=3072, hidden_act="gelu_new", max_position_embeddings=512,
               type_vocab_size=2), 512, _TF_DTYPES),
    ("hf:electra-base", "ELECTRA-base discriminator: 12 layers, 768 wide, 12 heads "
     "(ElectraModel, 110M params)",
     _hf_model("ElectraConfig", "ElectraModel", vocab_size=30522, embedding_size=768,
               hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
               intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2),
     512, _TF_DTYPES),
]
for _n, _d, _b, _maxpos, _dt in _ENCODERS:
    _add(_n, "encoder", "transformers", _d, _ENC_DEFAULTS, _ENC_LARGE, _dt, False, _b,
         {"seq": (1, _maxpos, 1)})

_DEC_DEFAULTS = {"batch": 1, "seq": 128}
_DEC_LARGE = {"batch": 8, "seq": 512}
_LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}

_DECODERS = [
    ("hf:gpt2", "GPT-2 small: 12 layers, 768 wide, 12 heads, 50257-token LM head "
     "(GPT2LMHeadModel, 124M params)",
     _hf_model("GPT2Config", "GPT2LMHeadModel", vocab_size=50257, n_positions=1024,
               n_embd=768, n_layer=12, n_head=12, use_cache=False), 1024, _TF_DTYPES_FP16,
     _DEC_LARGE),
    ("hf:llama-3.2-1b", "Llama-3.2-1B: 16 layers, 2048 wide, 32 heads / 8 KV heads (GQA), "
     "SwiGLU 8192, RMSNorm, llama3 RoPE, tied 128256-token LM head (LlamaForCausalLM, "
     "1.24B params)",
     _hf_model("LlamaConfig", "LlamaForCausalLM", vocab_size=128256, hidden_size=2048,
               intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
               rms_norm_eps=1e-5, tie_word_embeddings=True, rope_parameters=_LLAMA3_ROPE,
               bos_token_id=128000, eos_token_id=128001, use_cache=False), 131072,
     _TF_DTYPES_FP16, _DEC_LARGE),
    ("hf:mistral-7b", "Mistral-7B-v0.1 dimensions with 4 of its 32 layers: 4096 wide, "
     "32 heads / 8 KV heads, SwiGLU 14336, sliding window 4096, 32000-token LM head "
     "(MistralForCausalLM, 1.1B params as built)",
     _hf_model("MistralConfig", "MistralForCausalLM", vocab_size=32000, hidden_size=4096,
               intermediate_size=14336, num_hidden_layers=4, num_attention_heads=32,
               num_key_value_heads=8, max_position_embeddings=32768, rms_norm_eps=1e-5,
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
               sliding_window=4096, tie_word_embeddings=False, use_cache=False), 32768,
     _TF_DTYPES, _DEC_LARGE),
    ("hf:qwen2-0.5b", "Qwen2-0.5B: 24 layers, 896 wide, 14 heads / 2 KV heads, SwiGLU 4864, "
     "QKV bias, tied 151936-token LM head (Qwen2ForCausalLM, 494M params)",
     _hf_model("Qwen2Config", "Qwen2ForCausalLM", vocab_size=151936, hidden_size=896,
               intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
               num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6,
               rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
               tie_word_embeddings=True, use_sliding_window=False, max_window_layers=24,
               bos_token_id=151643, eos_token_id=151643, use_cache=False), 32768,
     _TF_DTYPES, _DEC_LARGE),
    ("hf:phi-1.5", "Phi-1.5: 24 layers, 2048 wide, 32 heads, partial (50%) RoPE, parallel "
     "attention and GELU MLP, LayerNorm, 51200-token LM head (PhiForCausalLM, 1.4B params)",
     _hf_model("PhiConfig", "PhiForCausalLM", vocab_size=51200, hidden_size=2048,
               intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32,
               hidden_act="gelu_new", max_position_embeddings=2048, layer_norm_eps=1e-5,
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                "partial_rotary_factor": 0.5},
               tie_word_embeddings=False, use_cache=False), 2048, _TF_DTYPES, _DEC_LARGE),
    ("hf:opt-350m", "OPT-350m: 24 layers, 1024 wide, 16 heads, post-LayerNorm, 512-wide "
     "projected embeddings, ReLU MLP (OPTForCausalLM, 331M params)",
     _hf_model("OPTConfig", "OPTForCausalLM", vocab_size=50272, hidden_size=1024,
               num_hidden_layers=24, ffn_dim=4096, num_attention_heads=16,
               max_position_embeddings=2048, do_layer_norm_before=False,
               word_embed_proj_dim=512, activation_function="relu", use_cache=False),
     2048, _TF_DTYPES, _DEC_LARGE),
    ("hf:pythia-410m", "Pythia-410M (GPT-NeoX): 24 layers, 1024 wide, 16 heads, parallel "
     "residual, 25% RoPE, 50304-token LM head (GPTNeoXForCausalLM, 405M params)",
     _hf_model("GPTNeoXConfig", "GPTNeoXForCausalLM", vocab_size=50304, hidden_size=1024,
               num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
               hidden_act="gelu", max_position_embeddings=2048, use_parallel_residual=True,
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                "partial_rotary_factor": 0.25},
               tie_word_embeddings=False, use_cache=False), 2048, _TF_DTYPES, _DEC_LARGE),
]
for _n, _d, _b, _maxpos, _dt, _large in _DECODERS:
    _add(_n, "decoder", "transformers", _d, _DEC_DEFAULTS, _large, _dt, False, _b,
         {"seq": (1, _maxpos, 1)})

_ED_DEFAULTS = {"batch": 1, "seq": 128, "tgt": 32}
_ED_LARGE = {"batch": 8, "seq": 512, "tgt": 128}
_ENCDECS = [
    ("hf:t5-small", "T5-small: 6+6 layers, 512 wide, 8 heads, relative position bias, "
     "ReLU MLP 2048, 32128-token LM head (T5ForConditionalGeneration, 60M params)",
     _hf_model("T5Config", "T5ForConditionalGeneration", vocab_size=32128, d_model=512,
               d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6, num_heads=8,
               relative_attention_num_buckets=32, relative_attention_max_distance=128,
               feed_forward_proj="relu", tie_word_embeddings=True, decoder_start_token_id=0,
               use_cache=False), 4096, _TF_DTYPES),
    ("hf:bart-base", "BART-base: 6+6 layers, 768 wide, 12 heads, GELU MLP 3072, 50265-token "
     "LM head (BartForConditionalGeneration, 139M params)",
     _hf_model("BartConfig", "BartForConditionalGeneration", vocab_size=50265, d_model=768,
               encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
               decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072,
               max_position_embeddings=1024, use_cache=False), 1024, _TF_DTYPES),
]
for _n, _d, _b, _maxpos, _dt in _ENCDECS:
    _add(_n, "encdec", "transformers", _d, _ED_DEFAULTS, _ED_LARGE, _dt, False, _b,
         {"seq": (1, _maxpos, 1), "tgt": (1, _maxpos, 1)})

#: Short names accepted by :func:`build` (not listed separately).
ALIASES = {"timm:deit_small": "timm:deit_small_patch16_224",
           "timm:vit_small": "timm:vit_small_patch16_224",
           "hf:bert-base-uncased": "hf:bert-base", "hf:distilbert-base": "hf:distilbert",
           "hf:albert-base-v2": "hf:albert-base", "hf:gpt2-small": "hf:gpt2"}


# --------------------------------------------------------------------- held-out models
# Architectures the zoo does not have, at sizes it does not measure (vision 160 / 256
# pixels, MaxViT 448 / 224; encoders 64 / 256 tokens, decoders 256 / 1024,
# encoder-decoders 256 / 384), in fp32 and bf16. They score gpusim on models it never saw: nothing is developed or
# fitted on their records (validation/results/h100/holdout.jsonl.gz).
_HO_DTYPES = ("float32", "bfloat16")
_HO_CNN = ({"batch": 1, "hw": 256}, {"batch": 16, "hw": 160})
_HO_VIT = ({"batch": 1, "hw": 256}, {"batch": 8, "hw": 160})
_HO_ENC = ({"batch": 1, "seq": 64}, {"batch": 16, "seq": 256})
_HO_DEC = ({"batch": 1, "seq": 256}, {"batch": 4, "seq": 1024})
_HO_ED = ({"batch": 1, "seq": 256, "tgt": 64}, {"batch": 4, "seq": 384, "tgt": 96})

_HOLDOUT_VISION = [
    ("tv:resnext50_32x4d", "cnn", "torchvision", "ResNeXt-50 32x4d: grouped 3x3 convs "
     "(25.0M params)", _tv_model("resnext50_32x4d"), _HO_CNN, {"hw": (32, 1024, 1)}),
    ("tv:shufflenet_v2_x1_0", "cnn", "torchvision", "ShuffleNetV2 x1.0: channel split, "
     "shuffle and concat, depthwise convs (2.3M params)", _tv_model("shufflenet_v2_x1_0"),
     _HO_CNN, {"hw": (32, 1024, 32)}),
    ("tv:efficientnet_v2_s", "cnn", "torchvision", "EfficientNetV2-S: fused MBConv, "
     "squeeze-excite, SiLU (21.5M params)", _tv_model("efficientnet_v2_s"), _HO_CNN,
     {"hw": (32, 1024, 1)}),
    ("timm:convnextv2_nano", "cnn", "timm", "ConvNeXt-V2 nano: 7x7 depthwise convs, "
     "global response norm (15.6M params)", _timm_model("convnextv2_nano"), _HO_CNN,
     {"hw": (32, 1024, 32)}),
    ("tv:maxvit_t", "vit", "torchvision", "MaxViT-T: MBConv + block and grid attention "
     "with relative position bias (30.9M params)",
     lambda sizes: _tv().maxvit_t(weights=None, input_size=(sizes["hw"], sizes["hw"])),
     ({"batch": 1, "hw": 448}, {"batch": 8, "hw": 224}), {"hw": (224, 2240, 224)}),
    ("timm:caformer_s18", "vit", "timm", "CAFormer-S18 (MetaFormer): conv stages then "
     "attention stages, StarReLU (26.3M params)", _timm_model("caformer_s18"), _HO_VIT,
     {"hw": (64, 1024, 32)}),
    ("timm:beit_base_patch16_224", "vit", "timm", "BEiT-B/16: 12 layers, 768 wide, "
     "relative position bias per layer, layer scale (86.5M params)",
     _timm_model("beit_base_patch16_224", True), _HO_VIT, {"hw": (16, 1024, 16)}),
    ("timm:mixer_s16_224", "vit", "timm", "MLP-Mixer S/16: token- and channel-mixing MLPs, "
     "no attention (18.5M params)", _timm_model("mixer_s16_224", True), _HO_VIT,
     {"hw": (16, 1024, 16)}),
]
for _n, _fam, _lib_name, _d, _b, (_def, _lg), _lim in _HOLDOUT_VISION:
    _add(_n, _fam, _lib_name, _d, _def, _lg, _HO_DTYPES, False, _b, _lim, holdout=True)

_HOLDOUT_TEXT = [
    ("hf:xlm-roberta-base", "encoder", "XLM-RoBERTa-base: 12 layers, 768 wide, 250002-token "
     "embedding (XLMRobertaModel, 278M params)",
     _hf_model("XLMRobertaConfig", "XLMRobertaModel", vocab_size=250002, hidden_size=768,
               num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
               max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
               bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5), _HO_ENC, 512),
    ("hf:deberta-v3-small", "encoder", "DeBERTa-v3-small: 6 layers, 768 wide, disentangled "
     "relative attention (c2p + p2c, 256 buckets) (DebertaV2Model, 141M params)",
     _hf_model("DebertaV2Config", "DebertaV2Model", vocab_size=128100, hidden_size=768,
               num_hidden_layers=6, num_attention_heads=12, intermediate_size=3072,
               hidden_act="gelu", max_position_embeddings=512, type_vocab_size=0,
               relative_attention=True, max_relative_positions=-1, position_buckets=256,
               norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
               position_biased_input=False, layer_norm_eps=1e-7, pad_token_id=0),
     _HO_ENC, 512),
    ("hf:mobilebert", "encoder", "MobileBERT (uncased): 24 thin layers, 512 wide with "
     "128-wide bottlenecks, 4 stacked FFNs, no-norm (MobileBertModel, 24.6M params)",
     _hf_model("MobileBertConfig", "MobileBertModel", vocab_size=30522, hidden_size=512,
               num_hidden_layers=24, num_attention_heads=4, intermediate_size=512,
               hidden_act="relu", embedding_size=128, trigram_input=True,
               use_bottleneck=True, intra_bottleneck_size=128,
               use_bottleneck_attention=False, key_query_shared_bottleneck=True,
               num_feedforward_networks=4, normalization_type="no_norm",
               true_hidden_size=128, max_position_embeddings=512, type_vocab_size=2),
     _HO_ENC, 512),
    ("hf:gpt-neo-125m", "decoder", "GPT-Neo-125M: 12 layers alternating global and local "
     "(256-token window) attention, 768 wide (GPTNeoForCausalLM, 125M params)",
     _hf_model("GPTNeoConfig", "GPTNeoForCausalLM", vocab_size=50257,
               max_position_embeddings=2048, hidden_size=768, num_layers=12,
               attention_types=[[["global", "local"], 6]], num_heads=12, window_size=256,
               activation_function="gelu_new", use_cache=False), _HO_DEC, 2048),
    ("hf:bloom-560m", "decoder", "BLOOM-560m: 24 layers, 1024 wide, 16 heads, ALiBi, "
     "embedding LayerNorm, tied 250880-token LM head (BloomForCausalLM, 559M params)",
     _hf_model("BloomConfig", "BloomForCausalLM", vocab_size=250880, hidden_size=1024,
               n_layer=24, n_head=16, layer_norm_epsilon=1e-5, use_cache=False),
     _HO_DEC, 4096),
    ("hf:gemma-2b", "decoder", "Gemma-2B dimensions with 4 of its 18 layers: 2048 wide, "
     "8 heads of 256 / 1 KV head (MQA), GeGLU 16384, tied 256000-token LM head "
     "(GemmaForCausalLM, 0.9B params as built)",
     _hf_model("GemmaConfig", "GemmaForCausalLM", vocab_size=256000, hidden_size=2048,
               intermediate_size=16384, num_hidden_layers=4, num_attention_heads=8,
               num_key_value_heads=1, head_dim=256, hidden_activation="gelu_pytorch_tanh",
               max_position_embeddings=8192, rms_norm_eps=1e-6,
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
               tie_word_embeddings=True, pad_token_id=0, bos_token_id=2, eos_token_id=1,
               use_cache=False), _HO_DEC, 8192),
    ("hf:mt5-small", "encdec", "mT5-small: 8+8 layers, 512 wide, 6 heads, gated-GELU MLP "
     "1024, untied 250112-token LM head (MT5ForConditionalGeneration, 300M params)",
     _hf_model("MT5Config", "MT5ForConditionalGeneration", vocab_size=250112, d_model=512,
               d_kv=64, d_ff=1024, num_layers=8, num_decoder_layers=8, num_heads=6,
               relative_attention_num_buckets=32, relative_attention_max_distance=128,
               feed_forward_proj="gated-gelu", tie_word_embeddings=False,
               decoder_start_token_id=0, use_cache=False), _HO_ED, 4096),
    ("hf:opus-mt-en-de", "encdec", "Marian opus-mt-en-de: 6+6 layers, 512 wide, 8 heads, "
     "sinusoidal positions, SiLU MLP 2048, 58101-token LM head (MarianMTModel, 74M params)",
     _hf_model("MarianConfig", "MarianMTModel", vocab_size=58101, d_model=512,
               encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
               decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
               activation_function="swish", max_position_embeddings=512,
               scale_embedding=True, pad_token_id=58100, decoder_start_token_id=58100,
               share_encoder_decoder_embeddings=True, use_cache=False), _HO_ED, 512),
]
for _n, _fam, _d, _b, (_def, _lg), _maxpos in _HOLDOUT_TEXT:
    _lim = {k: (1, _maxpos, 1) for k in _def if k != "batch"}
    _add(_n, _fam, "transformers", _d, _def, _lg, _HO_DTYPES, False, _b, _lim, holdout=True)
