"""The non-GEMM kernel classes of an eager decode step, timed at a decode step's shapes (one new token per
sequence: 1-128 rows): the data the few-row laws are fitted on (issue 34).

``python3 -m validation.measure.decode_classes --out FILE.jsonl [--budget-s 170] [--reps 10] [--device cpu]``

Why: matched kernel by kernel against the H200 generate records (validation/results/generate/h200-2026-11-28f.jsonl,
``profiled.kernel_seq``; validation/score/decode_kernels.py), an eager decode step's device time is over-predicted by
classes whose laws were fitted at prefill shapes (128-16384 rows, validation/measure/prefill_classes.py) or at the
dispatch sweep's sizes: RMSNorm's row ``mean`` (the row-walk law, 2.25 ns a column however few the rows: 5.6 us
predicted at 1 row x 2048 columns, 2.1 us measured), the bf16 strided elementwise floor (2.4 us; 1.2-2.1 measured on
rotary's tiny operands), DynamicCache's ``cat`` of the resident cache with the new token (priced as a strided
copy; it runs ``CatArrayBatchedCopy_vectorized`` at 3-4 TB/s), and Phi's LayerNorm at 1-8 rows (2.3 us predicted,
4.8 measured).

Points (bf16 activations, the shapes of 0.5-8B decoders at batch 1-128; eager, PyTorch's default flags): ``rmsnorm``
(Llama's RMSNorm over ``rows`` x ``cols``: upcast, ``pow``, the row ``mean``, ``+ eps``, ``rsqrt``, the fp32 broadcast
``mul``, downcast, the weight ``mul``); ``layernorm`` (``F.layer_norm`` with weight and bias); ``rope`` (rotary
embedding of a projection's output ``(B, 1, H, D)`` transposed to ``(B, H, 1, D)`` as HF does: ``* cos``, ``neg`` of a
strided half, ``cat`` of the two halves, ``* sin``, ``add``); ``kv_cat`` (``torch.cat([cache, new], dim=-2)``:
a contiguous ``(B, Hk, S, D)`` cache and the new token's ``(B, 1, Hk, D)`` transposed, as DynamicCache appends),
``state`` ``warm`` (back to back: the cache the previous call read is in the L2 when it fits) or ``cold`` (a
read of a 3x-L2 buffer first, ``sum``, which leaves the L2 full of clean lines: no write-back competes, as in a
decode step whose weight stream has evicted the cache since the last step). Each point: a producer kernel that
writes the op's input (so it is L2-warm, as the previous kernel of a decode step left it), then the op.

Method: each point is built, called 3 times (warm-up), then ``reps`` calls in one profiler session
(:func:`validation.measure.timing.profile_call`, no L2 flush: the cold state does its own read), median device time per
kernel position; every kernel is recorded (the producer's and the cold state's read included: a fit picks the op's
kernels by name). Output: JSONL, an environment line (``kind: environment``) then one ``kind: decode_class`` line a
point (its fields, ``kernels`` [{name, us}], ``kernel_count``, ``kernel_sum_us``), flushed after each; points stop
starting after ``--budget-s`` seconds (``not_reached`` in the closing ``kind: summary`` line).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from validation.measure.bench_common import sweep_main

ROWS = (1, 2, 4, 8, 16, 32, 64, 128)
NORM_COLS = (896, 2048, 4096)
LN_ROWS = (1, 8, 32, 128)
LN_COLS = (2048, 2560, 4096)
ROPE = [(b, h, d) for b in (1, 8, 32) for (h, d) in ((2, 64), (8, 64), (14, 64), (32, 64), (8, 128), (32, 128))]
CAT = [(b, hk, d, s) for s in (512, 2048, 4096) for b in (1, 8, 32) for (hk, d) in ((2, 64), (8, 64), (32, 64), (8, 128))]


def points(small: bool = False) -> list[dict]:
    """Every point, the small and quick ones first (the budget cuts the largest caches last)."""
    if small:
        return [{"case": "rmsnorm", "rows": 2, "cols": 16}, {"case": "layernorm", "rows": 2, "cols": 16},
                {"case": "rope", "B": 2, "H": 2, "D": 8},
                {"case": "kv_cat", "B": 1, "Hk": 2, "D": 8, "S": 4, "state": "warm"},
                {"case": "kv_cat", "B": 1, "Hk": 2, "D": 8, "S": 4, "state": "cold"}]
    out = [{"case": "rmsnorm", "rows": r, "cols": c} for c in NORM_COLS for r in ROWS]
    out += [{"case": "layernorm", "rows": r, "cols": c} for c in LN_COLS for r in LN_ROWS]
    out += [{"case": "rope", "B": b, "H": h, "D": d} for (b, h, d) in ROPE]
    out += [{"case": "kv_cat", "B": b, "Hk": hk, "D": d, "S": s, "state": st}
            for (b, hk, d, s) in CAT for st in ("cold", "warm")]
    return out


def _rmsnorm(p, dev, dt):
    src = torch.randn(p["rows"], p["cols"], device=dev, dtype=dt)
    w = torch.randn(p["cols"], device=dev, dtype=dt)

    def fn():
        x = (src * 1.0).to(torch.float32)                # producer: the residual stream, just written
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + 1e-6)
        return w * x.to(dt)
    return fn


def _layernorm(p, dev, dt):
    src = torch.randn(p["rows"], p["cols"], device=dev, dtype=dt)
    w, b = (torch.randn(p["cols"], device=dev, dtype=dt) for _ in range(2))
    return lambda: F.layer_norm(src * 1.0, (p["cols"],), w, b, 1e-5)


def _rope(p, dev, dt):
    b, h, d = p["B"], p["H"], p["D"]
    src = torch.randn(b, 1, h * d, device=dev, dtype=dt)
    cos, sin = (torch.randn(b, 1, d, device=dev, dtype=dt).unsqueeze(1) for _ in range(2))

    def fn():
        q = (src * 1.0).view(b, 1, h, d).transpose(1, 2)          # producer: the projection's output
        x1, x2 = q[..., : d // 2], q[..., d // 2:]
        return q * cos + torch.cat((-x2, x1), dim=-1) * sin
    return fn


def _kv_cat(p, dev, dt, l2_bytes: int):
    b, hk, d, s = p["B"], p["Hk"], p["D"], p["S"]
    cache = torch.randn(b, hk, s, d, device=dev, dtype=dt)
    src = torch.randn(b, 1, hk * d, device=dev, dtype=dt)
    flush = torch.ones(max(3 * l2_bytes // 4, 16), device=dev, dtype=torch.float32) if p["state"] == "cold" else None

    def fn():
        if flush is not None:
            flush.sum()                                            # reads evict the cache, leave clean lines
        new = (src * 1.0).view(b, 1, hk, d).transpose(1, 2)        # producer: the new token's keys/values
        return torch.cat([cache, new], dim=-2)
    return fn


def make(p: dict, device: str):
    """``(fn, args)`` of one point."""
    dt = torch.bfloat16
    if p["case"] == "rmsnorm":
        return _rmsnorm(p, device, dt), ()
    if p["case"] == "layernorm":
        return _layernorm(p, device, dt), ()
    if p["case"] == "rope":
        return _rope(p, device, dt), ()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size if device == "cuda" else 64
    return _kv_cat(p, device, dt, l2), ()


def run(p: dict, reps: int, device: str) -> dict:
    """One point's record: the calls back to back, no L2 flush between them (the cold state reads its own)."""
    from validation.measure import timing as measure
    rec = measure.profiled_record(dict(p, kind="decode_class", mode="eager", dtype="bfloat16"),
                                  lambda: make(p, device), reps, device, flush=False)
    rec.pop("split", None)
    return rec


def describe(p: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items() if k != "case") + f" {p['case']}"


def main(argv=None) -> int:
    return sweep_main(argv, __doc__, "decode_classes", points, run, describe, 170.0)


if __name__ == "__main__":
    raise SystemExit(main())
