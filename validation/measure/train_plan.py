"""The training runs' plan: the models, precisions, optimizers (fused or not) and compiled variants a lease measures, and each case's id."""

from __future__ import annotations
import fnmatch
from validation.measure.train_step import loss_name
from validation.measure.zoo_plan import Case


#: models and their two sizes, small first: conv nets, a ViT, an encoder, decoders, an
#: encoder-decoder; the 1.2B Llama at batch 2
MODELS = {
    "tv:resnet50": ({"batch": 8, "hw": 224}, {"batch": 32, "hw": 224}),
    "hf:gpt2": ({"batch": 8, "seq": 128}, {"batch": 8, "seq": 512}),
    "timm:deit_small_patch16_224": ({"batch": 8, "hw": 224}, {"batch": 32, "hw": 224}),
    "hf:bert-base": ({"batch": 8, "seq": 128}, {"batch": 8, "seq": 512}),
    "tv:mobilenet_v3_large": ({"batch": 8, "hw": 224}, {"batch": 32, "hw": 224}),
    "hf:t5-small": ({"batch": 8, "seq": 128, "tgt": 32}, {"batch": 8, "seq": 512, "tgt": 128}),
    "tv:convnext_tiny": ({"batch": 8, "hw": 224}, {"batch": 32, "hw": 224}),
    "hf:llama-3.2-1b": ({"batch": 2, "seq": 128}, {"batch": 2, "seq": 512}),
}


PRECISIONS = {"bf16": "bfloat16", "fp32": None, "fp16": "float16"}   # name -> autocast dtype


FUSED = ("hf:gpt2", "tv:resnet50")


COMPILED = tuple(MODELS)


# ------------------------------------------------------------------------ plan
def case_id(model, sizes, prec, opt, run) -> str:
    sz = "_".join(f"{k}{v}" for k, v in sizes.items())
    return f"{model}__{sz}__{prec}__{opt}__{run}"


def plan_cases(zoo_mod, models=None, patterns=None, fused=FUSED, compiled=COMPILED) -> list:
    """All cases, most valuable first (tier, then the models' order).

    tier 0: small size, bf16, AdamW     tier 1: large size, bf16, AdamW
    tier 2: small size, fp32 and fp16, AdamW     tier 3: small size, SGD, every precision
    tier 4: large size, the rest         tier 5: fused AdamW (``fused`` models), both sizes
    tier 6: compiled (``compiled`` models), small size, bf16, AdamW
    tier 7: compiled, large size, bf16, AdamW     tier 8: compiled, small size, fp32, AdamW."""
    models = MODELS if models is None else models
    cases = []

    def add(name, si, prec, opt, run, tier):
        e = zoo_mod.get(name)
        sizes = dict(models[name][si])
        amp = PRECISIONS[prec]
        extra = {"amp": amp, "grad_scaler": prec == "fp16", "optimizer": opt,
                 "loss": loss_name(e.family), "weights_dtype": "float32", "precision": prec,
                 "size_index": si}
        cases.append(Case(case_id(name, sizes, prec, opt, run), name, e.family,
                          ("small", "large")[si], sizes, "float32", False, run, tier,
                          list(models).index(name), extra))
    for name in models:
        for si in (0, 1):
            for prec in PRECISIONS:
                for opt in ("adamw", "sgd"):
                    if opt == "adamw" and prec == "bf16":
                        tier = si
                    elif si == 0:
                        tier = 2 if opt == "adamw" else 3
                    else:
                        tier = 4
                    add(name, si, prec, opt, "eager", tier)
                if name in fused:
                    add(name, si, prec, "adamw_fused", "eager", 5)
        if name in compiled:
            add(name, 0, "bf16", "adamw", "compiled", 6)
            add(name, 1, "bf16", "adamw", "compiled", 7)
            add(name, 0, "fp32", "adamw", "compiled", 8)
    if patterns:
        cases = [c for c in cases if any(fnmatch.fnmatch(c.case_id, p) or fnmatch.fnmatch(c.model, p)
                                         for p in patterns)]
    cases.sort(key=lambda c: (c.tier, c.order, c.case_id))
    return cases
