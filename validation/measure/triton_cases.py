"""The synthetic functions of the Inductor-kernel microbenchmark (:mod:`validation.measure.triton_bench`).

One case: a small function, its inputs' shapes and dtype, and the Triton kernel class it is meant to
exercise. The same definitions serve the GPU run (real tensors, ``torch.compile``) and the fit on a
CPU (gpusim captures the function on fake tensors and lowers it the way Inductor does), so the
measured and predicted kernels come from one description.

Classes (Inductor's kernel names: ``triton_poi_``, ``triton_per_``, ``triton_red_``):

* ``poi``: a two-op pointwise kernel over 2^10 .. 2^26 elements (fixed cost, waves, bandwidth);
* ``poi_inputs``: a sum of k = 2 .. 16 inputs (many-input pointwise kernels);
* ``poi_math``: erf / tanh GELU and SiLU in fp32 and bf16 (16-bit math is upcast to fp32);
* ``per``: persistent reductions (softmax, row sum, layer norm over rows of 128 .. 1024);
* ``red``: looped reductions (rows of 2048 .. 32768, softmax reads its row three times);
* ``red_outer``: reductions over the leading dim and a full reduction (split: red + per);
* ``bcast``: an eval batch norm + ReLU over NCHW or channels-last images (per-channel operands,
  a square root and a division per element: Inductor does not hoist them to the channels);
* ``math_heavy``: one transcendental applied 6-8 times in one kernel (erf, tanh, sigmoid, rsqrt,
  a division; under Inductor's ``realize_opcount_threshold`` of 30 ops, so one kernel), in fp32 and
  bf16 over 2^24 elements: compute-bound, the SM cycles per op;
* ``layout``: the NCHW -> channels-last copy Inductor puts before a model's first convolution;
* ``red_few``: looped reductions with few, long rows (a squeeze-excite spatial mean in
  channels-last, row sums of 32768 over 128 .. 1024 rows): the loop's latency, not the bytes;
* ``grn``: ConvNeXt-V2's global response norm over a channels-last activation (N, H, W, C), after its GELU:
  an L2 norm over the map per (image, channel), C contiguous (an outer reduction), then a per-(image,
  channel) broadcast that Inductor fuses with the GELU recomputed; and the norm alone;
* ``poi_bcast``: pointwise kernels over an activation with k = 1 .. 8 broadcast operands (a per-channel vector
  over channels-last (N, H, W, C) or NCHW images, a per-(image, channel) scale), and a GELU before one: what
  each broadcast read and its index arithmetic cost per element;
* ``chain``: a producer kernel and its consumer, split by a graph break (``torch._dynamo.graph_break``,
  a no-op when gpusim captures the function): how much of the just-written intermediate the
  consumer reads from L2, over intermediates of 1 .. 64 MiB.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def scale_shift(x):
    return x * 2.0 + 1.0


def sum_inputs(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out


def gelu_erf(x):
    return F.gelu(x)


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def silu(x):
    return F.silu(x)


def softmax_rows(x):
    return torch.softmax(x, dim=-1)


def sum_rows(x):
    return x.sum(dim=-1)


def sum_cols(x):
    return x.sum(dim=0)


def sum_all(x):
    return x.sum()


def layer_norm_rows(x):
    return F.layer_norm(x, x.shape[-1:])


def bn_relu(x, scale, shift):
    return torch.relu(x * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1))


def bn_eval_relu(x, mean, var, weight, bias):
    return torch.relu(F.batch_norm(x, mean, var.abs() + 0.5, weight, bias, training=False))


def erf8(x):
    for _ in range(8):
        x = torch.erf(x)
    return x


def tanh8(x):
    for _ in range(8):
        x = torch.tanh(x)
    return x


def sigmoid8(x):
    for _ in range(8):
        x = torch.sigmoid(x)
    return x


def rsqrt6(x):
    for _ in range(6):
        x = torch.rsqrt(x * x + 1.0)
    return x


def div6(x):
    for _ in range(6):
        x = 1.0 / (x * x + 1.0)
    return x


def to_channels_last(x):
    return x.contiguous(memory_format=torch.channels_last)


def mean_spatial(x):
    return x.mean(dim=(2, 3))


def shift_scale(x):
    return (x - 1.0) * 3.0


def grn(x, gamma, beta):
    g = F.gelu(x)
    gx = torch.norm(g, p=2, dim=(1, 2), keepdim=True)
    nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
    return g + torch.addcmul(beta, gamma, g * nx)


def norm_spatial(x):
    return torch.norm(x, p=2, dim=(1, 2))


def affine_k(x, *vs):
    out = x
    for v in vs:
        out = out * v + 1.0
    return out


def affine_nc(x, s):
    return x * s + 1.0


def gelu_affine(x, a, b):
    return F.gelu(x) * a + b


def _chain(first, second):
    def chain(x):
        y = first(x)
        torch._dynamo.graph_break()      # two compiled graphs: y is written, then read back
        return second(y)
    chain.__name__ = f"chain_{first.__name__}_{second.__name__}"
    chain.stages = (first.__name__, second.__name__)
    return chain


FUNCS = {f.__name__: f for f in (scale_shift, sum_inputs, gelu_erf, gelu_tanh, silu, softmax_rows,
                                 sum_rows, sum_cols, sum_all, layer_norm_rows, bn_relu, shift_scale,
                                 bn_eval_relu, erf8, tanh8, sigmoid8, rsqrt6, div6, to_channels_last,
                                 mean_spatial, grn, norm_spatial, affine_k, affine_nc, gelu_affine,
                                 _chain(scale_shift, shift_scale), _chain(scale_shift, softmax_rows))}


def _case(cls, fn, shapes, dtype, channels_last=False):
    dims = "x".join(str(d) for d in shapes[0])
    name = f"{fn}:{dims}{'' if len(shapes) == 1 else f'x{len(shapes)}in'}:{dtype}{':cl' if channels_last else ''}"
    return {"case": name, "cls": cls, "fn": fn, "shapes": [list(s) for s in shapes], "dtype": dtype,
            "channels_last": channels_last}


def cases() -> list[dict]:
    """Every case, classes interleaved so that a run cut short still covers each class."""
    poi = [_case("poi", "scale_shift", [(1 << p,)], dt)
           for p in (10, 14, 17, 20, 22, 24, 26) for dt in ("float32", "bfloat16")]
    inputs = [_case("poi_inputs", "sum_inputs", [(1 << 22,)] * k, dt)
              for k in (2, 8, 16) for dt in ("float32", "bfloat16")]
    math = [_case("poi_math", fn, [(n,)], dt)
            for fn in ("gelu_erf", "gelu_tanh", "silu") for n in (1 << 22, 1 << 26)
            for dt in ("float32", "bfloat16")]
    per = [_case("per", "softmax_rows", [((1 << 22) // w, w)], dt)
           for w in (128, 512, 1024) for dt in ("float32", "bfloat16")]
    per += [_case("per", "sum_rows", [(4096, 1024)], "float32"),
            _case("per", "softmax_rows", [(64, 1024)], "float32"),
            _case("per", "layer_norm_rows", [(8192, 768)], "float32"),
            _case("per", "layer_norm_rows", [(8192, 768)], "bfloat16")]
    red = [_case("red", "softmax_rows", [((1 << 24) // w, w)], dt)
           for w in (2048, 8192, 32768) for dt in ("float32", "bfloat16")]
    red += [_case("red", "sum_rows", [((1 << 24) // w, w)], dt)
            for w in (4096, 32768) for dt in ("float32", "bfloat16")]
    red += [_case("red", "layer_norm_rows", [(4096, 4096)], dt) for dt in ("float32", "bfloat16")]
    outer = [_case("red_outer", "sum_cols", [(4096, 4096)], dt) for dt in ("float32", "bfloat16")]
    outer += [_case("red_outer", "sum_cols", [(65536, 256)], "float32"),
              _case("red_outer", "sum_all", [(1 << 24,)], "float32")]
    img = (32, 256, 56, 56)
    bcast = [_case("bcast", "bn_relu", [img, img[1:2], img[1:2]], dt, cl)
             for dt, cl in (("bfloat16", True), ("bfloat16", False), ("float32", True))]
    bcast += [_case("bcast", "bn_eval_relu", [img] + [img[1:2]] * 4, dt, cl)
              for dt, cl in (("bfloat16", True), ("float32", True), ("bfloat16", False))]
    heavy = [_case("math_heavy", fn, [(1 << 24,)], dt)
             for fn in ("erf8", "tanh8", "sigmoid8", "rsqrt6", "div6") for dt in ("float32", "bfloat16")]
    layout = [_case("layout", "to_channels_last", [s], dt)
              for s in ((32, 3, 224, 224), (32, 64, 56, 56)) for dt in ("bfloat16", "float32")]
    few = [_case("red_few", "mean_spatial", [(32, 384, 28, 28)], "bfloat16", True),
           _case("red_few", "mean_spatial", [(32, 1152, 14, 14)], "bfloat16", True)]
    few += [_case("red_few", "sum_rows", [(r, 32768)], "bfloat16") for r in (128, 1024)]
    chain = [_case("chain", "chain_scale_shift_shift_scale", [(1 << p,)], "bfloat16")
             for p in (19, 21, 22, 23, 24, 25)]
    chain += [_case("chain", "chain_scale_shift_shift_scale", [(1 << p,)], "float32") for p in (21, 23)]
    chain += [_case("chain", "chain_scale_shift_softmax_rows", [((1 << p) // w, w)], "bfloat16")
              for p, w in ((21, 1024), (23, 1024), (23, 8192))]
    grn_shapes = ((16, 40, 40, 320), (16, 20, 20, 640), (16, 10, 10, 1280), (32, 56, 56, 384))
    grns = [_case("grn", "grn", [s, s[3:], s[3:]], "bfloat16") for s in grn_shapes]
    grns += [_case("grn", "norm_spatial", [s], "bfloat16") for s in grn_shapes]
    grns += [_case("grn", "grn", [grn_shapes[0], grn_shapes[0][3:], grn_shapes[0][3:]], "float32"),
             _case("grn", "norm_spatial", [grn_shapes[0]], "float32")]
    nhwc, nchw = (16, 40, 40, 320), (16, 320, 40, 40)
    bcasts = [_case("poi_bcast", "affine_k", [nhwc] + [nhwc[3:]] * k, dt)
              for k, dt in ((1, "bfloat16"), (2, "bfloat16"), (4, "bfloat16"), (8, "bfloat16"), (1, "float32"),
                            (4, "float32"))]
    bcasts += [_case("poi_bcast", "affine_k", [nchw] + [(320, 1, 1)] * k, "bfloat16") for k in (1, 4)]
    bcasts += [_case("poi_bcast", "affine_nc", [nhwc, (16, 1, 1, 320)], "bfloat16")]
    bcasts += [_case("poi_bcast", "gelu_affine", [nhwc, nhwc[3:], nhwc[3:]], dt) for dt in ("bfloat16", "float32")]
    groups = [poi, chain, heavy, bcast, inputs, math, per, red, outer, layout, few, grns, bcasts]
    out = []
    for i in range(max(len(g) for g in groups)):
        out += [g[i] for g in groups if i < len(g)]
    return out


def make_inputs(case: dict, device: str = "cuda") -> list:
    """Random inputs of ``case`` on ``device`` ("meta" for a capture without memory)."""
    dt = getattr(torch, case["dtype"])
    xs = [torch.randn(*s, device=device, dtype=dt) for s in case["shapes"]]
    if case.get("channels_last"):
        xs[0] = xs[0].contiguous(memory_format=torch.channels_last)
    return xs
