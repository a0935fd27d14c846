"""Training steps beyond one prediction: the largest batch that fits, and the standard step the
CLI builds for a named model (a step's prediction read by phase: :mod:`gpusim.predict.phases`).

:func:`max_batch` searches the batch size (:func:`largest_batch`: along the line memory draws
against the batch, with bisection as the fallback). Memory grows with the batch (activations,
inputs), which the search assumes (a property test checks it on a model).

:func:`standard_step` is what ``gpusim predict MODEL --train`` runs: ``zero_grad(set_to_none=
True)``, the loss, ``backward()``, ``opt.step()``, as the training zoo measures it
(``validation/measure/train_step.py``). Losses: cross-entropy over 1,000 classes for vision
classifiers (torchvision/timm, random targets), the model's own language-model loss for
Hugging Face causal LMs (``labels=input_ids``: next-token cross-entropy) and
sequence-to-sequence models (``labels`` = the decoder ids), the mean of the fp32 last
hidden state for encoders without a head (``hf:bert-base``), and for built-in examples (no
labels) the mean square of the output.
"""

from __future__ import annotations

from gpusim.predict.pipeline import as_spec, predict
from gpusim.sim.memory import capacity_bytes
from gpusim.util.errors import UserError

OPTIMIZERS = ("sgd", "adam", "adamw", "adamw_fused")


def largest_batch(probe, capacity: float, start: int = 1, limit: int = 1 << 16) -> dict:
    """The largest batch ``b`` in ``[start, limit]`` for which ``probe(b)`` -> ``(bytes, fits)``
    fits, assuming fitting is monotone in the batch. Memory grows about linearly with the
    batch (the weights and states fixed, activations per sample), so the next batch tried is
    where the line through two probes meets ``capacity``: growing, through the last two that
    fit (at most ``GROW`` times the last; twice from ``start``); narrowing, through the two
    ends of the bracket, kept strictly inside it, and a step twice the last one from the end
    that moved whenever the same end moved twice running (so a curved law still converges).
    About five probes where doubling and bisection take ``2 log2`` of the answer. ``fits``
    decides; the bytes only aim. Returns ``{"batch": largest fitting (0: not even start),
    "tried": {batch: bytes}, "limit_reached": bool}``."""
    tried: dict[int, float] = {}

    def fits(b: int) -> bool:
        tried[b], ok = probe(b)
        return ok

    def aim(a: int, b: int) -> int | None:
        """Where the line through the probes at ``a`` and ``b`` meets the capacity."""
        slope = (tried[b] - tried[a]) / (b - a)
        return a + int((capacity - tried[a]) // slope) if slope > 0 else None
    if not fits(start):
        return {"batch": 0, "tried": tried, "limit_reached": False}
    good, bad, prev = start, None, None
    while bad is None:                      # grow along the line
        if good >= limit:
            return {"batch": good, "tried": tried, "limit_reached": True}
        guess = aim(prev, good) if prev is not None else None
        nxt = min(limit, GROW * good, max(good + 1, guess if guess is not None else 2 * good))
        if prev is None:
            nxt = min(limit, 2 * good)
        if fits(nxt):
            prev, good = good, nxt
        else:
            bad = nxt
    moved = []                              # which end each narrowing step moved
    while bad - good > 1:
        if len(moved) >= 2 and moved[-1] == moved[-2]:
            step = 2 * max(1, moved[-1][1])
            mid = good + step if moved[-1][0] == "good" else bad - step
        else:
            guess = aim(good, bad)
            mid = (good + bad) // 2 if guess is None else guess
        mid = min(bad - 1, max(good + 1, mid))
        if fits(mid):
            moved.append(("good", mid - good))
            good = mid
        else:
            moved.append(("bad", bad - mid))
            bad = mid
    return {"batch": good, "tried": tried, "limit_reached": False}


GROW = 64      # the furthest one growing step goes, as a multiple of the last batch that fit


def max_batch(make, gpu="h100", start: int = 1, limit: int = 1 << 16, host=None) -> dict:
    """The largest batch whose step fits on ``gpu``: ``make(batch)`` returns ``(step_fn,
    args)``; :func:`largest_batch` over the predicted memory (``"tried"``: batch -> total
    bytes)."""
    spec = as_spec(gpu)

    def probe(b: int):
        fn, args = make(b)
        p = predict(fn, args, gpu=spec, host=host)
        return p.memory.total_bytes, p.fits
    return largest_batch(probe, capacity_bytes(spec), start, limit)


def make_optimizer(name: str, params):
    """``sgd`` (lr 0.01, momentum 0.9), ``adam``, ``adamw`` (lr 1e-3) or ``adamw_fused``
    (``fused=True``); PyTorch's defaults otherwise (the foreach implementation on CUDA).
    The training zoo's records use the same (``validation/measure/train_step.py``)."""
    import torch
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    if name == "adamw_fused":
        return torch.optim.AdamW(params, lr=1e-3, fused=True)
    raise UserError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")


def step_graph(model_name: str, dtype="float32", sizes=None, optimizer: str = "adamw",
               amp=None):
    """The captured graph of :func:`standard_step`: what ``predict --train`` and a
    training sweep predict."""
    from gpusim.capture.tracing import capture
    fn, fargs = standard_step(model_name, dtype, sizes, optimizer, amp)
    return capture(fn, fargs, name=f"{model_name} training step ({optimizer})")


def standard_step(model_name: str, dtype="float32", sizes=None, optimizer: str = "adamw",
                  amp=None, wrap=None):
    """``(step_fn, args)``: the standard training step of a built-in or zoo model (module
    docstring: which loss). ``amp`` (``"bf16"``/``"fp16"``): the loss under
    ``torch.autocast("cuda")``, and for fp16 a ``torch.amp.GradScaler("cuda")`` that scales
    the loss and steps the optimizer, as the training zoo measures it. ``wrap``: a function the
    model goes through before the optimizer is built and that the loss then calls (DDP, FSDP2:
    :func:`gpusim.predict.distributed.wrap_model`)."""
    import torch

    from gpusim.capture.amp import GpuAutocast, amp_dtype
    adt = amp_dtype(amp)
    if adt is not None:
        with GpuAutocast():         # enabled as on a GPU (it disables itself without one)
            scaler = torch.amp.GradScaler("cuda") if adt == torch.float16 else None
        inner = _standard_step(model_name, dtype, sizes, optimizer, wrap)
        fn, args = inner
        opt = fn.opt

        def step(*a):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=adt):
                loss = fn.loss(*a)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            return loss.detach()
        return step, args
    return _standard_step(model_name, dtype, sizes, optimizer, wrap)


