"""The microbenchmark sweeps of CNN kernels: whole CNN ops (depthwise, pooling, layout), norms, eval batch norm, mid-size GEMMs and fp32 CUDA-core convolutions (the points each sweep measures)."""

from __future__ import annotations
import torch
import torch.nn.functional as F
from validation.measure.bench_common import DTYPES, _t


def cnn_points(dev="cuda", small=False):
    """The CNN/ViT tails of issue #10: convolutions with bias (cuDNN adds the bias in a
    kernel of its own?) at small spatial sizes (squeeze-excite 1x1, ConvNeXt's 7x7
    depthwise, ViT's patchify), grouped convolutions at 2-64 channels per group
    (RegNet's 24), 1x1 convolutions with unaligned channels or spatial sizes at batch 1
    and 32 (MobileNet, EfficientNet), each NCHW and channels_last, in every dtype."""
    # (label, N, Cin, Cout, HW, k, stride, groups, bias)
    shapes = [
        ("se1x1", 1, 48, 8, 1, 1, 1, 1, True), ("se1x1", 32, 48, 8, 1, 1, 1, 1, True),
        ("se1x1", 32, 120, 30, 1, 1, 1, 1, True), ("se1x1", 1, 672, 28, 1, 1, 1, 1, True),
        ("dw7x7", 1, 96, 96, 56, 7, 1, 96, True), ("dw7x7", 1, 384, 384, 14, 7, 1, 384, True),
        ("dw7x7", 1, 768, 768, 7, 7, 1, 768, True), ("dw7x7", 32, 96, 96, 56, 7, 1, 96, True),
        ("dw7x7", 32, 384, 384, 14, 7, 1, 384, True), ("dw7x7", 32, 768, 768, 7, 7, 1, 768, True),
        ("dw7x7", 1, 192, 192, 28, 7, 1, 192, False), ("dw7x7", 32, 192, 192, 28, 7, 1, 192, False),
        ("3x3", 32, 64, 64, 56, 3, 1, 1, True), ("3x3", 1, 64, 64, 56, 3, 1, 1, True),
        ("1x1", 32, 256, 64, 56, 1, 1, 1, True), ("1x1", 1, 256, 64, 56, 1, 1, 1, True),
        ("patch16", 1, 3, 768, 224, 16, 16, 1, True), ("patch16", 32, 3, 768, 224, 16, 16, 1, True),
        ("down2x2", 1, 96, 192, 56, 2, 2, 1, True), ("down2x2", 32, 96, 192, 56, 2, 2, 1, True),
        ("grouped3x3", 32, 48, 48, 112, 3, 2, 2, False), ("grouped3x3", 32, 48, 48, 56, 3, 1, 2, False),
        ("grouped3x3", 32, 120, 120, 56, 3, 2, 5, False), ("grouped3x3", 32, 120, 120, 28, 3, 1, 5, False),
        ("grouped3x3", 32, 336, 336, 28, 3, 2, 14, False), ("grouped3x3", 32, 336, 336, 14, 3, 1, 14, False),
        ("grouped3x3", 32, 888, 888, 14, 3, 2, 37, False), ("grouped3x3", 32, 888, 888, 7, 3, 1, 37, False),
        ("grouped3x3", 1, 48, 48, 112, 3, 2, 2, False), ("grouped3x3", 1, 120, 120, 28, 3, 1, 5, False),
        ("grouped3x3", 1, 336, 336, 14, 3, 1, 14, False), ("grouped3x3", 1, 888, 888, 7, 3, 1, 37, False),
        ("grouped3x3", 32, 256, 256, 28, 3, 1, 32, False), ("grouped3x3", 32, 256, 256, 28, 3, 1, 16, False),
        ("grouped3x3", 32, 256, 256, 28, 3, 1, 8, False), ("grouped3x3", 32, 256, 256, 28, 3, 1, 4, False),
        ("1x1", 32, 40, 240, 28, 1, 1, 1, False), ("1x1", 32, 240, 40, 28, 1, 1, 1, False),
        ("1x1", 32, 80, 480, 14, 1, 1, 1, False), ("1x1", 32, 112, 672, 14, 1, 1, 1, False),
        ("1x1", 32, 192, 1152, 7, 1, 1, 1, False), ("1x1", 32, 1152, 192, 7, 1, 1, 1, False),
        ("1x1", 32, 320, 1280, 7, 1, 1, 1, False), ("1x1", 32, 336, 336, 14, 1, 1, 1, False),
        ("1x1", 32, 888, 888, 7, 1, 1, 1, False), ("1x1", 32, 120, 120, 28, 1, 1, 1, False),
        ("1x1", 1, 40, 240, 28, 1, 1, 1, False), ("1x1", 1, 192, 1152, 7, 1, 1, 1, False),
        ("1x1", 1, 320, 1280, 7, 1, 1, 1, False), ("1x1", 1, 16, 96, 112, 1, 1, 1, False),
        ("1x1", 1, 336, 336, 14, 1, 1, 1, False), ("1x1", 1, 888, 888, 7, 1, 1, 1, False),
    ]
    if small:
        shapes = [s[:4] + (min(s[4], 8),) + s[5:] for s in shapes[:3] + shapes[20:21]]
    pts = []
    for label, batch, ci, co, hw, k, s, g, bias in shapes:
        for dt in DTYPES:
            for cl in (False, True):
                pad = 0 if label in ("patch16", "down2x2") else k // 2
                meta = {"op": "conv2d", "kind": label, "N": batch, "Cin": ci, "Cout": co,
                        "HW": hw, "k": k, "stride": s, "groups": g, "padding": pad, "bias": bias,
                        "dtype": dt, "layout": "channels_last" if cl else "nchw"}

                def make(batch=batch, ci=ci, co=co, hw=hw, k=k, s=s, g=g, pad=pad, dt=dt, cl=cl,
                         bias=bias):
                    x = _t((batch, ci, hw, hw), dt, cl, dev)
                    w = _t((co, ci // g, k, k), dt, cl, dev) * 0.05
                    b = _t((co,), dt, dev=dev) if bias else None
                    return (lambda x, w, b: F.conv2d(x, w, b, s, pad, 1, g)), (x, w, b)
                pts.append((meta, make))
    return pts


def norm_points(dev="cuda", small=False):
    """Memory-bound ops of the CNN/ViT tails: eval batch norm over small planes (7x7,
    14x14: ResNet's and RegNet's late stages), layer norm over narrow rows (Swin's and
    ConvNeXt's 96..768 channels), softmax over 49-wide window rows (Swin), a two-dim roll
    (Swin's shifted windows), hardswish and hardsigmoid (MobileNetV3)."""
    def sz(*shape):
        return tuple(min(x, 4) for x in shape) if small else shape
    pts = []
    for dt in DTYPES:
        for shape in (sz(32, 888, 7, 7), sz(32, 336, 14, 14), sz(32, 2048, 7, 7),
                      sz(32, 1024, 14, 14), sz(32, 120, 28, 28), sz(32, 48, 112, 112),
                      sz(1, 888, 7, 7), sz(1, 2048, 7, 7), sz(1, 96, 112, 112)):
            def mk_bn(shape=shape, dt=dt):
                c = shape[1]
                rm, rv, w, b = (torch.rand(c, device=dev, dtype=getattr(torch, dt)) + 0.5 for _ in range(4))
                return (lambda x: F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5)), (_t(shape, dt, dev=dev),)
            pts.append(({"op": "batch_norm_eval", "shape": shape, "dtype": dt, "layout": "nchw"}, mk_bn))
        for shape in (sz(32 * 56 * 56, 96), sz(32 * 28 * 28, 192), sz(32 * 14 * 14, 384),
                      sz(32 * 7 * 7, 768), sz(56 * 56, 96), sz(14 * 14, 384), sz(7 * 7, 768),
                      sz(32 * 197, 768), sz(197, 768), sz(32 * 197, 384)):
            def mk_ln(shape=shape, dt=dt):
                w, b = (torch.rand(shape[-1], device=dev, dtype=getattr(torch, dt)) for _ in range(2))
                return (lambda x: F.layer_norm(x, (shape[-1],), w, b)), (_t(shape, dt, dev=dev),)
            pts.append(({"op": "layer_norm", "shape": shape, "dtype": dt}, mk_ln))
        for shape in (sz(2048, 3, 49, 49), sz(512, 6, 49, 49), sz(128, 12, 49, 49),
                      sz(32, 24, 49, 49), sz(64, 3, 49, 49)):
            pts.append(({"op": "softmax", "shape": shape, "dim": -1, "dtype": dt},
                        lambda shape=shape, dt=dt: ((lambda x: torch.softmax(x, -1)), (_t(shape, dt, dev=dev),))))
        for shape in (sz(32, 56, 56, 96), sz(32, 28, 28, 192), sz(32, 7, 7, 768), sz(1, 56, 56, 96)):
            pts.append(({"op": "roll", "shape": shape, "shifts": (-3, -3), "dims": (1, 2), "dtype": dt},
                        lambda shape=shape, dt=dt: ((lambda x: torch.roll(x, (-3, -3), (1, 2))),
                                                    (_t(shape, dt, dev=dev),))))
        for name, f in (("hardswish", F.hardswish), ("hardsigmoid", F.hardsigmoid)):
            for shape in (sz(32, 16, 112, 112), sz(32, 960, 7, 7), sz(1, 16, 112, 112)):
                pts.append(({"op": name, "shape": shape, "dtype": dt},
                            lambda shape=shape, dt=dt, f=f: (f, (_t(shape, dt, dev=dev),))))
    return pts


def bn_points(dev="cuda", small=False):
    """Eval batch norm across what decides its kernels' time: the (n, c) planes NCHW
    kernels walk one block at a time, the images channels-last kernels split, and the
    bytes: batch 1, 8 and 32 over late-stage (7x7, 14x14) to stem (112x112) planes,
    fp32 (cuDNN's bn_fw_inf) and 16-bit (ATen's transform kernels), NCHW and
    channels-last; 180 points."""
    def sz(*shape):
        return tuple(min(x, 4) for x in shape) if small else shape
    pts = []
    for dt in DTYPES:
        for cl in (False, True):
            lay = "channels_last" if cl else "nchw"
            for n in (1, 8, 32):
                for c, hw in ((2048, 7), (512, 7), (1024, 14), (256, 14), (512, 28), (128, 28),
                              (256, 56), (64, 56), (64, 112), (16, 112)):
                    shape = sz(n, c, hw, hw)

                    def mk_bn(shape=shape, dt=dt, cl=cl):
                        ch = shape[1]
                        rm, rv, w, b = (torch.rand(ch, device=dev, dtype=getattr(torch, dt)) + 0.5
                                        for _ in range(4))
                        return ((lambda x: F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5)),
                                (_t(shape, dt, cl, dev),))
                    pts.append(({"op": "batch_norm_eval", "shape": shape, "dtype": dt, "layout": lay}, mk_bn))
    return pts


