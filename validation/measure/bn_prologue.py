"""Eval batch norm's 16-bit prologue kernels (the parameter cast copy and ``batch_norm_calc_invstd``) in
and out of a model's surroundings (issue 35: in-model they take 1.9-2.1 / 1.3-1.5 us on the H200 and
H100, a chain sweep 1.0-1.4 us; docs/cnn.md).

``python3 -m validation.measure.bn_prologue --out FILE.jsonl [--budget-s 120] [--reps 10] [--device cpu]``

Each point runs ``layers`` eval batch norms (bf16 module, ``channels`` features, on a (batch,
channels, size, size) activation) in one call, each with its own parameters, and records every
kernel; what differs between points is what surrounds the prologue:
- ``alone``: the same one batch norm ``layers`` times (its parameters read again and again);
- ``compact``: ``layers`` batch norms whose parameters were allocated one after the other;
- ``spread``: the same with ``pad_mib`` of other allocations between one layer's parameters and
  the next (parameters on distinct pages, as a model's weights place them);
- ``conv``: ``spread``, each batch norm after a 3x3 convolution of its own weights, and a ReLU
  after it (a ResNet block's order);
- ``traffic``: ``spread``, each batch norm after a copy that reads and writes ``pad_mib``.

Method: one call is profiled ``reps`` times in one profiler session, L2 flushed (a 2x L2 write)
and the GPU synchronised before each call, except ``alone`` (no flush: its parameters stay warm);
median per kernel in launch order (``validation.measure.timing.profile_call``). PyTorch's default
flags; inputs random; warm-up calls first.
"""

from __future__ import annotations

import torch

from validation.measure import timing as measure
from validation.measure.bench_common import sweep_main

SURROUNDINGS = ("alone", "compact", "spread", "conv", "traffic")


def points(small: bool = False) -> list[dict]:
    out = []
    shapes = [(1, 64, 8)] if small else [(16, 64, 56), (1, 256, 14), (16, 512, 7)]
    for batch, channels, size in shapes:
        for s in SURROUNDINGS:
            out.append({"surrounding": s, "batch": batch, "channels": channels, "size": size,
                        "layers": 4 if small else 24, "pad_mib": 1 if small else 32, "dtype": "bfloat16"})
    return out


def make(p: dict, device: str):
    dt = getattr(torch, p["dtype"])
    c, n = p["channels"], p["layers"]
    x = torch.randn(p["batch"], c, p["size"], p["size"], device=device).to(dt)
    keep = []

    def bn():
        m = torch.nn.BatchNorm2d(c).to(device=device, dtype=dt).eval()
        with torch.no_grad():
            m.running_var.uniform_(0.5, 2.0)
            m.running_mean.normal_()
        return m
    pad = int(p["pad_mib"] * (1 << 20))
    s = p["surrounding"]
    if s == "alone":
        one = bn()
        layers = [one] * n
    else:
        layers = []
        for _ in range(n):
            layers.append(bn())
            if s != "compact":
                keep.append(torch.empty(pad, dtype=torch.uint8, device=device))
    convs = [torch.nn.Conv2d(c, c, 3, padding=1, bias=False).to(device=device, dtype=dt).eval()
             for _ in range(n)] if s == "conv" else []
    src = torch.empty(pad // 2, dtype=torch.uint8, device=device) if s == "traffic" else None
    dst = torch.empty_like(src) if src is not None else None

    @torch.no_grad()
    def call():
        y = x
        for i, m in enumerate(layers):
            if convs:
                y = convs[i](y)
            if src is not None:
                dst.copy_(src)
            y = m(y if convs else x)
            if convs:
                y = torch.relu(y)
        return y
    call.keep = keep
    return call, ()


def run(p: dict, reps: int, device: str) -> dict:
    return measure.profiled_record(dict(p, kind="bn_prologue", mode="eager"), lambda: make(p, device), reps, device,
                                   flush=p["surrounding"] != "alone")


def describe(p: dict) -> str:
    return f"{p['surrounding']:<8} b{p['batch']} c{p['channels']} {p['size']}px"


def main(argv=None) -> int:
    return sweep_main(argv, __doc__, "bn_prologue", points, run, describe, 120.0)


if __name__ == "__main__":
    raise SystemExit(main())
