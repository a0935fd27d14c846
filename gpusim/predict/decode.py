"""What Hugging Face's ``generate()`` runs, as functions gpusim captures on meta tensors.

A greedy ``model.generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False,
cache_implementation=...)`` (transformers 5.x, ``generation/utils.py``) runs

* the **prefill**: ``self(**inputs)`` over the prompt, eager even when the cache is static
  (``_prefill`` calls the module itself), with ``logits_to_keep=1`` (generate sets it when
  the forward takes it: the LM head sees one position), filling the cache;
* then per output token the **tail** generate's loop adds around the forward: the last
  position's logits copied to fp32, the logits processors (``MinNewTokensLengthLogitsProcessor``
  while fewer than ``min_new_tokens`` are out), the argmax, the EOS padding arithmetic, the
  ``cat`` of the new token onto ``input_ids``, the stopping criteria (max length, EOS) and the
  host's read of ``unfinished_sequences.max() == 0`` (a sync every token on CUDA:
  ``StopCheck``); then ``_update_model_kwargs_for_generation`` grows ``attention_mask`` and
  ``position_ids`` by one;
* for a compileable (static) cache, before every forward, prefill included,
  ``prepare_inputs_for_generation`` builds the 4D mask over all ``max_cache_len`` positions
  outside the model (``create_masks_for_generate``, eager: :func:`make_mask`);
* then **N-1 decode steps**: the forward over one token with the cache, ``attention_mask``
  and ``position_ids`` as generate passes them, eager for a ``DynamicCache``; for
  ``cache_implementation="static"`` through ``get_compiled_call(CompileConfig())``,
  ``torch.compile(mode="reduce-overhead")`` = CUDA graphs (``_valid_auto_compile_criteria``:
  a compileable cache that is not a ``DynamicCache``, on CUDA).

Caches are filled without running the model: ``cache.update`` with meta tensors of the
context length, one call per layer (docs/llm.md)."""

from __future__ import annotations

import torch

from gpusim.models.examples import ModelError
from gpusim.util.errors import UserError

CACHES = ("dynamic", "static")


def load_lm(model, dtype=torch.bfloat16):
    """A Hugging Face causal LM on ``meta``: a zoo name (``hf:llama-3.2-1b``), a
    ``path/to/file.py:NAME`` whose ``NAME()`` returns one, or the module itself."""
    if isinstance(model, str):
        if model.startswith("hf:"):
            from gpusim.models import zoo
            module, _ = zoo.build(model, device="meta", dtype=dtype)
        elif ":" in model:
            module = _from_file(model)
        else:
            raise ModelError(f"generate takes a Hugging Face causal LM: a zoo name such as "
                             f"hf:llama-3.2-1b or path/to/file.py:NAME, got {model!r}")
        label = model
    else:
        module, label = model, type(model).__name__
    if not (hasattr(module, "generate") and hasattr(module, "config")
            and hasattr(module.config, "num_hidden_layers")):
        raise ModelError(f"{label} is not a Hugging Face causal LM (no generate() or no "
                         "config.num_hidden_layers); generate predicts decoders such as hf:llama-3.2-1b")
    if any(p.device.type != "meta" for p in module.parameters()):
        module = module.to("meta")
    module = module.to(dtype=dtype).eval()
    module.config.use_cache = True
    return module, label


def _from_file(spec: str):
    import importlib.util
    import os
    path, _, name = spec.rpartition(":")
    if not os.path.isfile(path):
        raise ModelError(f"model file {path} does not exist")
    try:
        ms = importlib.util.spec_from_file_location("_gpusim_user_lm", path)
        mod = importlib.util.module_from_spec(ms)
        ms.loader.exec_module(mod)
        factory = getattr(mod, name)
        with torch.device("meta"):
            return factory()
    except AttributeError:
        raise ModelError(f"{path} has no {name!r}; NAME() must return a Hugging Face causal LM") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - user code
        first = str(e).splitlines()[0] if str(e) else ""
        raise ModelError(f"{spec} failed: {type(e).__name__}: {first}") from None