def bn_train_points(dev="cuda", small=False):
    """Training batch norm, forward and backward (autograd: the statistics, the running
    averages and the normalised output, then the gradients), NCHW and channels-last, fp32
    (cuDNN's bn_fw_tr/bn_bw) and 16-bit (ATen's kernels: NCHW one fused backward kernel,
    channels-last a reduce and an elementwise kernel, Normalization.cu), batch 8 and 32 over
    late-stage to stem planes; 120 points. What a channels-last training step's batch norm
    costs: the training zoo's classes (bn_train, bn_backward) are fitted on NCHW steps only."""
    def sz(*shape):
        return tuple(min(x, 4) for x in shape) if small else shape
    pts = []
    for dt in DTYPES:
        for cl in (False, True):
            lay = "channels_last" if cl else "nchw"
            for n in (8, 32):
                for c, hw in ((2048, 7), (512, 7), (1024, 14), (256, 14), (512, 28), (128, 28),
                              (256, 56), (64, 56), (64, 112), (16, 112)):
                    shape = sz(n, c, hw, hw)

                    def mk(shape=shape, dt=dt, cl=cl):
                        ch = shape[1]
                        # autocast keeps fp32 parameters beside a 16-bit input
                        w, b = (torch.rand(ch, device=dev) + 0.5 for _ in range(2))
                        w.requires_grad_(True)
                        b.requires_grad_(True)
                        rm, rv = torch.zeros(ch, device=dev), torch.ones(ch, device=dev)
                        gy = _t(shape, dt, cl, dev)

                        def step(x):
                            with torch.enable_grad():     # the harness runs under no_grad
                                F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5).backward(gy)
                        return step, (_t(shape, dt, cl, dev).requires_grad_(True),)
                    pts.append(({"op": "batch_norm_train", "shape": shape, "dtype": dt,
                                 "layout": lay}, mk))
    return pts


