"""Any model by the name its library uses, beside the zoo's curated list (:mod:`gpusim.models.zoo`).

* ``timm:NAME``: anything ``timm.list_models()`` lists, at the input size of its
  pretrained config (``pretrained_cfg.input_size``: channels and pixels).
* ``tv:NAME``: anything ``torchvision.models.list_models()`` lists whose inputs can be
  inferred from its family: classification at its weights' crop size, segmentation at
  their resize size, video as ``(batch, 3, frames, hw, hw)``, optical flow as two images,
  detection as a list of images (in eval mode its box filtering is data-dependent, so
  most detectors do not capture: the refusal says why).
* ``hf:ID``: a Hugging Face hub id or a local folder / ``config.json``, through
  ``AutoConfig`` (configuration only: nothing is downloaded, the id must be in the local
  cache). The class its ``architectures`` names (else ``AutoModel``) is built from the
  config with random weights; inputs follow the model's ``main_input_name`` and its
  ``forward`` signature: ``input_ids`` (+ ``attention_mask`` for encoders,
  + ``decoder_input_ids`` for encoder-decoders, ``seq``/``tgt`` tokens), ``pixel_values``
  at the config's ``image_size``, both for text-image models, ``input_features`` for
  speech encoders.

Every entry is registered with the zoo (its builder, size limits and inputs) the first
time it is named, so ``gpusim.models.zoo.build`` and ``.inputs`` take it as any other.
"""

from __future__ import annotations

import inspect
import os

import torch

from gpusim.models import catalogue
from gpusim.models.examples import ModelError

#: words in a timm model name that mark a transformer-style (patch-token) network; the
#: family only groups accuracy reports
_VIT_WORDS = ("vit", "deit", "beit", "swin", "eva", "xcit", "pit_", "levit", "crossvit",
              "mixer", "cait", "tnt_", "twins", "pvt", "coat", "convit", "mvit", "former",
              "gmlp", "resmlp", "volo", "sequencer", "hiera", "davit", "fastvit", "nextvit")
_ENTRIES: dict[str, catalogue.ZooModel] = {}
_VISION_DTYPES = catalogue._CNN_DTYPES
_TEXT_DTYPES = catalogue._TF_DTYPES


def lookup(key: str) -> catalogue.ZooModel | None:
    """The entry for ``tv:``/``timm:``/``hf:`` ``key`` outside the curated zoo; None when
    its library does not list the name (``hf:`` raises with what to do instead)."""
    if key in _ENTRIES:
        return _ENTRIES[key]
    prefix, _, name = key.partition(":")
    make = {"timm": _timm_entry, "tv": _tv_entry, "hf": _hf_entry}.get(prefix)
    entry = make(key, name) if make and name else None
    if entry is not None:
        _ENTRIES[key] = entry
    return entry


def _register(key, family, library, description, defaults, dtypes, builder, limits, inputs):
    entry = catalogue.ZooModel(key, family, library, description, dict(defaults),
                         dict(defaults, batch=32 if family in ("cnn", "vit") else 8),
                         tuple(dtypes), False)
    catalogue._BUILDERS[key] = builder
    catalogue._LIMITS[key] = dict(limits)
    catalogue._INPUTS[key] = inputs
    return entry


class _weights_on:
    """Create every parameter and buffer on ``device`` while the rest of a constructor
    runs where it is (the CPU): what ``accelerate.init_empty_weights`` does."""

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        nn = torch.nn.Module
        self.saved = nn.register_parameter, nn.register_buffer
        reg_p, reg_b, dev = self.saved[0], self.saved[1], self.device

        def register_parameter(mod, name, param):
            if param is not None:
                param = torch.nn.Parameter(param.to(dev), requires_grad=param.requires_grad)
            reg_p(mod, name, param)

        def register_buffer(mod, name, tensor, persistent=True):
            reg_b(mod, name, None if tensor is None else tensor.to(dev), persistent)
        nn.register_parameter, nn.register_buffer = register_parameter, register_buffer
        return self

    def __exit__(self, *exc):
        torch.nn.Module.register_parameter, torch.nn.Module.register_buffer = self.saved
        return False


def _image(sz, device, dt, channels=3, channels_last=False):
    x = torch.randn(sz["batch"], channels, sz["hw"], sz["hw"], device=device, dtype=dt)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


# --------------------------------------------------------------------- timm
def _timm_entry(key: str, name: str):
    timm = catalogue._timm()
    if not timm.is_model(name):
        return None
    cfg = timm.models.get_pretrained_cfg(name)
    size = tuple(cfg.input_size) if cfg is not None and cfg.input_size else (3, 224, 224)
    chans, hw = int(size[0]), int(size[-1])
    family = "vit" if any(w in name for w in _VIT_WORDS) else "cnn"

    def make(sizes):
        if sizes["hw"] == hw:
            return timm.create_model(name, pretrained=False)
        try:
            return timm.create_model(name, pretrained=False, img_size=sizes["hw"])
        except TypeError:        # a convolutional model: any size, no img_size argument
            return timm.create_model(name, pretrained=False)

    def inputs(module, sz, device, dt, channels_last):
        return (_image(sz, device, dt, chans, channels_last),)
    return _register(key, family, "timm", f"timm {name} (from timm.list_models(), input "
                     f"{hw}px from its pretrained config)", {"batch": 1, "hw": hw},
                     _VISION_DTYPES, make, {"hw": (16, 2048, 1)}, inputs)