def head_dim(cfg) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def kv_heads(cfg) -> int:
    return getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads


def sliding_layers(cfg) -> list[int | None]:
    """Per layer, its sliding window (tokens) or None for full attention, as the config
    says (``layer_types``; a ``sliding_window`` with ``use_sliding_window`` off means none)."""
    window = getattr(cfg, "sliding_window", None)
    if getattr(cfg, "use_sliding_window", True) is False:
        window = None
    types = getattr(cfg, "layer_types", None) or (["sliding_attention" if window else "full_attention"]
                                                  * cfg.num_hidden_layers)
    return [window if t == "sliding_attention" and window else None for t in types]


def make_cache(module, kind: str, batch: int, context: int, max_len: int, dtype):
    """A ``DynamicCache`` holding ``context`` tokens, or a ``StaticCache`` of ``max_len``
    positions of which ``context`` are written, on meta."""
    from transformers import DynamicCache, StaticCache
    cfg = module.config
    if kind == "static":
        cache = StaticCache(config=cfg, max_cache_len=max_len)
    else:
        cache = DynamicCache(config=cfg)
    if context == 0:
        return cache
    pos = torch.arange(context, device="meta")
    for layer in range(cfg.num_hidden_layers):
        kv = torch.empty(batch, kv_heads(cfg), context, head_dim(cfg), device="meta", dtype=dtype)
        cache.update(kv, kv, layer, {"cache_position": pos})
    return cache


def cache_bytes(cache) -> int:
    """Bytes of a cache's key and value tensors (what HF's own cache object holds)."""
    total = 0
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def kv_cache_bytes(module, kind: str, batch: int, tokens: int, max_len: int, dtype) -> int:
    """Exact KV-cache bytes after ``tokens`` cached tokens: HF's own cache object, filled on
    meta. Full-attention layers: layers x 2 x kv_heads x head_dim x tokens x batch x dtype
    bytes; a static cache holds ``max_len`` positions; sliding-window layers are capped."""
    return cache_bytes(make_cache(module, kind, batch, tokens, max_len, dtype))


def eos_ids(module) -> list[int]:
    gc = getattr(module, "generation_config", None)
    eos = getattr(gc, "eos_token_id", None) if gc is not None else None
    if eos is None:
        eos = getattr(module.config, "eos_token_id", None)
    if eos is None:
        return []
    return [eos] if isinstance(eos, int) else list(eos)


def tail_fn(prompt: int, new: int, has_eos: bool, module=None):
    """Generate's own work per output token (see the module docstring), as a function of
    ``(logits, input_ids, unfinished, eos, pad, attention_mask, position_ids)``, through
    transformers' own objects where generate uses them (``LogitsProcessorList``,
    ``StoppingCriteriaList``, ``StopCheck`` and, given ``module``, its
    ``_update_model_kwargs_for_generation``), so that their Python runs as in generate
    (:class:`LibraryFrames`)."""
    from transformers.generation.logits_process import LogitsProcessorList, MinNewTokensLengthLogitsProcessor
    from transformers.generation.stopping_criteria import (EosTokenCriteria, MaxLengthCriteria,
                                                           StoppingCriteriaList)
    from transformers.generation.utils import StopCheck
    from transformers.modeling_outputs import CausalLMOutputWithPast

    def update(attention_mask, position_ids):
        if module is not None:
            kw = module._update_model_kwargs_for_generation(
                CausalLMOutputWithPast(), {"attention_mask": attention_mask, "position_ids": position_ids,
                                           "use_cache": True})
            return kw["attention_mask"], kw["position_ids"]
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((attention_mask.shape[0], 1))], dim=-1)
        step = torch.arange(1, dtype=position_ids.dtype, device=position_ids.device).view(1, -1)
        return attention_mask, torch.cat([position_ids, step + position_ids[..., -1:] + 1], dim=-1)

    def tail(logits, input_ids, unfinished, eos, pad, attention_mask, position_ids):
        attention_mask, position_ids = update(attention_mask, position_ids)
        scores = logits[:, -1].to(copy=True, dtype=torch.float32)
        stops = [MaxLengthCriteria(max_length=prompt + new)]
        procs = LogitsProcessorList([MinNewTokensLengthLogitsProcessor(prompt, new, eos)] if has_eos else [])
        if has_eos:
            stops.append(EosTokenCriteria(eos))
        scores = procs(input_ids, scores)
        nxt = torch.argmax(scores, dim=-1)
        if has_eos:
            nxt = nxt * unfinished + pad * (1 - unfinished)
        input_ids = torch.cat([input_ids, nxt[:, None]], dim=-1)
        unfinished = unfinished & ~StoppingCriteriaList(stops)(input_ids, scores)
        done = StopCheck()(unfinished, nxt, input_ids.shape[1])     # the host reads it every token
        return input_ids, unfinished, attention_mask, position_ids, done
    return tail