def gemm_mid_points(dev="cuda", small=False):
    """Mid-size GEMMs (256-2048 rows), fp32 and bf16, with a bias (``F.linear``) and
    without (``torch.matmul``): where a library stops splitting K as the output tiles
    fill the GPU, between the ``gemm`` sweep's 128- and 4096-row points."""
    nk = [(1024, 1024), (2048, 2048), (1024, 4096), (4096, 1024)]
    ms = (256, 1024, 2048)
    if small:
        nk, ms = [(64, 32)], (8,)
    pts = []
    for n, k in nk:
        for dt in ("float32", "bfloat16"):
            for m in ms:
                for op in ("linear", "matmul"):
                    meta = {"op": op, "M": m, "N": n, "K": k, "bias": op == "linear", "dtype": dt,
                            "aligned_n": n % 8 == 0, "aligned_k": k % 8 == 0}

                    def make(m=m, n=n, k=k, dt=dt, op=op):
                        x = _t((m, k), dt, dev=dev)
                        if op == "linear":
                            return F.linear, (x, _t((n, k), dt, dev=dev) * k ** -0.5, _t((n,), dt, dev=dev))
                        return torch.matmul, (x, _t((k, n), dt, dev=dev) * k ** -0.5)
                    pts.append((meta, make))
    return pts