# --------------------------------------------------------------------- torchvision
def _tv_entry(key: str, name: str):
    tvm = catalogue._tv()
    if name not in tvm.list_models():
        return None
    builder = tvm.get_model_builder(name)
    kind = builder.__module__.split(".")[2] if builder.__module__.count(".") > 2 else "classification"
    try:
        w = tvm.get_model_weights(name).DEFAULT
        t, meta = w.transforms(), w.meta
    except Exception:  # noqa: BLE001 - no published weights: the family's usual size
        t, meta = None, {}
    crop = getattr(t, "crop_size", None) or getattr(t, "resize_size", None)
    hw = int(crop[0]) if crop else {"segmentation": 520, "detection": 800}.get(kind, 224)
    defaults = {"batch": 1, "hw": hw}
    limits = {"hw": (max(16, int((meta.get("min_size") or (16,))[0])), 2048, 1)}
    if kind == "video":
        defaults["frames"] = max(16, int(meta.get("min_temporal_size") or 1))
        limits["frames"] = (int(meta.get("min_temporal_size") or 1), 512, 1)
    elif kind == "optical_flow":
        limits["hw"] = (128, 2048, 8)           # RAFT: multiples of 8, at least 128
    elif kind not in ("classification", "quantization", "segmentation", "detection"):
        raise ModelError(f"tv:{name}: gpusim cannot infer the inputs of torchvision's "
                         f"{kind} models; capture it from a file (path/to/file.py:NAME)")

    # nothing downloaded: detection and segmentation builders fetch ImageNet backbone
    # weights by default
    kw = {"weights": None}
    if "weights_backbone" in inspect.signature(builder).parameters:
        kw["weights_backbone"] = None

    def build(sizes):
        try:            # ViT-style builders fix their image size: build at the one asked
            return builder(image_size=sizes["hw"], **kw)
        except TypeError:
            return builder(**kw)

    def make(sizes):
        try:
            return build(sizes)
        except NotImplementedError as e:    # the builder computes with tensors (RegNet's
            if "meta" not in str(e):        # widths): run it on the CPU, weights on meta
                raise
            with torch.device("cpu"), _weights_on(torch.device("meta")):
                return build(sizes)

    def inputs(module, sz, device, dt, channels_last):
        if kind == "video":
            return (torch.randn(sz["batch"], 3, sz["frames"], sz["hw"], sz["hw"],
                                device=device, dtype=dt),)
        if kind == "optical_flow":
            return (_image(sz, device, dt), _image(sz, device, dt))
        if kind == "detection":
            return ([torch.randn(3, sz["hw"], sz["hw"], device=device, dtype=dt)
                     for _ in range(sz["batch"])],)
        return (_image(sz, device, dt, 3, channels_last),)
    if kind == "detection":
        catalogue.REFUSALS[key] = ("torchvision's detectors filter boxes by score and run NMS in eval "
                             "mode, so their output sizes depend on data, which gpusim's capture "
                             "on fake tensors cannot follow; predict the backbone "
                             "(e.g. tv:resnet50) or a classification model instead")
    family = "vit" if any(w in name for w in _VIT_WORDS) else "cnn"
    return _register(key, family, "torchvision", f"torchvision {name} ({kind}, from "
                     f"torchvision.models.list_models(), input {hw}px)", defaults,
                     _VISION_DTYPES, make, limits, inputs)


# --------------------------------------------------------------------- Hugging Face
def _hf_config(name: str):
    """AutoConfig from a local folder / config.json, else from the local cache only."""
    hf = catalogue._hf()
    path = os.path.expanduser(name)
    if os.path.isfile(path) and os.path.basename(path) == "config.json":
        path = os.path.dirname(path) or "."
    local = os.path.isdir(path)
    if not local and (name.startswith((".", "/", "~")) or name.endswith(".json")):
        raise ModelError(f"hf:{name}: no such folder or config.json; pass a directory with "
                         "config.json, or a hub id in the local cache")
    if local and not os.path.isfile(os.path.join(path, "config.json")):
        raise ModelError(f"hf:{name}: no config.json in that folder; pass a directory with "
                         "config.json")
    try:
        return hf.AutoConfig.from_pretrained(path if local else name, local_files_only=True,
                                             trust_remote_code=False)
    except (OSError, EnvironmentError):
        short = ", ".join(n for n in catalogue.ZOO if n.startswith("hf:"))
        raise ModelError(f"no config for hf:{name} in the local cache; pass a directory with "
                         f"config.json (hf:path/to/dir; nothing is downloaded) or a zoo name "
                         f"({short})") from None
    except ValueError as e:     # an unknown model_type, a config that needs remote code
        raise ModelError(f"hf:{name}: transformers cannot build this config "
                         f"({str(e).splitlines()[0][:160]})") from None


