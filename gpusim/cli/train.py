"""The CLI's training-step pieces: ``--train``/``--optimizer``/``--max-batch`` checks and
``predict MODEL --max-batch`` (kept apart so that :mod:`gpusim.cli.commands` stays small)."""

from __future__ import annotations

from gpusim.util.errors import GpusimError, UserError


def check_train(a) -> None:
    """``--train``, ``--optimizer`` and ``--max-batch`` fit together."""
    from gpusim.predict.step import OPTIMIZERS
    if a.optimizer is not None and not a.train:
        raise UserError("--optimizer applies to a training step; add --train")
    a.optimizer = (a.optimizer or "adamw").lower()
    if a.optimizer not in OPTIMIZERS:
        raise UserError(f"unknown --optimizer {a.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if a.max_batch and getattr(a, "gpus", None):
        raise UserError("--max-batch searches one GPU's memory; name one --gpu")
    if a.max_batch and any(k.split("=")[0].strip() == "batch" for k in a.size or []):
        raise UserError("--max-batch searches the batch size itself; drop --size batch=...")


def cmd_max_batch(a) -> int:
    """``predict MODEL --max-batch``: the largest batch whose call (or step) fits."""
    from gpusim.hw.spec import load_spec
    from gpusim.sim.memory import fmt_bytes
    from gpusim.models.resolve import load_model, parse_dtype, parse_sizes
    from gpusim.report.text import dumps
    from gpusim.predict.step import max_batch, standard_step
    sizes = parse_sizes(a.size)

    def make(b):
        if a.train:
            return standard_step(a.model, a.dtype, {**sizes, "batch": b}, a.optimizer,
                                 getattr(a, "amp", None))
        fn, args, _ = load_model(a.model, "meta", parse_dtype(a.dtype), **{**sizes, "batch": b})
        return fn, args
    try:
        make(1)
    except GpusimError as e:
        if "batch" in str(e) and "size" in str(e):
            raise UserError(f"{a.model} has no batch size to search (--max-batch needs one)") from None
        raise
    r = max_batch(make, a.gpu, host=a.host)
    spec = load_spec(a.gpu)
    what = "training step" if a.train else "forward"
    if a.json:
        print(dumps({"model": a.model, "gpu": spec.name, "train": a.train, "max_batch": r["batch"],
                     "tried": {str(k): v for k, v in sorted(r["tried"].items())},
                     "limit_reached": r["limit_reached"]}))
        return 0
    tried = ", ".join(f"{b}: {fmt_bytes(v)}" for b, v in sorted(r["tried"].items()))
    if r["batch"] == 0:
        print(f"{a.model}: a {what} at batch 1 does not fit on {spec.display_name} ({tried})")
    else:
        print(f"{a.model}: largest batch whose {what} fits on {spec.display_name}: {r['batch']}"
              + (" (the search's limit)" if r["limit_reached"] else ""))
        print(f"searched (batch: total bytes): {tried}")
    return 0