def _standard_step(model_name: str, dtype="float32", sizes=None, optimizer: str = "adamw",
                   wrap=None):
    import torch

    from gpusim.models.resolve import load_model, parse_dtype
    fn, args, label = load_model(model_name, device="meta", dtype=parse_dtype(dtype),
                                 **(sizes or {}))
    if not isinstance(fn, torch.nn.Module):
        raise UserError(f"{model_name} is a function, not a module: --train needs a model with "
                        "parameters (a zoo model, or your own step function through the API)")
    net = fn.train()
    if not any(p.requires_grad for p in net.parameters()):
        raise UserError(f"{model_name} has no parameters to train")
    model = net if wrap is None else wrap(net)      # what the loss calls
    opt = make_optimizer(optimizer, model.parameters())
    cls = type(net).__name__
    hf = hasattr(net, "config")
    if model_name.startswith(("tv:", "timm:")):
        target = torch.randint(0, 1000, (args[0].shape[0],), device=args[0].device)
        loss_fn = torch.nn.CrossEntropyLoss()

        def loss(x, y):
            return loss_fn(model(x), y)
        return _fp32_step(opt, loss), (args[0], target)
    if hf and (cls.endswith("ForCausalLM") or cls.endswith("LMHeadModel")):
        def loss(ids):
            return model(input_ids=ids, labels=ids).loss
        return _fp32_step(opt, loss), (args[0],)
    if hf and cls.endswith("ForConditionalGeneration"):
        def loss(ids, mask, labels):
            return model(input_ids=ids, attention_mask=mask, decoder_input_ids=labels,
                         labels=labels).loss
        return _fp32_step(opt, loss), tuple(args)
    if hf:          # an encoder without a head: the mean of its fp32 last hidden state
        def loss(ids, mask):
            return model(input_ids=ids, attention_mask=mask)[0].float().mean()
        return _fp32_step(opt, loss), tuple(args)[:2]

    def loss(*a):
        out = model(*a)
        out = out[0] if isinstance(out, (tuple, list)) else out
        return out.float().pow(2).mean()
    return _fp32_step(opt, loss), tuple(args)


def _fp32_step(opt, loss_fn):
    """``zero_grad(set_to_none=True)``, ``loss_fn(*a)``, ``backward()``, ``opt.step()``; the
    step carries ``opt`` and ``loss`` for :func:`standard_step`'s autocast step."""
    def step(*a):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(*a)
        loss.backward()
        opt.step()
        return loss.detach()
    step.opt, step.loss = opt, loss_fn
    return step
