"""Stem convolutions and cuBLAS-run 1x1 convolutions of CNNs at batch 1-32, memory-bound kernels
on L2-warm inputs, and convolutions under cuDNN's benchmark mode: the data the stem, 1x1-GEMM and
L2-resident laws need (issue 35).

``python3 -m validation.measure.cnn_convs --out FILE.jsonl [--budget-s 150] [--reps 10] [--device cpu]``

Why: in the cnn sweeps (validation/sweeps/<gpu>-cnn.json) a 1x1 convolution that cuDNN hands to
cuBLAS over NCHW (``nvjet_*``, ``cutlass::Kernel2``, ``sm80_xmma_gemm``) runs 2-4 us at batch 1
where gpusim prices it at the implicit-GEMM floor ``conv_min_us`` (6.8 us on the H200), and
22.6 us at 32 x 256 -> 64 x 56 x 56 bf16 where it prices 16.1; the stem class (3 input channels)
was fitted on two shapes only (7x7 / 64 and 16x16 / 768 at batch 1 and 32), so its intercept
(``conv_stem_us`` 34 us) prices a 3x3 stride-2 stem of 24 channels at batch 1 six times what such
kernels run. This sweep gives both classes a domain: stems 3x3/2, 4x4/4 and 7x7/2 to 16-96
channels on 160-256 px, and 1x1 products at the channel pairs and map sizes of
ResNet/RegNet/EfficientNet/ShuffleNet blocks. In the zoo records, memory-bound kernels of 0.5-32 MB
(elementwise, cuDNN's layout transforms) run only 1.01-1.08x faster on the H200 than on the H100
where gpusim's memory term gives 1.16-1.27x (HBM 4.8 vs 3.35 TB/s): ``warm`` points time such
kernels on an input the previous kernel just wrote (L2-resident, as in a model), against the
producer's own cold-read time. timm's published benchmark tables ran with
``torch.backends.cudnn.benchmark = True`` (timm benchmark.py): ``bench`` points time ResNet /
MobileNet / ResNeXt convolutions at batch 64 and 256 in fp16 NCHW with the flag off and on.
Nothing here is a held-out or published model.

Points (float32, bfloat16, float16; NCHW, no bias: the bias is ATen's own add, priced apart):
``stem``: ``conv2d(x[N, 3, HW, HW], w[Cout, 3, k, k], stride, padding)``; ``pw``:
``conv2d(x[N, Cin, HW, HW], w[Cout, Cin, 1, 1])``; ``warm``: ``y = x0 * 1.0`` (the producer: cold
read, fresh write) then ``op(y)`` (``relu``, ``bias``: ``y + b[None, :, None, None]``, ``bn``:
eval ``F.batch_norm``) on (N, 64, 56, 56), N 1-64; ``bench``: ``conv2d`` of a listed layer with
``cudnn.benchmark`` as the point says (set in the timed function itself; every point sets it, off
unless ``benchmark``); ``reduce``: a squeeze-excite spatial mean ``x.mean((2, 3), keepdim=True)``
of (N, C, HW, HW) and ConvNeXtV2's GRN norm ``torch.norm(x, 2, dim=(1, 2), keepdim=True)`` of
(N, HW, HW, C) (``red``: ``mean`` / ``grn``), which the zoo records run at 0.5-0.7x their
predicted time. Each point is warmed up, then profiled:
``reps`` calls in one profiler session, L2 flushed before each
(:func:`validation.measure.timing.profile_call`), median device time per kernel; PyTorch's default
flags (cudnn.benchmark off, cudnn.allow_tf32 on). Output: JSONL, an environment line
(``kind: environment``) then one line per point (``kind: cnn_convs``: op, N, Cin, Cout, HW, k,
stride, padding, dtype, kernels [{name, us}]), flushed after each; points are interleaved so a
cut sweep still spans the grid, and stop starting after ``--budget-s`` seconds (listed as
``not_reached`` in the closing ``kind: summary`` line).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from validation.measure.bench_common import profiled_run, sweep_main

#: (k, stride, padding) of stem convolutions: ResNet's / MobileNet's 3x3 s2, ConvNeXt's 4x4
#: patchify, ResNet's 7x7 s2
STEMS = ((3, 2, 1), (4, 4, 0), (7, 2, 3))
STEM_COUT = (16, 24, 32, 64, 96)
STEM_HW = (160, 256)
#: (Cin, Cout) of 1x1 convolutions, and the map sizes they run on
PW = ((24, 96), (96, 24), (48, 192), (192, 48), (64, 256), (256, 64), (128, 512), (512, 128),
      (116, 116), (1024, 256))
PW_HW = (56, 28, 14)
BATCHES = (1, 8, 32)
DTYPES = ("float32", "bfloat16", "float16")
WARM_OPS = ("relu", "bias", "bn")
#: (C, HW) of squeeze-excite means and (C, HW) of GRN norms (ConvNeXtV2-nano's stages at 160-256 px)
SE_MEAN = ((64, 56), (64, 28), (256, 28), (256, 14), (1024, 14), (1024, 7), (96, 40), (512, 10))
GRN = ((80, 40), (160, 20), (320, 10), (640, 5), (80, 64), (160, 32), (320, 16), (640, 8))
WARM_N = (1, 2, 4, 8, 16, 32, 64)
#: (label, Cin, Cout, HW, k, stride, groups) of convolutions timed with cudnn.benchmark off and on
BENCH = (("r50_3x3", 64, 64, 56, 3, 1, 1), ("r50_1x1_in", 256, 64, 56, 1, 1, 1), ("r50_1x1_out", 64, 256, 56, 1, 1, 1),
         ("r50_3x3", 128, 128, 28, 3, 1, 1), ("r50_3x3", 256, 256, 14, 3, 1, 1), ("r50_3x3", 512, 512, 7, 3, 1, 1),
         ("r50_1x1_in", 1024, 256, 14, 1, 1, 1), ("r50_stem", 3, 64, 224, 7, 2, 1),
         ("rx_g32", 128, 128, 56, 3, 1, 32), ("mb_dw", 96, 96, 56, 3, 1, 96), ("mb_dw", 192, 192, 28, 3, 1, 192))


def points(small: bool = False) -> list[dict]:
    """Every point, interleaved (batch and dtype vary fastest)."""
    if small:
        return [{"op": "warm", "warm_op": o, "N": 1, "C": 4, "HW": 8, "dtype": "float32"} for o in WARM_OPS] + [
                {"op": "reduce", "red": r, "N": 1, "C": 4, "HW": 8, "dtype": "float32"} for r in ("mean", "grn")] + [
                {"op": "bench", "label": "t", "N": 2, "Cin": 4, "Cout": 4, "HW": 8, "k": 3, "stride": 1, "padding": 1,
                 "groups": 1, "dtype": "float32", "benchmark": True},
                {"op": "stem", "N": 1, "Cin": 3, "Cout": 8, "HW": 16, "k": 3, "stride": 2, "padding": 1,
                 "dtype": "float32"},
                {"op": "pw", "N": 2, "Cin": 8, "Cout": 16, "HW": 9, "k": 1, "stride": 1, "padding": 0,
                 "dtype": "float32"}]
    stems = [{"op": "stem", "N": n, "Cin": 3, "Cout": co, "HW": hw, "k": k, "stride": s, "padding": pad,
              "dtype": dt}
             for (k, s, pad) in STEMS for co in STEM_COUT for hw in STEM_HW for n in BATCHES for dt in DTYPES]
    pws = [{"op": "pw", "N": n, "Cin": ci, "Cout": co, "HW": hw, "k": 1, "stride": 1, "padding": 0, "dtype": dt}
           for (ci, co) in PW for hw in PW_HW for n in BATCHES for dt in DTYPES]
    # alternate the two ops, each in a strided order, so that a cut sweep keeps every shape family
    def spread(xs, step=7):
        return [xs[i] for r in range(step) for i in range(r, len(xs), step)]
    a, b = spread(stems), spread(pws)
    warm = [{"op": "warm", "warm_op": o, "N": n, "C": 64, "HW": 56, "dtype": dt}
            for o in WARM_OPS for dt in ("float32", "bfloat16") for n in WARM_N]
    bench = [{"op": "bench", "label": lb, "N": n, "Cin": ci, "Cout": co, "HW": hw, "k": k, "stride": s,
              "padding": k // 2, "groups": g, "dtype": "float16", "benchmark": on}
             for (lb, ci, co, hw, k, s, g) in BENCH for n in (64, 256) for on in (False, True)]
    red = [{"op": "reduce", "red": "mean", "N": n, "C": c, "HW": hw, "dtype": dt}
           for (c, hw) in SE_MEAN for n in (1, 16) for dt in ("float32", "bfloat16")]
    red += [{"op": "reduce", "red": "grn", "N": n, "C": c, "HW": hw, "dtype": dt}
            for (c, hw) in GRN for n in (1, 16) for dt in ("float32", "bfloat16")]
    out = warm + red + bench
    for i in range(max(len(a), len(b))):
        out += ([a[i]] if i < len(a) else []) + ([b[i]] if i < len(b) else [])
    return out


def make(p: dict, device: str):
    """``(fn, args)`` of one point (its function sets ``cudnn.benchmark`` as the point says)."""
    fn, args = _make(p, device)
    on = bool(p.get("benchmark", False))

    def timed(*a):
        torch.backends.cudnn.benchmark = on
        return fn(*a)
    return timed, args


def _make(p: dict, device: str):
    dt = getattr(torch, p["dtype"])
    if p["op"] == "warm":
        x0 = torch.randn(p["N"], p["C"], p["HW"], p["HW"], device=device, dtype=dt)
        b = torch.randn(p["C"], device=device, dtype=dt)
        var = b.abs() + 1
        ops = {"relu": lambda y: torch.relu(y), "bias": lambda y: y + b[None, :, None, None],
               "bn": lambda y: F.batch_norm(y, b, var, b, b, False, 0.1, 1e-5)}
        op = ops[p["warm_op"]]
        return (lambda x0: op(x0 * 1.0)), (x0,)
    if p["op"] == "reduce":
        if p["red"] == "mean":
            return (lambda x: x.mean((2, 3), keepdim=True)), (torch.randn(p["N"], p["C"], p["HW"], p["HW"], device=device, dtype=dt),)
        return (lambda x: torch.norm(x, p=2, dim=(1, 2), keepdim=True)), (
            torch.randn(p["N"], p["HW"], p["HW"], p["C"], device=device, dtype=dt),)
    g = p.get("groups", 1)
    x = torch.randn(p["N"], p["Cin"], p["HW"], p["HW"], device=device, dtype=dt)
    w = torch.randn(p["Cout"], p["Cin"] // g, p["k"], p["k"], device=device, dtype=dt) * 0.05
    s, pad = p["stride"], p["padding"]
    return (lambda x, w: F.conv2d(x, w, None, s, pad, 1, g)), (x, w)


def describe(p: dict) -> str:
    if p["op"] == "warm":
        return f"warm {p['warm_op']:<5} N{p['N']:<3} {p['dtype']:<8}"
    if p["op"] == "reduce":
        return f"reduce {p['red']:<4} N{p['N']:<3} C{p['C']:<5} {p['HW']:>3}px {p['dtype']:<8}"
    if p["op"] == "bench":
        return f"bench {p['label']:<11} N{p['N']:<3} benchmark={p['benchmark']}"
    return (f"{p['op']:<4} N{p['N']:<3} {p['Cin']:>4}->{p['Cout']:<4} {p['HW']:>3}px k{p['k']} s{p['stride']} "
            f"{p['dtype']:<8}")


def main(argv=None) -> int:
    return sweep_main(argv, __doc__, "cnn_convs", points, profiled_run("cnn_convs", make), describe, 170.0)


if __name__ == "__main__":
    raise SystemExit(main())