def tail_args(module, batch: int, length: int):
    """Meta arguments of :func:`tail_fn` when ``input_ids`` holds ``length`` tokens."""
    m = dict(device="meta")
    eos = eos_ids(module) or [0]
    return (torch.empty(batch, 1, module.config.vocab_size, dtype=module.dtype, **m),
            torch.zeros(batch, length, dtype=torch.long, **m),
            torch.ones(batch, dtype=torch.long, **m),
            torch.tensor(eos, dtype=torch.long, **m), torch.tensor(eos[0], dtype=torch.long, **m),
            torch.ones(batch, length, dtype=torch.long, **m),
            torch.zeros(batch, length, dtype=torch.long, **m))


def make_mask(module, ids, cache, attention_mask, position_ids):
    """What ``prepare_inputs_for_generation`` builds, outside the model, for a compileable
    (static) cache: the 4D mask over all ``max_cache_len`` positions
    (``create_masks_for_generate``), so that the compiled forward sees fixed shapes."""
    from transformers.masking_utils import create_masks_for_generate
    f = getattr(module, "create_masks_for_generate", create_masks_for_generate)
    return f(config=module.config, inputs_embeds=torch.empty((ids.shape[0], ids.shape[1], 0), dtype=module.dtype,
                                                             device=ids.device),
             attention_mask=attention_mask, past_key_values=cache, position_ids=position_ids)


def prep_fn(module):
    """What generate runs before each decode forward: ``prepare_inputs_for_generation(input_ids,
    next_sequence_length=1, **model_kwargs)``, the module's own (slices the last token of
    ``input_ids`` and ``position_ids`` and clones them; for a compileable cache also builds the
    4D mask, :func:`make_mask`), as a function of :func:`prep_args`."""
    def prep(ids, cache, attention_mask, position_ids):
        mi = module.prepare_inputs_for_generation(ids, next_sequence_length=1, past_key_values=cache,
                                                  attention_mask=attention_mask,
                                                  position_ids=position_ids, use_cache=True)
        return mi["input_ids"], mi["position_ids"], mi["attention_mask"]
    return prep


def prep_args(module, kind: str, batch: int, context: int, max_len: int, dtype):
    """Meta arguments of :func:`prep_fn` before the step over ``context`` cached tokens:
    generate's whole ``input_ids``, 2D ``attention_mask`` and ``position_ids`` (``context + 1``
    tokens) and the cache."""
    m = dict(device="meta")
    return (torch.zeros(batch, context + 1, dtype=torch.long, **m),
            make_cache(module, kind, batch, context, max_len, dtype),
            torch.ones(batch, context + 1, dtype=torch.long, **m),
            torch.zeros(batch, context + 1, dtype=torch.long, **m))


