"""The zoo runs' plan: which cases (model, size, dtype, mode, autocast) a lease measures, their ids and schema, in a fixed order that a resumed run continues."""

from __future__ import annotations
import fnmatch
import re
from dataclasses import dataclass, field


# torch.compile runs: diverse architectures at their large size in 16-bit, most
# informative first (a deadline cuts the tail)
DEFAULT_COMPILED = ("hf:gpt2", "tv:resnet50", "hf:bert-base", "timm:deit_small_patch16_224",
                    "hf:llama-3.2-1b", "tv:mobilenet_v3_large", "hf:t5-small",
                    "tv:convnext_tiny")


# torch.compile runs of the held-out models (--holdout), one per family and library
HOLDOUT_COMPILED = ("tv:efficientnet_v2_s", "timm:beit_base_patch16_224", "hf:xlm-roberta-base",
                    "hf:gemma-2b", "hf:opus-mt-en-de", "timm:convnextv2_nano")


# runs a compiled model can take: torch.compile's default mode, and mode="reduce-overhead"
COMPILED_RUNS = {"compiled": "default", "cudagraph": "reduce-overhead"}


SCHEMA_VERSION = 1


@dataclass
class Case:
    case_id: str
    model: str
    family: str
    size: str                  # "large" | "default"
    sizes: dict
    dtype: str
    channels_last: bool
    run: str                   # "eager" | "compiled"
    tier: int = 0
    order: int = 0
    extra: dict = field(default_factory=dict)
    amp: str | None = None     # "bf16" | "fp16": fp32 model under torch.autocast("cuda")


def safe_name(s: str) -> str:
    """A file name of letters, digits, '.', '_' and '-' only."""
    out = re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("._")
    return out or "case"


def case_id(model, size, dtype, channels_last, run, amp=None) -> str:
    lay = "cl" if channels_last else "nchw"
    return f"{model}__{size}__{'amp-' + amp if amp else dtype}__{lay}__{run}"


def amp_for(entry, amp: str) -> str:
    """The autocast dtype of an AMP case: ``amp`` itself, or for ``"main"`` the model's
    main 16-bit dtype (:func:`main_dtype`: fp16 for CNNs, bf16 for transformers)."""
    if amp != "main":
        return amp
    return "fp16" if main_dtype(entry) == "float16" else "bf16"


def plan_amp_cases(zoo: dict, amp: str, compiled=DEFAULT_COMPILED, patterns=None,
                   runs=("eager",)) -> list:
    """AMP cases, most valuable first: every model large then batch 1 (NCHW, eager), then
    the ``compiled`` models' large case per run kind in ``runs``."""
    cases = []
    for mi, (name, e) in enumerate(zoo.items()):
        a = amp_for(e, amp)
        todo = [(ti, size, "eager", mi) for ti, size in enumerate(("large", "default"))
                if "eager" in runs]
        todo += [(2 + ri, "large", run, list(compiled).index(name)) for ri, run in
                 enumerate(r for r in ("compiled", "cudagraph") if r in runs)
                 if name in (compiled or ())]
        for tier, size, run, order in todo:
            cases.append(Case(case_id(name, size, "float32", False, run, a), name, e.family,
                              size, dict(e.large if size == "large" else e.defaults),
                              "float32", False, run, tier, order, amp=a))
    if patterns:
        cases = [c for c in cases if any(fnmatch.fnmatch(c.case_id, p) or fnmatch.fnmatch(c.model, p)
                                         for p in patterns)]
    return sorted(cases, key=lambda c: (c.tier, c.order))


def main_dtype(entry) -> str:
    """The dtype a model is mostly run in for inference: fp16 for CNNs, bf16 for
    transformers (when the entry lists it), else the entry's first dtype."""
    pref = ("float16", "bfloat16") if entry.family == "cnn" else ("bfloat16", "float16")
    for d in pref:
        if d in entry.dtypes:
            return d
    return entry.dtypes[0]


def plan_cases(zoo: dict, compiled=DEFAULT_COMPILED, patterns=None, tiny=None,
               runs=("eager", "compiled")) -> list:
    """All cases, most valuable first.

    tier 0: large, main dtype, NCHW, eager      tier 1: batch 1, main dtype, NCHW, eager
    tier 2: large, other dtypes, NCHW            tier 3: batch 1, other dtypes, NCHW
    tier 4: channels_last, large then batch 1, main dtype first
    tier 5: compiled (large, main 16-bit dtype) in the order given
    tier 6: cudagraph (torch.compile mode="reduce-overhead"), same cases.
    Within a tier, the zoo's order. ``runs`` selects the run kinds. ``patterns`` (fnmatch on the case id or the model
    name) filter; ``tiny`` (dict) overrides every case's sizes (dry runs)."""
    cases = []
    names = list(zoo)
    for mi, name in enumerate(names):
        e = zoo[name]
        md = main_dtype(e)
        others = [d for d in e.dtypes if d != md]
        for size, sizes in (("large", e.large), ("default", e.defaults)):
            for dt in [md] + others:
                for cl in ((False, True) if e.channels_last else (False,)):
                    if cl:
                        tier = 4
                        sub = (0 if size == "large" else 1) * 2 + (0 if dt == md else 1)
                    else:
                        tier = (0 if dt == md else 2) + (0 if size == "large" else 1)
                        sub = 0
                    cases.append(Case(case_id(name, size, dt, cl, "eager"), name, e.family, size,
                                      dict(tiny or sizes), dt, cl, "eager", tier, sub * 1000 + mi))
    if "eager" not in runs:
        cases = []
    for tier, run in ((5, "compiled"), (6, "cudagraph")):
        if run not in runs:
            continue
        for ci, name in enumerate(compiled or ()):
            if name not in zoo:
                continue
            e = zoo[name]
            dt = next((d for d in ("bfloat16", "float16") if d in e.dtypes), main_dtype(e))
            if e.family == "cnn" and "float16" in e.dtypes:
                dt = "float16"
            cases.append(Case(case_id(name, "large", dt, False, run), name, e.family, "large",
                              dict(tiny or e.large), dt, False, run, tier, ci))
    if patterns:
        cases = [c for c in cases if any(fnmatch.fnmatch(c.case_id, p) or fnmatch.fnmatch(c.model, p)
                                         for p in patterns)]
    cases.sort(key=lambda c: (c.tier, c.order))
    return cases


def next_case(pending: list, now: float, deadline: float, reserve: float):
    """The case to run next (None: stop). Once ``now`` is within ``reserve`` seconds of the
    deadline, compiled cases jump the queue."""
    if not pending or now >= deadline:
        return None
    if reserve > 0 and now >= deadline - reserve:
        for c in pending:
            if c.run in COMPILED_RUNS:
                return c
    return pending[0]


def one_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    return f"{type(e).__name__}: {first}"[:400]
