"""The model zoo: real architectures from torchvision, timm and Hugging Face transformers.

Every model is built from its configuration with random weights: nothing is downloaded
(no ``from_pretrained``, no hub access). Hugging Face models use the explicit config of
the checkpoint they are named after (hidden size, layers, heads, vocabulary written out
below); timm models come from ``timm.create_model(name, pretrained=False)`` and
torchvision models from ``torchvision.models.<name>(weights=None)``. Models over ~2B
parameters keep their real dimensions but fewer layers, and say so in the description.

``build(name, device="meta", ...)`` constructs the module directly on ``device`` (on
``meta`` nothing is allocated) in eval mode, with random inputs on that device:

* vision models take one image batch ``(batch, 3, hw, hw)``;
* encoders take ``(input_ids, attention_mask)`` with a mask of ones, as users pass it;
* decoders take ``(input_ids,)`` and run without a KV cache (``use_cache=False``);
* encoder-decoders take ``(input_ids, attention_mask, decoder_input_ids)``.

The libraries are the optional ``zoo`` extra (``pip install 'gpusim[zoo]'``); the
machines that validate these models run torch 2.11, torchvision 0.26, timm 1.0 and
transformers 5.17, so only APIs present there are used.
"""

from __future__ import annotations

import torch

from gpusim.models import zoo_any
from gpusim.models.catalogue import (_BUILDERS, _INPUTS, _LIMITS, _hf, _timm, _tv,  # noqa: F401
                                     ALIASES, FAMILIES, HOLDOUT, REFUSALS, ZOO, ZooModel)
from gpusim.models.examples import ModelError


# --------------------------------------------------------------------- build
def get(name: str) -> ZooModel:
    """The zoo entry for ``name`` (aliases and held-out models accepted);
    :class:`ModelError` if unknown."""
    key = ALIASES.get(name, name)
    if key in HOLDOUT:
        return HOLDOUT[key]
    if key not in ZOO and key.startswith(("timm:", "tv:", "hf:")):
        entry = zoo_any.lookup(key)     # any name its library lists
        if entry is not None:
            return entry
    if key not in ZOO:
        prefix = name.split(":", 1)[0] + ":" if ":" in name else ""
        lib = {"timm:": "timm.list_models()", "tv:": "torchvision.models.list_models()"}
        if prefix in lib:
            import difflib
            listed = (_timm().list_models() if prefix == "timm:" else _tv().list_models())
            close = difflib.get_close_matches(name[len(prefix):], listed, n=3)
            hint = f" (close: {', '.join(prefix + c for c in close)})" if close else ""
            raise ModelError(f"unknown model {name!r}: {lib[prefix]} has no "
                             f"{name[len(prefix):]!r}{hint}")
        near = [n for n in ZOO if prefix and n.startswith(prefix)] or list(ZOO)
        raise ModelError(f"unknown zoo model {name!r}; known: {', '.join(near)}")
    return ZOO[key]


def _dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    table = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
             "fp16": torch.float16, "half": torch.float16, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16}
    if dtype not in table:
        raise ModelError(f"unknown dtype {dtype!r}; choose float32, float16 or bfloat16")
    return table[dtype]


def _sizes(entry: ZooModel, sizes: dict) -> dict:
    unknown = [k for k in sizes if k not in entry.defaults]
    if unknown:
        raise ModelError(f"{entry.name} has no size {unknown[0]!r}; its sizes are "
                         + ", ".join(f"{k}={v}" for k, v in entry.defaults.items()))
    out = dict(entry.defaults)
    for k, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ModelError(f"{entry.name}: size {k}={v!r} must be a positive integer")
        lo, hi, mult = _LIMITS[entry.name].get(k, (1, 1 << 20, 1))
        if v < lo or v > hi or v % mult:
            rule = f"between {lo} and {hi}" + (f" and a multiple of {mult}" if mult > 1 else "")
            raise ModelError(f"{entry.name}: size {k}={v} must be {rule}")
        out[k] = v
    return out


def build(name: str, device="meta", dtype=torch.float32, channels_last: bool = False,
          **sizes):
    """Build zoo model ``name`` on ``device`` -> ``(module_in_eval_mode, args_tuple)``.

    Weights and inputs are random (inputs never zeros); on ``meta`` nothing is allocated.
    ``sizes`` override the entry's defaults (``batch``, ``hw``, ``seq``, ``tgt``).
    ``channels_last`` puts a vision model and its input in NHWC memory format.

    Raises :class:`ModelError` for unknown names or sizes and when the zoo extra
    (torchvision, timm, transformers) is not installed.
    """
    entry = get(name)
    dt = _dtype(dtype)
    sz = _sizes(entry, sizes)
    if channels_last and entry.family not in ("cnn", "vit"):
        raise ModelError(f"{entry.name}: channels_last applies to vision models only")
    device = torch.device(device)
    try:
        with torch.device(device):
            module = _BUILDERS[entry.name](sz)
    except (ModelError, ImportError):
        raise
    except Exception as e:  # noqa: BLE001 - the library's own builder: one line, not a traceback
        lines = str(e).strip().splitlines()
        raise ModelError(f"{entry.name}: {entry.library} could not build it on {device.type} "
                         f"({type(e).__name__}: {lines[0][:160] if lines else ''})") from None
    module = module.to(device=device, dtype=dt).eval()
    if channels_last:
        module = module.to(memory_format=torch.channels_last)
    return module, _inputs(entry, module, sz, device, dt, channels_last)


def inputs(name: str, module, device="meta", dtype=torch.float32, channels_last: bool = False,
           **sizes) -> tuple:
    """The random inputs :func:`build` makes for ``sizes``, for an already built module
    (to re-use one module across sizes)."""
    entry = get(name)
    return _inputs(entry, module, _sizes(entry, sizes), torch.device(device), _dtype(dtype),
                   channels_last)


def _inputs(entry, module, sz, device, dt, channels_last):
    if entry.name in _INPUTS:       # a model named by its library (gpusim.models.zoo_any)
        return _INPUTS[entry.name](module, sz, device, dt, channels_last)
    if entry.family in ("cnn", "vit"):
        x = torch.randn(sz["batch"], 3, sz["hw"], sz["hw"], device=device, dtype=dt)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return (x,)
    vocab = module.config.vocab_size
    # token ids above the special ids (pad/bos/eos are 0-2 in most vocabularies)
    ids = torch.randint(3, vocab, (sz["batch"], sz["seq"]), device=device)
    if entry.family == "decoder":
        return (ids,)
    mask = torch.ones(sz["batch"], sz["seq"], device=device, dtype=torch.long)
    if entry.family == "encoder":
        return (ids, mask)
    dec = torch.randint(3, vocab, (sz["batch"], sz["tgt"]), device=device)
    return (ids, mask, dec)


def catalogue(holdout: bool = False) -> list[list[str]]:
    """Rows for ``gpusim examples``: name, family, library, description, default sizes
    (``holdout``: the held-out models instead of the zoo)."""
    return [[m.name, m.family, m.library, m.description,
             " ".join(f"{k}={v}" for k, v in m.defaults.items())]
            for m in (HOLDOUT if holdout else ZOO).values()]
