"""Every figure of a Prediction is a plain number: no torch.SymInt / SymFloat from a compiled
trace's fake tensors reaches the graph, the kernels or the timeline (a compiled fp32 ResNet-18
SGD step once returned ``torch.SymFloat`` from ``device_us``, so ``f"{p.device_us:.1f}"`` raised)."""

import numbers

import pytest
import torch

import gpusim

pytest.importorskip("torchvision")

SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)
FIELDS = ("device_us", "end_to_end_us", "latency_us", "idle_us", "peak_memory_bytes", "flops", "bytes",
          "kernel_count")
KERNEL_FIELDS = ("us", "mem_us", "compute_us", "fixed_us", "flops", "bytes_read", "bytes_read_l2",
                 "bytes_written")


def _symbolic(v, where, out):
    if isinstance(v, SYMBOLIC):
        out.append(where)
    elif isinstance(v, dict):
        for k, x in v.items():
            _symbolic(x, f"{where}.{k}", out)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _symbolic(x, f"{where}[]", out)
    return out


def _steps():
    from gpusim.predict.step import standard_step
    for name, dtype, opt in (("tv:resnet18", "float32", "sgd"), ("tv:resnet18", "bfloat16", "adamw")):
        step, args = standard_step(name, dtype, {"batch": 4, "hw": 64}, opt)
        for mode in ("eager", "compiled"):
            yield f"{name}-{dtype}-{opt}-step-{mode}", step, args, mode


def _forwards():
    for name in ("tv:resnet18", "transformer_block"):
        fn, args, _ = gpusim.load_model(name, **({"batch": 2, "hw": 64} if name.startswith("tv:") else {}))
        for mode in ("compiled", "cudagraph"):
            yield f"{name}-{mode}", fn, args, mode


@pytest.mark.parametrize("case", ["steps", "forwards"])
def test_every_prediction_field_is_a_plain_number(case):
    bad = []
    for label, fn, args, mode in (_steps() if case == "steps" else _forwards()):
        p = gpusim.predict(fn, args, gpu="h100", mode=mode)
        for f in FIELDS:
            v = getattr(p, f)
            if isinstance(v, SYMBOLIC) or not isinstance(v, numbers.Real):
                bad.append(f"{label}: {f} is {type(v).__name__}")
        for k in p.kernels:
            bad += [f"{label}: kernel {k.name}.{f} is {type(getattr(k, f)).__name__}" for f in KERNEL_FIELDS
                    if not isinstance(getattr(k, f), (int, float)) or isinstance(getattr(k, f), SYMBOLIC)]
        for n, a in p.graph.g.nodes(data=True):
            bad += _symbolic(a, f"{label}: node {n}", [])
        for u, v, e in p.graph.g.edges(data=True):
            bad += _symbolic(e, f"{label}: edge {u}->{v}", [])
        f"{p.device_us:.1f} {p.end_to_end_us:.1f}"      # formats as a number
    assert not bad, f"{len(bad)} symbolic values, first: {bad[:5]}"