def _hf_class(hf, config):
    for arch in config.architectures or []:
        cls = getattr(hf, arch, None)
        if cls is not None:
            return cls
    return None


def _sub(config, attr, default=None):
    """A config value, or its text / vision sub-config's (CLIP-style models)."""
    for c in (config, getattr(config, "text_config", None), getattr(config, "vision_config", None),
              getattr(config, "encoder", None)):
        if c is not None and getattr(c, attr, None) is not None:
            return getattr(c, attr)
    return default


def _causal(config, arch: str) -> bool:
    """A decoder-only language model (input_ids alone, no padding mask): a causal-LM
    class (transformers' causal-LM mapping names it), or the base model of a type that
    has a causal LM and no masked LM (GPT-2, Llama; not BERT, whose mapping has both)."""
    from transformers.models.auto import modeling_auto as ma

    def names(mapping):
        out = set()
        for v in mapping.values():
            out.update(v if isinstance(v, (tuple, list)) else (v,))
        return out
    causal_lm = ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    if arch in names(causal_lm) or arch.endswith("ForCausalLM") or \
            getattr(config, "is_decoder", False):
        return True
    return (arch == ma.MODEL_MAPPING_NAMES.get(config.model_type) and config.model_type
            in causal_lm and config.model_type not in ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def _hf_entry(key: str, name: str):
    hf = catalogue._hf()
    config = _hf_config(name)
    config.use_cache = False            # as the zoo's decoders: no KV cache
    cls = _hf_class(hf, config)
    if cls is None:
        try:
            cls = hf.AutoModel._model_mapping[type(config)]
        except (KeyError, ValueError, AttributeError):
            raise ModelError(f"hf:{name}: transformers has no model class for "
                             f"{type(config).__name__}") from None
    order = [p for p in inspect.signature(cls.forward).parameters if p != "self"]
    params = set(order)
    texty, pixels = "input_ids" in params, "pixel_values" in params
    encdec = bool(getattr(config, "is_encoder_decoder", False))
    speech = "input_features" in params
    if not (texty or pixels or speech):
        raise ModelError(f"hf:{name}: gpusim cannot infer inputs for {config.model_type} "
                         f"(forward takes none of input_ids, pixel_values, input_features)")
    arch = cls.__name__
    causal = not encdec and _causal(config, arch)
    defaults, limits = {"batch": 1}, {}
    maxpos = _sub(config, "max_position_embeddings") or _sub(config, "n_positions") or 1 << 16
    img = _sub(config, "image_size")
    if texty:
        defaults["seq"] = min(128, int(maxpos))
        limits["seq"] = (1, int(maxpos), 1)
    if encdec:
        maxtgt = int(_sub(config, "max_target_positions") or maxpos)
        defaults["tgt"] = min(defaults.get("seq", 128), maxtgt)
        limits["tgt"] = (1, maxtgt, 1)
    if pixels and img is not None:
        defaults["hw"] = int(img if isinstance(img, int) else img[-1])
        limits["hw"] = (16, 4096, int(_sub(config, "patch_size", 1) or 1)
                        if isinstance(_sub(config, "patch_size", 1), int) else 1)
    elif pixels and not texty:
        raise ModelError(f"hf:{name}: its config gives no image_size; gpusim cannot infer "
                         "the pixel_values size")

    def make(sizes):
        return cls._from_config(config) if hasattr(cls, "_from_config") else cls(config)

    def inputs(module, sz, device, dt, channels_last):
        vocab = int(_sub(module.config, "vocab_size", 32000))
        given = {}
        if "seq" in sz:
            given["input_ids"] = torch.randint(3, vocab, (sz["batch"], sz["seq"]), device=device)
            if not causal:
                given["attention_mask"] = torch.ones(sz["batch"], sz["seq"], device=device,
                                                     dtype=torch.long)
        if "hw" in sz:
            chans = int(_sub(module.config, "num_channels", 3))
            given["pixel_values"] = _image(sz, device, dt, chans)
        if speech:
            mels = int(_sub(module.config, "num_mel_bins", 80))
            frames = 2 * int(_sub(module.config, "max_source_positions", 1500))
            given["input_features"] = torch.randn(sz["batch"], mels, frames, device=device,
                                                  dtype=dt)
        if encdec and "decoder_input_ids" in params:
            given["decoder_input_ids"] = torch.randint(3, vocab, (sz["batch"], sz["tgt"]),
                                                       device=device)
        # positional, in forward's order (None for what is not given): capture takes args
        last = max(order.index(k) for k in given if k in order)
        return tuple(given.get(p) for p in order[:last + 1])
    family = "encdec" if encdec else "decoder" if causal else (
        "vit" if pixels and not texty else "encoder")
    return _register(key, family, "transformers",
                     f"Hugging Face {config.model_type} ({arch}) from the config of {name}, "
                     "random weights", defaults, _TEXT_DTYPES, make, limits, inputs)
