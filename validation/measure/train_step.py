"""The training step the training zoo measures (:mod:`validation.measure.train_run`) and its
competitors' pass (:mod:`validation.measure.train_competitors`) watch: one definition, so a
record's case fields (``loss``, ``optimizer``, ``amp``, ``grad_scaler``, ``run``) rebuild
exactly the step that was measured::

    opt.zero_grad(set_to_none=True)                            # phase "zero_grad"
    with torch.autocast(device, dtype=amp, enabled=amp is not None):
        loss = LOSSES[case.loss](model, batch)                 # phase "forward" (with loss)
    (scaler.scale(loss) if scaler else loss).backward()        # phase "backward"
    scaler.step(opt); scaler.update()  /  opt.step()           # phase "optimizer"
"""

from __future__ import annotations

#: optimizer name -> (class, keyword arguments); lr aside, PyTorch's defaults
OPTIMIZERS = {"adamw": ("AdamW", {"lr": 1e-3, "foreach": True}),
              "sgd": ("SGD", {"lr": 0.01, "momentum": 0.9, "foreach": True}),
              "adamw_fused": ("AdamW", {"lr": 1e-3, "fused": True})}
PHASES = ("zero_grad", "forward", "backward", "optimizer")


def loss_name(family: str) -> str:
    return {"cnn": "cross_entropy", "vit": "cross_entropy", "decoder": "lm", "encdec": "lm",
            "encoder": "mean_last_hidden"}[family]


def _cross_entropy(model, b):
    import torch.nn.functional as F
    return F.cross_entropy(model(b["x"]), b["y"])


def _lm(model, b):
    if "decoder_input_ids" in b:         # T5: the decoder's own ids are the labels
        return model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                     decoder_input_ids=b["decoder_input_ids"], labels=b["decoder_input_ids"]).loss
    return model(input_ids=b["input_ids"], labels=b["input_ids"]).loss


def _mean_last_hidden(model, b):
    return model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])[0].float().mean()


#: loss name -> fn(model, batch) -> scalar loss; the record's ``loss`` names one
LOSSES = {"cross_entropy": _cross_entropy, "lm": _lm, "mean_last_hidden": _mean_last_hidden}


def num_classes(model) -> int:
    """Output classes of a classifier: its last ``nn.Linear``'s width (1000 if none)."""
    import torch
    lin = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return lin[-1].out_features if lin else 1000


def make_batch(family: str, model, args, device) -> dict:
    """The loss's inputs from ``zoo.build``'s args; classifiers get random labels."""
    import torch
    if family in ("cnn", "vit"):
        y = torch.randint(0, num_classes(model), (args[0].shape[0],), device=device)
        return {"x": args[0], "y": y}
    names = {"decoder": ("input_ids",), "encoder": ("input_ids", "attention_mask"),
             "encdec": ("input_ids", "attention_mask", "decoder_input_ids")}[family]
    return dict(zip(names, args))


def make_optimizer(model, name: str):
    import torch
    cls, kw = OPTIMIZERS[name]
    return getattr(torch.optim, cls)(model.parameters(), **kw)


def _no_mark(_name):
    import contextlib
    return contextlib.nullcontext()


def make_step(model, opt, scaler, loss, batch, amp, device_type: str):
    """The step as a function of ``mark`` (phase name -> context manager)."""
    import torch
    loss_fn = LOSSES[loss]
    amp_dt = getattr(torch, amp) if amp else None

    def step(mark=_no_mark):
        with mark("zero_grad"):
            opt.zero_grad(set_to_none=True)
        with mark("forward"):
            with torch.autocast(device_type, dtype=amp_dt, enabled=amp_dt is not None):
                value = loss_fn(model, batch)
        with mark("backward"):
            (scaler.scale(value) if scaler is not None else value).backward()
        with mark("optimizer"):
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
    return step


def build_step(rec: dict, model, args, device: str):
    """``(step, opt, scaler, batch)`` for a record's case fields ``rec`` (``family``,
    ``loss``, ``optimizer``, ``amp``, ``grad_scaler``, ``run``) on an already built
    ``model`` with ``zoo.build``'s ``args``; ``run="compiled"``: the forward calls
    ``torch.compile(model)``."""
    import torch
    model.train()
    batch = make_batch(rec["family"], model, args, device)
    opt = make_optimizer(model, rec["optimizer"])
    scaler = torch.amp.GradScaler(device) if rec["grad_scaler"] else None
    fn = torch.compile(model) if rec["run"] == "compiled" else model
    return make_step(fn, opt, scaler, rec["loss"], batch, rec["amp"], device), opt, scaler, batch
