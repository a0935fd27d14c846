"""SM-scaling sweep: kernel classes timed on a slice of the GPU's SMs (CUDA green contexts).

``python3 -m validation.measure.sm_scaling --out FILE.json [--sms 8,16,...] [--reps 7]``

What separates GPU generations for a memory-bound kernel is how much DRAM bandwidth each
SM has to fill: 25 GB/s per SM on an H100, 11 on an RTX 3090 or V100, 8 on a T4. A class
fitted on one GPU carries its balance of SMs to bandwidth; a rule that transfers must say
how the class's rate depends on both. A green context (``torch.cuda.green_contexts``, CUDA
12.4+) runs kernels on n of the GPU's SMs with the whole memory system, so one GPU gives the
rate of each class over a range of SMs per byte of bandwidth, at fixed clock, kernels and
DRAM: the curve that decides between a rule that adds the two limits' times (series), the
one that takes the smaller rate (roofline), or one in between. Compute classes (GEMMs,
convolutions) show how their rate follows the SMs at fixed bandwidth.

Each point: one op on random inputs, PyTorch's default flags, CUDA events on the green
context's stream around each call, L2 flushed (a 2x L2 write) before each, median of
``reps`` after 2 warm-up calls. The full-GPU point (no green context) also records the
profiled kernel names. The JSON file is rewritten after every SM count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from gpusim.util.atomic import atomic_write
from validation.measure import timing as measure


def _r(*shape, dtype=torch.float16, cl=False):
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    return x.contiguous(memory_format=torch.channels_last) if cl else x


def _bn(x, train=False):
    c = x.shape[1]
    rm, rv = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
    w, b = torch.rand(c, device="cuda"), torch.rand(c, device="cuda")
    return lambda: F.batch_norm(x, rm, rv, w, b, training=train)


def points():
    """(name, class, bytes, flops, make) with make() -> a no-argument callable."""
    E = 64 * 2**20        # elements of the streaming tensors (128 MiB in 16 bits)
    P = []

    def add(name, cls, nbytes, flops, make):
        P.append({"name": name, "class": cls, "bytes": nbytes, "flops": flops, "make": make})

    def copy16():
        x, y = _r(E), _r(E)
        return lambda: y.copy_(x)
    add("copy_fp16", "pointwise", 4 * E, 0, copy16)

    def add16():
        a, b, c = _r(E), _r(E), _r(E)
        return lambda: torch.add(a, b, out=c)
    add("add_fp16", "pointwise", 6 * E, E, add16)

    def add32():
        a, b, c = (_r(E, dtype=torch.float32) for _ in range(3))
        return lambda: torch.add(a, b, out=c)
    add("add_fp32", "pointwise", 12 * E, E, add32)

    def relu16():
        x = _r(E)
        return lambda: x.relu_()
    add("relu_inplace_fp16", "pointwise", 4 * E, E, relu16)

    n, c, hw = 64, 256, 64      # 64x256x64x64 = 64M elements
    add("bn_eval_fp16_nchw", "bn_eval_16bit", 4 * E, 2 * E,
        lambda: _bn(_r(n, c, hw, hw)))
    add("bn_eval_fp32_nchw", "bn_eval", 8 * E, 2 * E,
        lambda: _bn(_r(n, c, hw, hw, dtype=torch.float32)))
    add("bn_train_fwd_fp16_nhwc", "bn_train_16bit", 6 * E, 4 * E,
        lambda: _bn(_r(n, c, hw, hw, cl=True), train=True))

    def to_nhwc():
        x = _r(n, c, hw, hw)
        return lambda: x.contiguous(memory_format=torch.channels_last)
    add("nchw_to_nhwc_fp16", "layout_transform", 4 * E, 0, to_nhwc)

    def permute():
        x = _r(256, 1024, 16, 16)     # (B, T, heads, dh) -> (B, heads, T, dh)
        return lambda: x.permute(0, 2, 1, 3).contiguous()
    add("permute_0213_fp16", "aten_strided_16bit", 4 * E, 0, permute)

    def rsum():
        x = _r(E // 4096, 4096, dtype=torch.float32)
        return lambda: x.sum(-1)
    add("sum_lastdim_fp32", "aten_reduction", 4 * E, E, rsum)

    def lnorm():
        x = _r(E // 768, 768)
        w, b = torch.ones(768, device="cuda", dtype=torch.float16), torch.zeros(768, device="cuda", dtype=torch.float16)
        return lambda: F.layer_norm(x, (768,), w, b)
    add("layer_norm_fp16", "aten_norm_16bit", 4 * E, 5 * E, lnorm)

    def smax():
        x = _r(E // 1024, 1024)
        return lambda: torch.softmax(x, -1)
    add("softmax_fp16", "aten_norm_16bit", 4 * E, 5 * E, smax)

    def foreach():
        ts = [_r(2**18, dtype=torch.float32) for _ in range(256)]   # 64M floats
        return lambda: torch._foreach_mul_(ts, 0.999)
    add("foreach_mul_fp32", "mta", 8 * E, E, foreach)

    def gemm(m, dt):
        a, b = _r(m, m, dtype=dt), _r(m, m, dtype=dt)
        return lambda: a @ b
    add("gemm_bf16_8192", "gemm", 3 * 2 * 8192**2, 2 * 8192**3, lambda: gemm(8192, torch.bfloat16))
    add("gemm_fp16_4096", "gemm", 3 * 2 * 4096**2, 2 * 4096**3, lambda: gemm(4096, torch.float16))
    add("gemm_fp32_4096", "gemm_simt", 3 * 4 * 4096**2, 2 * 4096**3, lambda: gemm(4096, torch.float32))

    def skinny():
        a, b = _r(64, 8192), _r(8192, 8192)
        return lambda: a @ b
    add("gemm_fp16_64x8192x8192", "gemm_mem", 2 * (64 * 8192 + 8192**2 + 64 * 8192),
        2 * 64 * 8192**2, skinny)

    def conv(ci, co, hw_, k, dt, cl, g=1, batch=32):
        x = _r(batch, ci, hw_, hw_, dtype=dt, cl=cl)
        w = _r(co, ci // g, k, k, dtype=dt, cl=cl) * 0.05
        return lambda: F.conv2d(x, w, None, 1, k // 2, 1, g)
    cf = 2 * 32 * 56 * 56 * 256 * 256 * 9
    add("conv3x3_fp16_nhwc_256", "conv", 2 * 2 * 32 * 256 * 56 * 56, cf,
        lambda: conv(256, 256, 56, 3, torch.float16, True))
    add("conv3x3_fp16_nchw_256", "conv", 2 * 2 * 32 * 256 * 56 * 56, cf,
        lambda: conv(256, 256, 56, 3, torch.float16, False))
    add("conv1x1_fp16_nhwc_256x1024", "conv", 2 * 32 * 56 * 56 * (256 + 1024),
        2 * 32 * 56 * 56 * 256 * 1024, lambda: conv(256, 1024, 56, 1, torch.float16, True))
    add("conv3x3_tf32_nchw_128", "conv", 2 * 4 * 32 * 128 * 56 * 56, 2 * 32 * 56 * 56 * 128 * 128 * 9,
        lambda: conv(128, 128, 56, 3, torch.float32, False))
    add("dwconv3x3_fp32_nchw_256", "depthwise_aten", 2 * 4 * 32 * 256 * 56 * 56,
        2 * 32 * 56 * 56 * 256 * 9, lambda: conv(256, 256, 56, 3, torch.float32, False, g=256))
    add("dwconv3x3_fp16_nhwc_256", "depthwise_16bit", 2 * 2 * 32 * 256 * 56 * 56,
        2 * 32 * 56 * 56 * 256 * 9, lambda: conv(256, 256, 56, 3, torch.float16, True, g=256))
    return P


def _time(fn, reps, flush):
    for _ in range(2):
        fn()
    torch.cuda.current_stream().synchronize()
    ts = []
    for _ in range(reps):
        flush()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return statistics.median(ts), ts


def _green(n):
    """A green context of n SMs and how to run on it: (enter, exit) callables."""
    from torch.cuda.green_contexts import GreenContext
    try:
        ctx = GreenContext.create(num_sms=n, device_id=0)
    except TypeError:
        ctx = GreenContext.create(n, 0)
    if hasattr(ctx, "Stream"):
        stream = ctx.Stream()
        cm = torch.cuda.stream(stream)
        return ctx, (lambda: cm.__enter__()), (lambda: cm.__exit__(None, None, None)), "stream"
    return ctx, ctx.set_context, ctx.pop_context, "set_context"


def run(out, sms, reps):
    pts = points()
    full = torch.cuda.get_device_properties(0).multi_processor_count
    doc = {"env": measure.env_info(), "method": __doc__.split("\n\n")[-1].strip(),
           "flags": {"allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                     "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                     "cudnn_benchmark": torch.backends.cudnn.benchmark},
           "points": [{k: v for k, v in p.items() if k != "make"} for p in pts],
           "runs": []}
    t0 = time.time()
    for n in list(sms) + [None]:
        run_ = {"sms": n or full, "green": n is not None, "results": {}}
        ctx = None
        try:
            if n is not None:
                ctx, enter, leave, how = _green(n)
                run_["how"] = how
                enter()
            big = torch.empty(int(2 * torch.cuda.get_device_properties(0).L2_cache_size),
                              dtype=torch.uint8, device="cuda")
            flush = lambda: big.fill_(1)   # noqa: E731
            for p in pts:
                try:
                    fn = p["make"]()
                    med, ts = _time(fn, reps, flush)
                    r = {"us": round(med, 3), "spread": round((max(ts) - min(ts)) / med, 4)}
                    if n is None:
                        prof = measure.profile_call(lambda: fn(), (), flush=True, reps=2,
                                                    warmup=1, host=False)
                        r["kernels"] = [k["name"][:160] for k in prof.get("kernels", [])]
                    run_["results"][p["name"]] = r
                    del fn
                except Exception as e:  # noqa: BLE001
                    run_["results"][p["name"]] = {"failed": f"{type(e).__name__}: {str(e)[:200]}"}
            del big
            if n is not None:
                torch.cuda.current_stream().synchronize()
                leave()
        except Exception as e:  # noqa: BLE001
            run_["failed"] = f"{type(e).__name__}: {str(e)[:300]}"
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        run_["elapsed_s"] = round(time.time() - t0, 1)
        doc["runs"].append(run_)
        atomic_write(out, json.dumps(doc, indent=1))
        ok = sum(1 for r in run_["results"].values() if "us" in r)
        print(f"sms {run_['sms']}: {ok}/{len(pts)} points, {run_.get('failed', '')} t={run_['elapsed_s']} s",
              flush=True)
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.measure.sm_scaling")
    ap.add_argument("--out", required=True)
    ap.add_argument("--sms", default="8,16,24,32,48,64,80,96,112,128")
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args(argv)
    measure.require_cuda()
    run(a.out, [int(s) for s in a.sms.split(",") if s], a.reps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
