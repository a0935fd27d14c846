"""Training steps beyond one prediction: the largest batch that fits, and the standard step the
CLI builds for a named model (a step's prediction read by phase: :mod:`gpusim.predict.phases`).

:func:`max_batch` searches the batch size: doubling from ``start`` while the step fits, then
bisection between the last batch that fits and the first that does not. Memory grows with the
batch (activations, inputs), which the search assumes (a property test checks it on a model).

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
from gpusim.util.errors import UserError

OPTIMIZERS = ("sgd", "adam", "adamw", "adamw_fused")


def max_batch(make, gpu="h100", start: int = 1, limit: int = 1 << 16, host=None) -> dict:
    """The largest batch whose step fits on ``gpu``: ``make(batch)`` returns ``(step_fn,
    args)``. Doubling from ``start`` while it fits, then bisection between the last batch
    that fits and the first that does not (``log2`` captures each way). Returns ``{"batch":
    largest fitting (0: not even ``start``), "tried": {batch: total bytes}, "limit_reached":
    bool}``."""
    spec = as_spec(gpu)
    tried: dict[int, int] = {}

    def fits(b: int) -> bool:
        fn, args = make(b)
        p = predict(fn, args, gpu=spec, host=host)
        tried[b] = p.memory.total_bytes
        return p.fits
    if not fits(start):
        return {"batch": 0, "tried": tried, "limit_reached": False}
    good, bad = start, None
    while bad is None:
        nxt = min(good * 2, limit)
        if nxt == good:
            return {"batch": good, "tried": tried, "limit_reached": True}
        if fits(nxt):
            good = nxt
        else:
            bad = nxt
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return {"batch": good, "tried": tried, "limit_reached": False}


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
