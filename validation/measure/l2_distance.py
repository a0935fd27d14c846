"""How far an intermediate stays in L2: a consumer kernel's time against the bytes other kernels touched
between its producer and it (issue 35: the L2 residency of producer -> consumer pairs).

``python3 -m validation.measure.l2_distance --out FILE.jsonl [--budget-s 200] [--reps 10] [--device cpu]``

gpusim credits a read of an intermediate of at most ``l2_resident_fraction x L2`` at the L2 rate
whatever was run between its producer and its reader (``gpusim.cost.roofline``: order-free). Each
point here times one reader against one distance: L2 flushed, then a producer ``torch.mul(src, 2,
out=a)`` writes ``a`` (``size_mib``), a spacer copy reads and writes ``distance_mib`` in all of other
buffers, then the consumer reads ``a`` and writes a tensor of its size: eager ``torch.add(a, 1,
out=b)`` (``consumer: aten``) or the same add compiled by Inductor (``consumer: triton``, one
``triton_poi_`` kernel). ``distance_mib: null`` is the consumer alone after the flush (``a`` cold in
DRAM).

Method: each point's call is profiled ``reps`` times in one profiler session, L2 flushed (a 2x L2
write) and the GPU synchronised before each call; the record holds each kernel's median duration in
launch order (producer, spacer, consumer; ``validation.measure.timing.profile_call``). PyTorch's
default flags; inputs random; warm-up calls first (the compile and autotuning happen there).
"""

from __future__ import annotations

import torch

from validation.measure.bench_common import profiled_run, sweep_main

SIZES_MIB = (1 / 256, 1 / 16, 0.25, 1, 4, 8, 16, 24)
DISTANCES_MIB = (None, 0, 1, 2, 4, 8, 16, 24, 32, 48, 64, 128)
MIB = 1 << 20


def points(small: bool = False) -> list[dict]:
    sizes = (0.25, 1) if small else SIZES_MIB
    dists = (None, 0, 1) if small else DISTANCES_MIB
    out = []
    for consumer, dtypes in (("aten", ("float32", "bfloat16")), ("triton", ("float32",))):
        for dtype in dtypes:
            for s in sizes:
                for d in dists:
                    out.append({"consumer": consumer, "dtype": dtype, "size_mib": s, "distance_mib": d})
    return out


_COMPILED: dict = {}


def _add_one(a):
    return a + 1


def make(p: dict, device: str):
    dt = getattr(torch, p["dtype"])
    n = int(p["size_mib"] * MIB) // dt.itemsize
    src = torch.randn(n, device=device).to(dt)
    a, b = torch.empty_like(src), torch.empty_like(src)
    d = p["distance_mib"]
    half = max(int((d or 0) * MIB) // 2 // 4, 1)
    sp_src, sp_dst = torch.randn(half, device=device), torch.empty(half, device=device)
    if p["consumer"] == "triton":
        key = (p["dtype"], n)
        if key not in _COMPILED:
            torch._dynamo.reset()
            _COMPILED[key] = torch.compile(_add_one, dynamic=False)
        fn_c = _COMPILED[key]

        def consume():
            return fn_c(a)
    else:
        def consume():
            return torch.add(a, 1, out=b)
    if d is None:
        torch.mul(src, 2, out=a)       # written once, then flushed before every call: cold

        def call():
            return consume()
    else:
        def call():
            torch.mul(src, 2, out=a)
            if d:
                sp_dst.copy_(sp_src)
            return consume()
    return call, ()


def describe(p: dict) -> str:
    return f"{p['consumer']:<7}{p['dtype']:<9}{p['size_mib']:>6} MiB  distance {p['distance_mib']}"


def main(argv=None) -> int:
    return sweep_main(argv, __doc__, "l2_distance", points, profiled_run("l2_distance", make), describe, 300.0)


if __name__ == "__main__":
    raise SystemExit(main())
