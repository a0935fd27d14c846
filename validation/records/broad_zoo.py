"""The broad sample's Hugging Face models by config (``hfcfg:<model_type>``) and the zoo
that builds them and ``timm:`` names (:class:`BroadZoo`), apart from the harness
(:mod:`validation.measure.broad_run`) so that scoring (:mod:`validation.records.store`) can rebuild a row
without importing the harness."""

from __future__ import annotations

from types import SimpleNamespace

TEXT_SIZES = {"batch": 64, "seq": 256}
ENCDEC_SIZES = {"batch": 64, "seq": 256, "tgt": 64}

#: Hugging Face models from their config classes: model_type -> (class, config kwargs,
#: inputs, family). Defaults where the default config is a common checkpoint's size;
#: fewer layers (real widths) where it is a multi-billion model
HF_CONFIGS = {
    "bert": ("BertModel", {}, "text", "encoder"),
    "roberta": ("RobertaModel", {"max_position_embeddings": 514, "pad_token_id": 1,
                                 "bos_token_id": 0, "eos_token_id": 2, "type_vocab_size": 1},
                "text", "encoder"),
    "distilbert": ("DistilBertModel", {}, "text", "encoder"),
    "albert": ("AlbertModel", {"hidden_size": 768, "num_attention_heads": 12,
                               "intermediate_size": 3072}, "text", "encoder"),
    "electra": ("ElectraModel", {}, "text", "encoder"),
    "deberta-v2": ("DebertaV2Model", {"hidden_size": 768, "num_hidden_layers": 12,
                                      "num_attention_heads": 12, "intermediate_size": 3072,
                                      "relative_attention": True, "position_buckets": 256,
                                      "pos_att_type": ["p2c", "c2p"],
                                      "max_relative_positions": -1}, "text", "encoder"),
    "mpnet": ("MPNetModel", {}, "text", "encoder"),
    "gpt2": ("GPT2LMHeadModel", {"use_cache": False}, "decoder", "decoder"),
    "opt": ("OPTForCausalLM", {"use_cache": False}, "decoder", "decoder"),
    "gpt_neox": ("GPTNeoXForCausalLM", {"hidden_size": 1024, "num_hidden_layers": 6,
                                        "num_attention_heads": 16, "intermediate_size": 4096,
                                        "use_cache": False}, "decoder", "decoder"),
    "llama": ("LlamaForCausalLM", {"hidden_size": 2048, "intermediate_size": 5632,
                                   "num_hidden_layers": 4, "num_attention_heads": 32,
                                   "num_key_value_heads": 4, "use_cache": False},
              "decoder", "decoder"),
    "mistral": ("MistralForCausalLM", {"num_hidden_layers": 2, "num_key_value_heads": 8,
                                       "use_cache": False}, "decoder", "decoder"),
    "qwen2": ("Qwen2ForCausalLM", {"hidden_size": 896, "intermediate_size": 4864,
                                   "num_hidden_layers": 6, "num_attention_heads": 14,
                                   "num_key_value_heads": 2, "use_cache": False},
              "decoder", "decoder"),
    "phi": ("PhiForCausalLM", {"num_hidden_layers": 4, "use_cache": False}, "decoder", "decoder"),
    "gemma": ("GemmaForCausalLM", {"hidden_size": 2048, "intermediate_size": 16384,
                                   "num_hidden_layers": 2, "num_attention_heads": 8,
                                   "num_key_value_heads": 1, "head_dim": 256,
                                   "use_cache": False}, "decoder", "decoder"),
    "t5": ("T5ForConditionalGeneration", {"use_cache": False}, "encdec", "encdec"),
    "bart": ("BartForConditionalGeneration", {"use_cache": False}, "encdec", "encdec"),
    "whisper": ("WhisperModel", {"use_cache": False}, "audio", "encdec"),
    "vit": ("ViTModel", {}, "image", "vit"),
    "swin": ("SwinModel", {}, "image", "vit"),
    "beit": ("BeitModel", {}, "image", "vit"),
    "dinov2": ("Dinov2Model", {}, "image", "vit"),
    "clip_vision_model": ("CLIPVisionModel", {}, "image", "vit"),
    "convnext": ("ConvNextModel", {}, "image", "cnn"),
    "resnet": ("ResNetModel", {}, "image", "cnn"),
    "segformer": ("SegformerModel", {}, "image", "vit"),
}


