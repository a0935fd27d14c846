"""Golden predictions: a fixed set of cases predicted through the front door only
(``gpusim.load_model``, ``gpusim.predict``, ``gpusim.search``), every figure written as
``repr(float)``, so that a restructuring of the predictor can prove it changed nothing.

    python3 -m validation.score.golden --write validation/golden_predictions.json   # from the code before
    tests/test_golden.py re-predicts every case and asserts byte-identical figures

Cases: every built-in example on a datasheet and a calibrated spec in each mode, a training
step, named zoo models (eager, compiled, autocast, training), a search and a what-if."""

from __future__ import annotations

import argparse
import json
import sys

import torch

import gpusim

GPUS = ("h100", "h200-sxm-calibrated", "a100", "v100", "rtx3090")
MODES = ("eager", "compiled", "cudagraph")
ZOO = (("tv:resnet18", {"batch": 2}, None), ("tv:resnet18", {"batch": 2}, "bf16"),
       ("timm:vit_tiny_patch16_224", {"batch": 2}, None), ("hf:gpt2", {"batch": 1, "seq": 64}, None))


def figures(p) -> dict:
    """The numbers a prediction reports, as exact reprs."""
    m = p.memory
    return {"device_us": repr(float(p.device_us)), "end_to_end_us": repr(float(p.end_to_end_us)),
            "latency_us": repr(float(p.latency_us)), "idle_us": repr(float(p.idle_us)),
            "kernels": len(p.kernels), "kernel_us": repr([float(k.us) for k in p.kernels]),
            "kernel_names": "|".join(k.name for k in p.kernels),
            "peak_bytes": int(m.peak_bytes)}


def example_cases():
    try:
        from gpusim.models.examples import EXAMPLES
    except ImportError:             # the flat layout before the stage packages
        from gpusim.examples import EXAMPLES
    names = sorted(EXAMPLES)
    for name in names:
        fn, args, _ = gpusim.load_model(name)
        graph = gpusim.capture(fn, args, name=name)
        for gpu in GPUS[:2]:
            for mode in MODES:
                yield f"{name}|{gpu}|{mode}", lambda g=graph, gpu=gpu, mode=mode: gpusim.predict(g, gpu=gpu, mode=mode)
        for gpu in GPUS[2:]:
            yield f"{name}|{gpu}|eager", lambda g=graph, gpu=gpu: gpusim.predict(g, gpu=gpu)


def zoo_cases():
    for name, sizes, amp in ZOO:
        fn, args, _ = gpusim.load_model(name, **sizes)
        for mode in ("eager", "compiled"):
            yield (f"{name}|{amp}|h100|{mode}",
                   lambda fn=fn, args=args, mode=mode, amp=amp: gpusim.predict(fn, args, gpu="h100", mode=mode, amp=amp))


def train_cases():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 10))
    opt = torch.optim.AdamW(model.parameters())

    def step(x, y):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    args = (torch.randn(64, 256), torch.randint(0, 10, (64,)))
    for mode in ("eager", "compiled"):
        yield f"mlp_adamw_step|h100|{mode}", lambda mode=mode: gpusim.predict(step, args, gpu="h100", mode=mode)


def search_cases() -> dict:
    fn, args, _ = gpusim.load_model("transformer_block")
    out = {}
    for algo in ("greedy", "bytes"):
        r = gpusim.search(fn, args, gpu="h100", mode="compiled", algo=algo)
        out[f"search|transformer_block|{algo}"] = {
            "groups": sorted(sorted(g) for g in r.partition.groups), "fused": figures(r.fused),
            "compiled": figures(r.compiled) if r.compiled is not None else None}
    group = next(sorted(g) for g in r.partition.groups if len(g) > 1)
    w = gpusim.whatif(fn, [group], args, gpu="h100")
    out["whatif|transformer_block"] = {"fused": figures(w.fused)}
    return out


def golden() -> dict:
    out = {}
    for gen in (example_cases, zoo_cases, train_cases):
        for key, run in gen():
            out[key] = figures(run())
    out.update(search_cases())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", help="write the golden file here")
    a = ap.parse_args(argv)
    doc = {"torch": torch.__version__.split("+")[0], "cases": golden()}
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if a.write:
        with open(a.write, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
