"""Memory-bound CNN kernels inside a chain against the same kernels alone: conv -> batch norm ->
ReLU (-> residual add) at CNN shapes straddling the L2 (issue 35).

``python3 -m validation.measure.cnn_chain --out FILE.jsonl [--budget-s 160] [--reps 10] [--device cpu]``

Why: in the H200 held-out and zoo cnn records, memory-bound ATen/cuDNN kernels (batch norm,
ReLU, adds, pooling, layout transforms) run 5-35% above gpusim's prediction, while the same
kernels timed alone (the microbench and cnn_convs sweeps) are priced at or above their time. The
records profile a whole forward with L2 flushed once before it, so each kernel reads what the
previous one just wrote, and writes while the previous kernel's dirty lines drain. This sweep
times each kernel of a chain inside the chain and alone, on the same tensors: which of L2
residency (tensor size against the 60 MiB L2), the previous kernel (a convolution or not), or the
drain of the previous kernel's writes makes the difference. Nothing here is a held-out or
published model.

Method: each point is measured four ways, each with ``reps`` calls in one profiler session after
warm-up (:func:`validation.measure.timing.profile_call`, median device time per kernel position;
PyTorch's default flags, cudnn.benchmark off, no autograd): ``chain``: the whole chain, L2
flushed before each call (as the model records were measured); ``gap``: the same chain with a
``torch.cuda._sleep`` spin kernel of ``GAP_CYCLES`` between stages (the previous kernel's
writes drain before the next starts; the spin kernels are listed as kernels and named
``spin_kernel``); ``cold``: each stage alone on its input as the chain made it, L2 flushed before
each call; ``warm``: each stage alone, calls back to back with no flush (inputs and the output's
lines L2-resident where they fit, as the ``--no-flush`` microbench sweeps time batch norm).
Output: JSONL, an environment line (``kind: environment``) then one line per point (``kind:
cnn_chain``: chain, N, C, HW, dtype, layout, bytes (one activation), stages [names],
``kernels`` (the chain's), ``gap`` (kernels), ``cold`` / ``warm`` ({stage: kernels})), flushed
after each; points are interleaved so a cut sweep still spans the grid, and stop starting after
``--budget-s`` seconds (listed as ``not_reached`` in the closing ``kind: summary`` line).

Chains (``chain``), each started by a producer ``x = x0 * 1.0`` (a model's previous kernel: the
chain's input is fresh in L2, as in a model): ``cbr``: conv 3x3 (C -> C, pad 1, no bias) -> eval
``F.batch_norm`` -> ``relu_`` (torchvision's conv-bn-relu); ``cbar``: conv 1x1 (C -> C) -> eval
batch norm -> ``add_`` of the producer's output (the residual) -> ``relu_`` (a bottleneck's
end); ``bnr``: eval batch norm -> ``relu_`` with no convolution before. Shapes (C, HW) (64, 56)
and (256, 28) (0.8 MB an image in fp32), N 1-128 (0.4-103 MB an activation), float32 and
bfloat16 (batch-norm parameters and statistics in the input's dtype, as ``model.to(dtype)``
leaves them), NCHW and channels-last (weights in the same format).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from validation.measure.bench_common import sweep_main

CHAINS = ("cbr", "cbar", "bnr")
SHAPES = ((64, 56), (256, 28))
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
DTYPES = ("float32", "bfloat16")
LAYOUTS = ("nchw", "cl")
#: spin-kernel cycles between stages of a ``gap`` chain (~25 us at the H200's 1.98 GHz)
GAP_CYCLES = 50_000


def points(small: bool = False) -> list[dict]:
    """Every point, interleaved: batch varies slowest within a strided order, so a cut sweep keeps
    every chain, dtype and layout at spread sizes."""
    if small:
        return [{"chain": c, "N": 1, "C": 8, "HW": 6, "dtype": dt, "layout": lay}
                for c in CHAINS for dt in DTYPES for lay in LAYOUTS]
    pts = [{"chain": c, "N": n, "C": ch, "HW": hw, "dtype": dt, "layout": lay}
           for n in (16, 128, 2, 64, 8, 32, 1, 4) for (ch, hw) in SHAPES for c in CHAINS
           for dt in DTYPES for lay in LAYOUTS]
    return pts


def stages(p: dict, device: str):
    """``(x0, [(name, fn)])``: the chain's input and its stages, each ``fn(prev, x) -> out``
    (``prev``: the previous stage's output, ``x``: the producer's output, the residual)."""
    dt = getattr(torch, p["dtype"])
    fmt = torch.channels_last if p["layout"] == "cl" else torch.contiguous_format
    n, c, hw = p["N"], p["C"], p["HW"]
    x0 = torch.randn(n, c, hw, hw, device=device, dtype=dt).contiguous(memory_format=fmt)
    g = torch.rand(c, device=device, dtype=dt) + 0.5
    b = torch.randn(c, device=device, dtype=dt)
    mean = torch.randn(c, device=device, dtype=dt) * 0.1
    var = torch.rand(c, device=device, dtype=dt) + 0.5
    k = 3 if p["chain"] == "cbr" else 1
    w = (torch.randn(c, c, k, k, device=device, dtype=dt) * (1.0 / (c * k * k) ** 0.5)).contiguous(
        memory_format=fmt)
    st = [("producer", lambda prev, x: prev * 1.0)]
    if p["chain"] != "bnr":
        st.append(("conv", lambda prev, x: F.conv2d(prev, w, None, 1, k // 2)))
    st.append(("bn", lambda prev, x: F.batch_norm(prev, mean, var, g, b, False, 0.1, 1e-5)))
    if p["chain"] == "cbar":
        st.append(("add", lambda prev, x: prev.add_(x)))
    st.append(("relu", lambda prev, x: torch.relu_(prev)))
    return x0, st


def chain_fn(st, gap: bool):
    def run(x0):
        y = x = None
        for i, (_, f) in enumerate(st):
            if gap and i:
                torch.cuda._sleep(GAP_CYCLES)
            y = f(y if i else x0, x)
            if i == 0:
                x = y
        return y
    return run


def measure_point(p: dict, reps: int, device: str) -> dict:
    """One point's record (see the module's method)."""
    from validation.measure import timing as measure
    rec = dict(p, kind="cnn_chain", mode="eager")
    cuda = device == "cuda"
    try:
        with torch.no_grad():
            torch.backends.cudnn.benchmark = False
            x0, st = stages(p, device)
            rec["stages"] = [s for s, _ in st]
            rec["bytes"] = x0.numel() * x0.element_size()
            r = measure.profile_call(chain_fn(st, False), (x0,), flush=cuda, reps=reps, warmup=3, host=False)
            rec["kernels"] = r["kernels"]
            if cuda:
                rec["gap"] = measure.profile_call(chain_fn(st, True), (x0,), flush=True, reps=reps, warmup=3,
                                                  host=False)["kernels"]
            # each stage's input as the chain made it
            ins, y, x = [], x0, None
            for i, (_, f) in enumerate(st):
                ins.append(y.clone())
                y = f(y, x)
                if i == 0:
                    x = y
            rec["cold"], rec["warm"] = {}, {}
            for (s, f), inp in zip(st, ins):
                alone = (lambda f: lambda a, xx: f(a, xx))(f)
                for key, fl in (("cold", cuda), ("warm", False)):
                    rec[key][s] = measure.profile_call(alone, (inp, x), flush=fl, reps=reps, warmup=3,
                                                       host=False)["kernels"]
    except Exception as e:  # noqa: BLE001 - one failed point must not end the sweep
        rec["failed"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    if cuda:
        torch.cuda.empty_cache()
    return rec


def describe(p: dict) -> str:
    return f"{p['chain']:<4} N{p['N']:<3} C{p['C']:<3} {p['HW']:>2}px {p['dtype']:<8} {p['layout']:<4}"


def main(argv=None) -> int:
    return sweep_main(argv, __doc__, "cnn_chain", points, measure_point, describe, 160.0)


if __name__ == "__main__":
    raise SystemExit(main())