def conv_simt_points(dev="cuda", small=False):
    """fp32 convolutions on CUDA cores: what GPUs without TF32 (Volta, Turing) run for
    every fp32 convolution. Measured on a TF32 GPU with ``cudnn.allow_tf32`` off for the
    call only, at ResNet-50's and ResNeXt-101 32x4d's shapes, batch 64, NCHW, with cuDNN's
    heuristics (``benchmark`` False, PyTorch's default) and with ``benchmark`` True (what
    NVIDIA's DeepLearningExamples set), to see which algorithms (implicit GEMM, Winograd,
    FFT) cuDNN picks and at what fraction of the fp32 peak."""
    shapes = [("3x3", 64, 64, 56, 3, 1, 1), ("3x3", 128, 128, 28, 3, 1, 1),
              ("3x3", 256, 256, 14, 3, 1, 1), ("3x3", 512, 512, 7, 3, 1, 1),
              ("3x3s2", 128, 128, 56, 3, 2, 1), ("3x3s2", 256, 256, 28, 3, 2, 1),
              ("1x1", 64, 256, 56, 1, 1, 1), ("1x1", 256, 64, 56, 1, 1, 1),
              ("1x1", 512, 128, 28, 1, 1, 1), ("1x1", 1024, 256, 14, 1, 1, 1),
              ("1x1", 512, 2048, 7, 1, 1, 1), ("1x1s2", 256, 512, 56, 1, 2, 1),
              ("7x7s2_first", 3, 64, 224, 7, 2, 1),
              ("grouped3x3", 128, 128, 56, 3, 1, 32), ("grouped3x3", 256, 256, 28, 3, 1, 32),
              ("grouped3x3", 512, 512, 14, 3, 1, 32), ("grouped3x3", 1024, 1024, 7, 3, 1, 32)]
    batch = 64
    if small:
        shapes, batch = shapes[:1], 1
    pts = []
    for bench in (False, True):
        for label, ci, co, hw, k, s, g in shapes:
            pad = k // 2
            meta = {"op": "conv2d", "kind": label, "N": batch, "Cin": ci, "Cout": co, "HW": hw,
                    "k": k, "stride": s, "groups": g, "padding": pad, "dtype": "float32",
                    "layout": "nchw", "cudnn_allow_tf32": False, "cudnn_benchmark": bench}

            def make(ci=ci, co=co, hw=hw, k=k, s=s, g=g, pad=pad, bench=bench):
                x = _t((batch, ci, hw, hw), "float32", dev=dev)
                w = _t((co, ci // g, k, k), "float32", dev=dev) * 0.05

                def fn(x, w):
                    with torch.backends.cudnn.flags(enabled=True, benchmark=bench,
                                                    deterministic=False, allow_tf32=False):
                        return F.conv2d(x, w, None, s, pad, 1, g)
                return fn, (x, w)
            pts.append((meta, make))
    return pts