def mask_of(graph):
    """``(shape, torch dtype)`` of the 4D mask among a :func:`prep_fn` graph's outputs; None
    when it has none (a cache that is not compileable keeps the 2D mask)."""
    outs = [graph.g.nodes[n] for n in graph.g.nodes if graph.g.nodes[n].get("is_output")]
    outs = [o for o in outs if len(o.get("shape") or ()) == 4]
    if len(outs) != 1:
        return None
    return tuple(outs[0]["shape"]), getattr(torch, str(outs[0]["dtype"]).replace("torch.", ""))


class LibraryFrames:
    """Counts the Python function calls (frames) the Hugging Face library runs inside a call:
    ``sys.setprofile`` ``call`` events whose code lives in the ``transformers`` package
    (functions, methods, properties and closures of ``masking_utils``, the cache, the logits
    processors and stopping criteria). Capture answers every host read as eager meets it, so
    the same library code runs as in eager: the count is what one call of it costs in Python
    frames, the same on every run (counting, not clocking). Wraps ``fn``; ``frames`` holds the
    last run's count (capture may retry a trace)."""

    def __init__(self, fn):
        import os

        import transformers
        self.fn, self.frames = fn, 0
        self._root = os.path.dirname(transformers.__file__) + os.sep

    def __call__(self, *args):
        import sys
        n, root = [0], self._root

        def on(frame, event, arg):
            if event == "call" and frame.f_code.co_filename.startswith(root):
                n[0] += 1
        prev = sys.getprofile()
        sys.setprofile(on)
        try:
            return self.fn(*args)
        finally:
            sys.setprofile(prev)
            self.frames = n[0]


def forward_fn(module, keep_cache: bool = False, build_mask: bool = False):
    """The model's forward as generate calls it (prefill or decode: the inputs say which).

    ``keep_cache``: return the cache too, so that its tensors are graph outputs alive when
    the call returns (the prefill: the cache it fills outlives it). A decode step returns
    the logits; its grown cache lives to the end of the call anyway (capture observes the
    cache object holding it, :mod:`gpusim.capture.lifetimes`)."""
    def forward(ids, cache, attention_mask, position_ids):
        if build_mask:      # a static cache's prefill: generate builds the 4D mask first (eager)
            attention_mask = make_mask(module, ids, cache, attention_mask, position_ids)
        out = module(input_ids=ids, past_key_values=cache, attention_mask=attention_mask,
                     position_ids=position_ids, use_cache=True, logits_to_keep=1)
        return (out.logits, out.past_key_values) if keep_cache else out.logits
    return forward


def forward_args(module, kind: str, batch: int, tokens: int, context: int, max_len: int, dtype,
                 mask=None):
    """Meta arguments of :func:`forward_fn`: ``tokens`` new tokens over ``context`` cached;
    ``mask``: ``(shape, dtype)`` of a prepared 4D mask in place of the 2D one."""
    m = dict(device="meta")
    am = (torch.empty(mask[0], dtype=mask[1], **m) if mask is not None
          else torch.ones(batch, context + tokens, dtype=torch.long, **m))
    return (torch.zeros(batch, tokens, dtype=torch.long, **m),
            make_cache(module, kind, batch, context, max_len, dtype), am,
            torch.zeros(batch, tokens, dtype=torch.long, **m))


def check_request(batch, prompt, new, cache, mode) -> None:
    """One line for each thing a generate request cannot be."""
    for name, v in (("batch", batch), ("prompt", prompt), ("new", new)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UserError(f"--{name} must be a whole number of at least 1, got {v!r}")
    if cache not in CACHES:
        raise UserError(f"unknown --cache {cache!r}; choose dynamic (HF's default DynamicCache) "
                        "or static (cache_implementation=\"static\")")
    if mode not in ("eager", "compiled"):
        raise UserError(f"unknown --mode {mode!r} for generate; choose eager or compiled "
                        "(generate's own torch.compile of a static cache: CUDA graphs)")
    if mode == "compiled" and cache != "static":
        raise UserError("generate compiles the forward only with a static cache; use --cache "
                        "static --mode compiled, or --mode eager with the dynamic cache")
