"""Models by name: what the CLI and the API accept as MODEL, and the size/dtype words.

``MODEL`` is one of

* a built-in example (``gpusim examples``: the classic fusion cases and small real
  models written in plain ``torch.nn``), sizes overridable with ``key=value``;
* a zoo model from torchvision, timm or Hugging Face transformers, ``tv:NAME``,
  ``timm:NAME`` or ``hf:NAME`` (built from its config with random weights, nothing is
  downloaded; needs the optional ``zoo`` extra), sizes such as ``batch`` and ``seq``;
* ``path/to/file.py:NAME``, where ``NAME()`` returns ``(callable_or_module, args)``.

Every mistake raises :class:`ModelError` (a :class:`~gpusim.util.errors.GpusimError`) with a
message that says what to do.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import os

import torch

from gpusim.capture.tracing import CaptureError, capture
from gpusim.util.errors import UserError
from gpusim.models.examples import EXAMPLES, ModelError, build_example
from gpusim.graph.opgraph import OpGraph

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
          "fp16": torch.float16, "half": torch.float16, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16}
ZOO_PREFIXES = ("tv:", "timm:", "hf:")


def parse_dtype(name) -> torch.dtype:
    """``"bf16"`` (or ``"BF16"``: a choice, not a name) -> ``torch.bfloat16``; a torch
    dtype passes through."""
    if isinstance(name, torch.dtype):
        return name
    key = name.lower() if isinstance(name, str) else name
    if key not in DTYPES:
        raise UserError(f"unknown dtype {name!r}; choose float32, float16 or bfloat16")
    return DTYPES[key]


def parse_sizes(items) -> dict:
    """``["batch=8", "seq=128"]`` (or ``["batch=8,seq=128"]``: one ``--size`` may give
    several keys) -> ``{"batch": 8, "seq": 128}``; sizes are positive integers (a size
    that is not, or is absurdly large, is a user mistake)."""
    out = {}
    for it in [x for item in items or [] for x in item.split(",")]:
        if "=" not in it:
            raise UserError(f"--size takes KEY=VALUE, got {it!r}")
        k, v = (x.strip() for x in it.split("=", 1))
        if not k:
            raise UserError(f"--size {it!r} has no key; write KEY=VALUE")
        if k in out:
            raise UserError(f"--size {k} given twice; give each size once")
        try:
            f = int(v)                  # exactly: a float would round 2**53 + 1
        except ValueError:
            try:
                f = float(v)            # 1e6, 4096.0
            except ValueError:
                raise UserError(f"--size {k}: {v!r} is not a number") from None
        if not math.isfinite(f) or f != int(f):
            raise UserError(f"--size {k}={v}: sizes are whole numbers")
        if f < 1:
            raise UserError(f"--size {k}={v}: sizes must be at least 1")
        if f > 2 ** 62:
            raise UserError(f"--size {k}={v} is too large")
        out[k] = int(f)
    return out


def load_model(spec: str, device="meta", dtype=torch.float32, **sizes):
    """A model by name -> ``(callable_or_module, args, label)``."""
    dtype = parse_dtype(dtype)
    if spec in EXAMPLES:
        fn, args = build_example(spec, device, dtype, **sizes)
        return fn, args, spec
    if spec.startswith(ZOO_PREFIXES):
        from gpusim.models import zoo          # optional extra: torchvision, timm, transformers
        fn, args = zoo.build(spec, device=device, dtype=dtype, **sizes)
        return fn, args, spec
    if ":" not in spec:
        close = difflib.get_close_matches(spec.lower(), list(EXAMPLES), n=1, cutoff=0.7)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ModelError(f"unknown model {spec!r}{hint}: give a built-in example ({', '.join(EXAMPLES)}), "
                         "a zoo model (tv:NAME, timm:NAME, hf:NAME; `gpusim examples` lists them) "
                         "or path/to/file.py:NAME, where NAME() returns (callable_or_module, args)")
    return _load_file(spec, sizes)


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else ""


def load_builder(spec: str):
    """``path/file.py:NAME`` -> the callable NAME itself, not called (a builder across GPUs, which gpusim
    calls under its fake process group)."""
    path, _, name = spec.rpartition(":")
    if not path.endswith(".py"):
        raise ModelError(f"{spec!r}: across GPUs gpusim needs your builder, path/file.py:NAME, or a zoo "
                         "model with --train --ddp/--fsdp")
    return _file_callable(path, name)


def _file_callable(path: str, name: str):
    if not os.path.isfile(path):
        raise ModelError(f"model file {path} does not exist")
    try:
        modspec = importlib.util.spec_from_file_location("_gpusim_user_model", path)
        mod = importlib.util.module_from_spec(modspec)
        modspec.loader.exec_module(mod)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - user code (sys.exit too)
        raise ModelError(f"{path} failed to import: {type(e).__name__}: {_first_line(e)}") from None
    if not hasattr(mod, name):
        have = [k for k, v in vars(mod).items() if callable(v) and not k.startswith("_")
                and getattr(v, "__module__", None) == "_gpusim_user_model"]
        raise ModelError(f"{path} has no {name!r}; it defines: {', '.join(have) or 'no callables'}")
    factory = getattr(mod, name)
    if not callable(factory):
        raise ModelError(f"{path}:{name} is not callable; it must be a function returning (model, args)")
    return factory


def _load_file(spec: str, sizes: dict):
    path, _, name = spec.rpartition(":")
    if sizes:
        raise ModelError("--size applies to built-in and zoo models only; set sizes inside your file")
    factory = _file_callable(path, name)
    try:
        out = factory()
    except (Exception, SystemExit) as e:  # noqa: BLE001 - user code (sys.exit too)
        raise ModelError(f"{path}:{name}() raised {type(e).__name__}: {_first_line(e)}") from None
    if not (isinstance(out, tuple) and len(out) == 2 and callable(out[0])
            and isinstance(out[1], (tuple, list))):
        raise ModelError(f"{path}:{name}() must return (callable_or_module, args_tuple), got "
                         f"{type(out).__name__}")
    return out[0], tuple(out[1]), f"{os.path.basename(path)}:{name}"


def check_amp(amp, dtype="float32"):
    """The autocast dtype name for ``amp`` (None: no autocast); AMP runs an fp32 model."""
    from gpusim.capture.amp import amp_name
    name = amp_name(amp)
    if name is not None and parse_dtype(dtype) != torch.float32:
        raise UserError(f"--amp {name} runs an fp32 model under autocast; drop --dtype "
                        f"{dtype} (or use --dtype float32)")
    return name


def model_graph(spec: str, dtype="float32", sizes=None, amp=None) -> OpGraph:
    """Load a model by name and capture it on meta tensors (:func:`gpusim.capture`);
    ``amp`` (``"bf16"``/``"fp16"``): fp32 weights, the forward under autocast."""
    amp = check_amp(amp, dtype)
    fn, args, label = load_model(spec, device="meta", dtype=parse_dtype(dtype), **(sizes or {}))
    try:
        return capture(fn, args, name=label + (f" amp {amp}" if amp else ""), amp=amp)
    except CaptureError as e:
        known = _known_refusal(spec)
        if known:       # a family gpusim knows it cannot follow: say that, not torch's words
            raise ModelError(f"{spec}: {known}") from None
        # a built-in or zoo model traces at its defaults, so a failure with the user's
        # --size is the sizes' doing (torch's words blame the model): say which knob to turn
        if not sizes:
            raise
        given = " ".join(f"{k}={v}" for k, v in sizes.items())
        if "overflow" in str(e).lower():
            raise UserError(f"--size {given}: a tensor of {spec} would hold more bytes than a "
                            "64-bit size can count; give smaller sizes") from None
        why = str(e).split("; check that")[0]
        raise UserError(f"{spec} does not trace with --size {given} ({why}); check that the "
                        "sizes fit together (`gpusim examples` lists the defaults)") from None


def _known_refusal(spec: str) -> str | None:
    """Why a library-named model of a family capture cannot follow fails (None: not one)."""
    if not spec.startswith(ZOO_PREFIXES):
        return None
    from gpusim.models import zoo
    return zoo.REFUSALS.get(zoo.ALIASES.get(spec, spec))
