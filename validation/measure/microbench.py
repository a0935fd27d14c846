"""Microbenchmark sweeps: which kernels eager ATen / cuDNN / cuBLAS really launch.

``python3 -m validation.measure.microbench --out FILE.json [--deadline-s N] [--only conv2d,gemm]``

Each point is one op at one shape, dtype and memory layout, run with PyTorch's default
flags (TF32 and cuDNN settings untouched) on random inputs under ``torch.no_grad()``; the
record holds the profiled kernel list in launch order (name, device us, median of a few
calls, L2 flushed before each), the kernel count and sum, and what the host dispatched.
These justify the eager dispatch rules of ``lower``: cuDNN's layout transforms per
dtype/layout, the GEMM variant for misaligned shapes, the attention backend per mask and
dtype, the kernels of pooling, norms, indexing and creation ops.

The JSON file is rewritten atomically after every sweep (and every 50 points), so a run
that is cut off keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F

from gpusim.util.atomic import atomic_write
from validation.measure import timing as measure
from validation.measure.microbench_cnn import bn_points, bn_train_points, cnn_points, conv_simt_points, gemm_mid_points, norm_points
from validation.measure.bench_common import DTYPES, _t


def _atomic_json(path, doc):
    atomic_write(path, json.dumps(doc, indent=1, default=str))


def sdpa_backend(names) -> str:
    """Which scaled_dot_product_attention backend launched these kernels."""
    low = [n.lower() for n in names]
    if any("cudnn" in n for n in low):
        return "cudnn"
    if any("flash" in n for n in low):
        return "flash"
    if any(("fmha" in n or "memeff" in n or "mem_eff" in n or "attentionkernel" in n)
           for n in low):
        return "efficient"
    return "math"


# ---------------------------------------------------------------------------- points
# A point is (meta: dict, make: callable () -> (fn, args)); make runs on the GPU.


def conv_points(dev="cuda", small=False):
    # (label, Cin, Cout, HW, k, stride, groups)
    shapes = [
        ("3x3", 64, 64, 56, 3, 1, 1), ("3x3", 128, 128, 28, 3, 1, 1),
        ("3x3", 256, 256, 14, 3, 1, 1), ("3x3", 512, 512, 7, 3, 1, 1),
        ("3x3s2", 128, 128, 56, 3, 2, 1),
        ("1x1", 256, 64, 56, 1, 1, 1), ("1x1", 512, 128, 28, 1, 1, 1),
        ("1x1", 1024, 256, 14, 1, 1, 1), ("1x1", 512, 2048, 7, 1, 1, 1),
        ("7x7s2_first", 3, 64, 224, 7, 2, 1),
        ("patch16", 3, 768, 224, 16, 16, 1),
        ("dw3x3", 32, 32, 112, 3, 1, 32), ("dw3x3", 144, 144, 56, 3, 1, 144),
        ("dw3x3", 384, 384, 14, 3, 1, 384),
        ("dw5x5", 240, 240, 28, 5, 1, 240), ("dw5x5", 672, 672, 14, 5, 1, 672),
        ("grouped3x3", 128, 128, 56, 3, 1, 32), ("grouped3x3", 512, 512, 14, 3, 1, 32),
    ]
    batches = (32, 1)
    if small:
        shapes, batches = shapes[:2] + shapes[9:12], (1,)
    pts = []
    for batch in batches:
        for label, ci, co, hw, k, s, g in shapes:
            for dt in DTYPES:
                for cl in (False, True):
                    pad = 0 if label == "patch16" else k // 2
                    meta = {"op": "conv2d", "kind": label, "N": batch, "Cin": ci, "Cout": co,
                            "HW": hw, "k": k, "stride": s, "groups": g, "padding": pad,
                            "dtype": dt, "layout": "channels_last" if cl else "nchw"}

                    def make(batch=batch, ci=ci, co=co, hw=hw, k=k, s=s, g=g, pad=pad, dt=dt, cl=cl):
                        x = _t((batch, ci, hw, hw), dt, cl, dev)
                        w = _t((co, ci // g, k, k), dt, cl, dev) * 0.05
                        return (lambda x, w: F.conv2d(x, w, None, s, pad, 1, g)), (x, w)
                    pts.append((meta, make))
    return pts


def gemm_points(dev="cuda", small=False):
    nk = [(768, 768), (3072, 768), (768, 3072), (4096, 4096),           # aligned
          (50257, 768), (1000, 2048), (30522, 768), (1001, 768), (32001, 4096),  # N misaligned
          (768, 1001), (4096, 4097), (1024, 50257)]                      # K misaligned
    ms = (1, 16, 128, 512, 4096)
    if small:
        nk, ms = [(64, 32), (33, 32)], (1, 8)
    pts = []
    for n, k in nk:
        for dt in DTYPES:
            for m in ms:
                meta = {"op": "linear", "M": m, "N": n, "K": k, "bias": True, "dtype": dt,
                        "aligned_n": n % 8 == 0, "aligned_k": k % 8 == 0}

                def make(m=m, n=n, k=k, dt=dt):
                    x = _t((m, k), dt, dev=dev)
                    w = _t((n, k), dt, dev=dev) * k ** -0.5
                    b = _t((n,), dt, dev=dev)
                    return F.linear, (x, w, b)
                pts.append((meta, make))
            for m in (ms if small else (1, 128, 4096)):
                meta = {"op": "matmul", "M": m, "N": n, "K": k, "bias": False, "dtype": dt,
                        "aligned_n": n % 8 == 0, "aligned_k": k % 8 == 0}

                def make(m=m, n=n, k=k, dt=dt):
                    x = _t((m, k), dt, dev=dev)
                    w = _t((k, n), dt, dev=dev) * k ** -0.5
                    return torch.matmul, (x, w)
                pts.append((meta, make))
    return pts


def sdpa_points(dev="cuda", small=False):
    shapes = [(1, 12, 128, 64), (8, 12, 512, 64), (32, 6, 197, 64), (4, 16, 256, 80),
              (1, 32, 1024, 128), (1, 32, 16, 128)]
    if small:
        shapes = [(1, 2, 16, 8)]
    pts = []
    for b, h, s, d in shapes:
        for mask in ("none", "bool", "float", "float_pad", "causal"):
            for dt in DTYPES:
                meta = {"op": "sdpa", "B": b, "H": h, "S": s, "D": d, "mask": mask, "dtype": dt}

                def make(b=b, h=h, s=s, d=d, dt=dt, mask=mask):
                    q, k, v = (_t((b, h, s, d), dt, dev=dev) for _ in range(3))
                    kw = {}
                    if mask == "bool":
                        kw["attn_mask"] = torch.rand(b, 1, s, s, device=dev) > 0.1
                    elif mask == "float":
                        kw["attn_mask"] = _t((b, 1, s, s), dt, dev=dev)
                    elif mask == "float_pad":        # HF-style additive padding mask (b,1,1,s)
                        m = torch.zeros(b, 1, 1, s, device=dev, dtype=getattr(torch, dt))
                        m[..., -(s // 8):] = torch.finfo(m.dtype).min
                        kw["attn_mask"] = m
                    elif mask == "causal":
                        kw["is_causal"] = True
                    return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw)), (q, k, v)
                pts.append((meta, make))
    return pts


def misc_points(dev="cuda", small=False):
    S = 1 if small else None

    def sz(*shape):
        return tuple(min(x, 4) for x in shape) if S else shape
    pts = []

    def add(meta, make):
        pts.append((meta, make))
    for dt in ("float32", "bfloat16"):
        for cl in (False, True):
            lay = "channels_last" if cl else "nchw"
            for shape in (sz(32, 64, 112, 112), sz(1, 64, 112, 112)):
                add({"op": "max_pool2d", "shape": shape, "k": 3, "stride": 2, "dtype": dt, "layout": lay},
                    lambda shape=shape, dt=dt, cl=cl: (lambda x: F.max_pool2d(x, 3, 2, 1), (_t(shape, dt, cl, dev),)))
            for shape in (sz(32, 256, 56, 56),):
                add({"op": "avg_pool2d", "shape": shape, "k": 2, "dtype": dt, "layout": lay},
                    lambda shape=shape, dt=dt, cl=cl: (lambda x: F.avg_pool2d(x, 2), (_t(shape, dt, cl, dev),)))
            for shape in (sz(32, 2048, 7, 7), sz(1, 1280, 7, 7), sz(32, 768, 14, 14)):
                add({"op": "adaptive_avg_pool2d", "shape": shape, "out": 1, "dtype": dt, "layout": lay},
                    lambda shape=shape, dt=dt, cl=cl: (lambda x: F.adaptive_avg_pool2d(x, 1), (_t(shape, dt, cl, dev),)))
            for shape in (sz(32, 64, 112, 112), sz(32, 256, 56, 56), sz(1, 512, 7, 7)):
                def mk_bn(shape=shape, dt=dt, cl=cl):
                    c = shape[1]
                    rm, rv, w, b = (torch.rand(c, device=dev, dtype=getattr(torch, dt)) + 0.5 for _ in range(4))
                    return (lambda x: F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5)), (_t(shape, dt, cl, dev),)
                add({"op": "batch_norm_eval", "shape": shape, "dtype": dt, "layout": lay}, mk_bn)
            for shape, g in ((sz(8, 256, 32, 32), 32), (sz(1, 512, 64, 64), 32)):
                def mk_gn(shape=shape, g=g, dt=dt, cl=cl):
                    c = shape[1]
                    w, b = (torch.rand(c, device=dev, dtype=getattr(torch, dt)) for _ in range(2))
                    return (lambda x: F.group_norm(x, min(g, c), w, b)), (_t(shape, dt, cl, dev),)
                add({"op": "group_norm", "shape": shape, "groups": g, "dtype": dt, "layout": lay}, mk_gn)
        for shape in (sz(4096, 768), sz(32 * 197, 384), sz(1, 768), sz(16, 4096)):
            def mk_ln(shape=shape, dt=dt):
                w, b = (torch.rand(shape[-1], device=dev, dtype=getattr(torch, dt)) for _ in range(2))
                return (lambda x: F.layer_norm(x, (shape[-1],), w, b)), (_t(shape, dt, dev=dev),)
            add({"op": "layer_norm", "shape": shape, "dtype": dt}, mk_ln)
        for vocab, d, idx in ((30522, 768, sz(8, 512)), (50257, 768, sz(1, 16)), (32000, 2048, sz(1, 16))):
            def mk_emb(vocab=vocab, d=d, idx=idx, dt=dt):
                w = _t((vocab, d), dt, dev=dev)
                i = torch.randint(0, vocab, idx, device=dev)
                return F.embedding, (i, w)
            add({"op": "embedding", "vocab": vocab, "dim": d, "idx": idx, "dtype": dt}, mk_emb)
        for rows, d, n in ((30522, 768, 4096), (1024, 1024, 16)):
            def mk_is(rows=rows, d=d, n=n, dt=dt):
                return (lambda w, i: w.index_select(0, i)), (_t((rows, d), dt, dev=dev),
                                                          torch.randint(0, rows, (n,), device=dev))
            add({"op": "index_select", "shape": (rows, d), "n": n, "dtype": dt}, mk_is)
        for shape in (sz(4096, 1024), sz(8, 50257)):
            def mk_g(shape=shape, dt=dt):
                return (lambda x, i: torch.gather(x, -1, i)), (
                    _t(shape, dt, dev=dev), torch.randint(0, shape[-1], (shape[0], 1), device=dev))
            add({"op": "gather", "shape": shape, "dtype": dt}, mk_g)
        for n in (16, 4096):
            add({"op": "arange", "n": n, "dtype": "int64"},
                lambda n=n: ((lambda: torch.arange(n, device=dev)), ()))
        for shape in (sz(8, 512), sz(8, 512, 768)):
            add({"op": "ones", "shape": shape, "dtype": dt},
                lambda shape=shape, dt=dt: ((lambda: torch.ones(shape, device=dev, dtype=getattr(torch, dt))), ()))
            add({"op": "new_zeros", "shape": shape, "dtype": dt},
                lambda shape=shape, dt=dt: ((lambda x: x.new_zeros(shape)), (_t((2,), dt, dev=dev),)))
        for shape in (sz(8, 512), sz(4096, 1024)):
            add({"op": "cumsum", "shape": shape, "dtype": dt},
                lambda shape=shape, dt=dt: ((lambda x: torch.cumsum(x, -1)), (_t(shape, dt, dev=dev),)))
        add({"op": "cumsum", "shape": sz(8, 512), "dtype": "int64"},
            lambda: ((lambda x: torch.cumsum(x, -1)), (torch.randint(0, 2, sz(8, 512), device=dev),)))
        for shape, dim in ((sz(8, 512, 768), -1), (sz(8, 512, 768), 0), (sz(32, 64, 56, 56), 1)):
            add({"op": "cat", "shape": shape, "n": 3, "dim": dim, "dtype": dt},
                lambda shape=shape, dim=dim, dt=dt: ((lambda a, b, c: torch.cat([a, b, c], dim)),
                                                     tuple(_t(shape, dt, dev=dev) for _ in range(3))))
        for a, b in (((32, 197, 384), (384,)), ((8, 12, 512, 512), (8, 1, 1, 512)),
                     ((32, 64, 56, 56), (1, 64, 1, 1)), ((1, 16, 2048), (2048,))):
            a, b = sz(*a), sz(*b)
            add({"op": "add_broadcast", "a": a, "b": b, "dtype": dt},
                lambda a=a, b=b, dt=dt: (torch.add, (_t(a, dt, dev=dev), _t(b, dt, dev=dev))))
        for shape in (sz(8, 12, 512, 512), sz(4096, 50257), sz(1, 50257), sz(32, 6, 197, 197)):
            add({"op": "softmax", "shape": shape, "dim": -1, "dtype": dt},
                lambda shape=shape, dt=dt: ((lambda x: torch.softmax(x, -1)), (_t(shape, dt, dev=dev),)))
    return pts


SWEEPS = {"conv2d": conv_points, "gemm": gemm_points, "gemm_mid": gemm_mid_points,
          "sdpa": sdpa_points, "misc": misc_points, "cnn": cnn_points, "norms": norm_points,
          "conv_simt": conv_simt_points, "bn": bn_points, "bn_train": bn_train_points}
SHARES = {"conv2d": 0.35, "gemm": 0.3, "gemm_mid": 0.1, "sdpa": 0.15, "misc": 0.2, "cnn": 0.3,
          "norms": 0.1, "conv_simt": 0.2, "bn": 0.2, "bn_train": 0.2}   # of the deadline


def summarize(res: dict) -> dict:
    names = [k["name"] for k in res.get("kernels", [])]
    return {"kernels": res.get("kernels", []), "kernel_count": len(names),
            "kernel_sum_us": res.get("kernel_sum_us"), "split": res.get("split"),
            "memcpy_memset": res.get("memcpy_memset", []),
            "host": {k: res.get("host", {}).get(k) for k in
                     ("aten_ops_top", "aten_ops_top_counts", "cuda_launches", "host_syncs")}}


def run_sweeps(out, deadline_s=150.0, only=None, dev="cuda", small=False, reps=3, flush=True):

    t0 = time.time()
    doc = {"env": measure.env_info() if dev == "cuda" else {"device": dev},
           "flags": {"allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                     "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                     "cudnn_benchmark": torch.backends.cudnn.benchmark,
                     "float32_matmul_precision": torch.get_float32_matmul_precision()},
           "method": f"torch.profiler, {reps} calls after 2 warm-up calls, "
                     + ("L2 flushed before each; " if flush else "L2 not flushed (operands L2-resident "
                        "where they fit, as a model's producer leaves them); ")
                     + "kernel us = median per kernel position", "sweeps": {}, "elapsed_s": {},
           "skipped_for_deadline": {}}
    todo = [k for k in SWEEPS if not only or k in only]
    for j, sname in enumerate(todo):
        gen = SWEEPS[sname]
        pts = gen(dev=dev, small=small)
        recs = doc["sweeps"].setdefault(sname, [])
        ts = time.time()
        # this sweep's share of the time left (what an earlier sweep leaves unused carries over)
        share = SHARES[sname] / sum(SHARES[k] for k in todo[j:])
        stop = ts + share * max(0.0, deadline_s - (ts - t0))
        for i, (meta, make) in enumerate(pts):
            if time.time() > stop:
                doc["skipped_for_deadline"][sname] = len(pts) - i
                break
            rec = dict(meta)
            try:
                with torch.no_grad():
                    fn, args = make()
                    r = measure.profile_call(fn, args, flush=flush and dev == "cuda", reps=reps, warmup=2)
                rec.update(summarize(r))
                if sname == "sdpa":
                    rec["backend"] = sdpa_backend(k["name"] for k in rec["kernels"])
            except Exception as e:  # noqa: BLE001
                rec["failed"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            recs.append(rec)
            if (i + 1) % 50 == 0:
                _atomic_json(out, doc)
        doc["elapsed_s"][sname] = round(time.time() - ts, 1)
        if dev == "cuda":
            torch.cuda.empty_cache()
        nf = sum(1 for r in recs if "failed" in r)
        print(f"sweep {sname}: {len(recs)} points ({nf} failed) in {doc['elapsed_s'][sname]} s",
              flush=True)
        _atomic_json(out, doc)
    doc["total_s"] = round(time.time() - t0, 1)
    _atomic_json(out, doc)
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m validation.measure.microbench")
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline-s", type=float, default=150.0)
    ap.add_argument("--only", default=None, help="comma-separated sweeps: " + ",".join(SWEEPS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-flush", action="store_true",
                    help="leave L2 as the previous call left it (kernels' floors as in a model)")
    ap.add_argument("--cpu-dry-run", action="store_true", help="tiny shapes on the CPU (no timings)")
    a = ap.parse_args(argv)
    only = set(a.only.split(",")) if a.only else None
    dev = "cpu" if a.cpu_dry_run else "cuda"
    if dev == "cuda":
        measure.require_cuda()
    run_sweeps(a.out, a.deadline_s, only, dev=dev, small=a.cpu_dry_run, reps=a.reps,
               flush=not a.no_flush)
    return 0


if __name__ == "__main__":
    sys.exit(main())