def hf_sizes(kind: str) -> dict:
    return dict({"text": TEXT_SIZES, "decoder": TEXT_SIZES, "encdec": ENCDEC_SIZES,
                 "audio": {"batch": 64, "tgt": 64}, "image": {"batch": 256, "hw": 224}}[kind])


class BroadZoo:
    """``gpusim.models.zoo``'s get/build/inputs for ``timm:<name>`` (delegated) and
    ``hfcfg:<model_type>`` (:data:`HF_CONFIGS`)."""

    def __init__(self, configs=None):
        self.configs = HF_CONFIGS if configs is None else configs

    @classmethod
    def from_row(cls, rec: dict) -> "BroadZoo":
        """The zoo that rebuilds a record's model as it was measured: its own
        ``hf_config`` (not today's :data:`HF_CONFIGS`) for ``hfcfg:`` rows."""
        c = rec.get("hf_config")
        if not c:
            return cls()
        return cls({c["model_type"]: (c["class"], c["kwargs"], c["inputs"], rec["family"])})

    def get(self, name):
        if not name.startswith("hfcfg:"):
            from gpusim.models import zoo
            return zoo.get(name)
        mt = name.split(":", 1)[1]
        cls, kw, kind, family = self.configs[mt]
        return SimpleNamespace(name=name, family=family, library="transformers",
                               defaults=hf_sizes(kind), description=f"{cls} from its config")

    def hf_config(self, name) -> dict:
        mt = name.split(":", 1)[1]
        cls, kw, kind, _ = self.configs[mt]
        return {"model_type": mt, "class": cls, "kwargs": kw, "inputs": kind}

    def build(self, name, device="meta", dtype=None, channels_last=False, **sizes):
        import torch
        dtype = dtype or torch.float32
        if not name.startswith("hfcfg:"):
            from gpusim.models import zoo
            return zoo.build(name, device=device, dtype=dtype, channels_last=channels_last,
                             **sizes)
        import transformers as hf
        c = self.hf_config(name)
        config = hf.AutoConfig.for_model(c["model_type"], **c["kwargs"])
        with torch.device(device):
            module = getattr(hf, c["class"])(config)
        module = module.to(device=device, dtype=dtype).eval()
        return module, self.inputs(name, module, device, dtype, channels_last, **sizes)

    def inputs(self, name, module, device="meta", dtype=None, channels_last=False, **sizes):
        import torch
        if not name.startswith("hfcfg:"):
            from gpusim.models import zoo
            return zoo.inputs(name, module, device=device, dtype=dtype,
                              channels_last=channels_last, **sizes)
        kind = self.hf_config(name)["inputs"]
        sz = dict(hf_sizes(kind), **sizes)
        cfg = module.config
        if kind == "image":
            n_ch = getattr(cfg, "num_channels", 3)
            return (torch.randn(sz["batch"], n_ch, sz["hw"], sz["hw"], device=device, dtype=dtype),)
        vocab = cfg.vocab_size
        dec = lambda n: torch.randint(3, vocab, (sz["batch"], n), device=device)  # noqa: E731
        if kind == "audio":           # log-mel frames: 2x the encoder's positions
            feats = torch.randn(sz["batch"], cfg.num_mel_bins, 2 * cfg.max_source_positions,
                                device=device, dtype=dtype)
            return (feats, None, dec(sz["tgt"]))
        ids = dec(sz["seq"])
        if kind == "decoder":
            return (ids,)
        mask = torch.ones(sz["batch"], sz["seq"], device=device, dtype=torch.long)
        return (ids, mask) if kind == "text" else (ids, mask, dec(sz["tgt"]))


# ------------------------------------------------------------------------ plan
