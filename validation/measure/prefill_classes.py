"""The non-GEMM kernel classes of a decoder's prefill, timed as a prefill runs them: each op right
after the kernel that wrote its input (operands L2-resident, no flush). The data for the laws of the classes the H200 prefill records
(validation/results/generate/h200-2026-11-28k-prefill.jsonl) show under-priced at 1-32 MB (issue 34):
those records are the validation, never fitted; this sweep is what the laws are fitted on.

``python3 -m validation.measure.prefill_classes --out FILE.jsonl [--budget-s 100]``

Cases (bf16 activations, shapes of 0.5-8B decoders, rows = batch x tokens from 128 to 16384):

* ``rmsnorm``: Llama's RMSNorm over a bf16 hidden state of ``cols`` (896, 2048, 4096): the upcast
  (``to(float32)``: ATen's unrolled direct_copy), ``pow``, the row ``mean`` (reduce_kernel, one
  output per row: the class whose time follows the row width at few rows), ``add`` eps, ``rsqrt``,
  the broadcast ``mul`` in fp32 (legacy elementwise_kernel), the downcast, the weight ``mul`` (legacy
  bf16 broadcast);
* ``rope``: rotary embedding on a projection's output viewed ``(B, S, H, D)`` and transposed (as HF
  does): ``q * cos``, ``rotate_half`` (``neg`` of a strided half, ``cat`` of two strided halves:
  CatArrayBatchedCopy on strided inputs), ``* sin``, ``add``; H 32 and 8 (GQA keys), D 64;
* ``kv_cat``: DynamicCache's first ``cat`` of an empty tensor with the keys (contiguous) and the
  values (a transposed view), along the sequence dim;
* ``mlp_tail``: ``silu`` of a (rows x 8192) bf16 tensor and its product with another (vectorised);
* ``sdpa``: bf16 ``scaled_dot_product_attention`` (cuDNN on Hopper) ``is_causal`` and not, B 1 and 8,
  H 32, D 64, S 128 to 4096 (does the causal kernel skip the masked tiles at long sequences?).

Output: JSONL, an environment line then one line per case: case fields, ``state`` (``warm``),
``kernels`` ``[{name, us}]`` (median per kernel position over ``--reps`` calls, the producer
kernel that makes the operands warm excluded: it is the first, ``producer_kernels`` of them), and
``kernel_sum_us``. Cases stop starting after ``--budget-s`` seconds."""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

ROWS = (128, 512, 1024, 2048, 4096, 16384)
#: where the cases run (the tests build and call them on the CPU)
DEVICE = "cuda"


def _rmsnorm(rows: int, cols: int):
    src = torch.randn(rows, cols, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(cols, device=DEVICE, dtype=torch.bfloat16)

    def call():
        h = src * 1.0                                   # producer: the residual stream, just written
        x = h.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + 1e-6)
        return w * x.to(torch.bfloat16)
    return call, 1


def _rope(rows: int, heads: int, d: int = 64):
    b = 8 if rows >= 1024 else 1
    s = rows // b
    src = torch.randn(b, s, heads * d, device=DEVICE, dtype=torch.bfloat16)
    cos = torch.randn(1, s, d, device=DEVICE, dtype=torch.bfloat16).unsqueeze(1)
    sin = torch.randn(1, s, d, device=DEVICE, dtype=torch.bfloat16).unsqueeze(1)

    def call():
        q = (src * 1.0).view(b, s, heads, d).transpose(1, 2)     # producer: the projection's output
        x1, x2 = q[..., : d // 2], q[..., d // 2:]
        return q * cos + torch.cat((-x2, x1), dim=-1) * sin
    return call, 1


def _kv_cat(rows: int, heads: int = 8, d: int = 64):
    b = 8 if rows >= 1024 else 1
    s = rows // b
    src = torch.randn(b, s, heads * d, device=DEVICE, dtype=torch.bfloat16)

    def call():
        v = (src * 1.0).view(b, s, heads, d).transpose(1, 2)     # producer: v_proj's output
        k = v.contiguous()                                       # keys leave RoPE contiguous
        empty = torch.tensor([], device=DEVICE, dtype=torch.bfloat16)
        return torch.cat([empty, k], dim=-2), torch.cat([empty, v], dim=-2)
    return call, 2


def _mlp_tail(rows: int, inter: int = 8192):
    g = torch.randn(rows, inter, device=DEVICE, dtype=torch.bfloat16)
    u = torch.randn(rows, inter, device=DEVICE, dtype=torch.bfloat16)

    def call():
        a, c = g * 1.0, u * 1.0                      # producers: gate and up projections
        return torch.nn.functional.silu(a) * c
    return call, 2


def _sdpa(b: int, s: int, causal: bool, heads: int = 32, d: int = 64):
    q, k, v = (torch.randn(b, heads, s, d, device=DEVICE, dtype=torch.bfloat16) for _ in range(3))

    def call():
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return call, 0


def cases() -> list[tuple[dict, object]]:
    out = []
    for rows in ROWS:
        for cols in (896, 2048, 4096):
            out.append(({"case": "rmsnorm", "rows": rows, "cols": cols}, lambda r=rows, c=cols: _rmsnorm(r, c)))
        for heads in (32, 8):
            out.append(({"case": "rope", "rows": rows, "heads": heads, "d": 64}, lambda r=rows, h=heads: _rope(r, h)))
        out.append(({"case": "kv_cat", "rows": rows, "heads": 8, "d": 64}, lambda r=rows: _kv_cat(r)))
        out.append(({"case": "mlp_tail", "rows": rows, "inter": 8192}, lambda r=rows: _mlp_tail(r)))
    for b in (1, 8):
        for s in (128, 512, 1024, 2048, 4096):
            for causal in (True, False):
                out.append(({"case": "sdpa", "B": b, "H": 32, "S": s, "D": 64, "causal": causal},
                            lambda b=b, s=s, c=causal: _sdpa(b, s, c)))
    return out


def run_case(meta: dict, make, reps: int) -> list[dict]:
    from validation.measure import timing
    call, producers = make()
    recs = []
    ks = timing.profile_kernels(call, flush=False, reps=reps)["kernels"]
    main = ks[producers:]
    recs.append(dict(meta, kind="prefill_class", state="warm", producer_kernels=producers,
                     kernels=[{"name": k["name"][:140], "us": round(k["us"], 3)} for k in main],
                     kernel_sum_us=round(sum(k["us"] for k in main), 3)))
    torch.cuda.empty_cache()
    return recs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=100.0)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("prefill_classes: needs a CUDA GPU", file=sys.stderr)
        return 2
    from validation.measure.decode_run import environment
    props = torch.cuda.get_device_properties(0)
    t0 = time.time()
    with open(a.out, "a") as f:
        f.write(json.dumps({**environment(), "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
                            "sm_count": props.multi_processor_count}) + "\n")
        for meta, make in cases():
            if time.time() - t0 > a.budget_s:
                break
            try:
                recs = run_case(meta, make, a.reps)
            except Exception as e:  # noqa: BLE001 - one failed case must not end the sweep
                recs = [dict(meta, kind="prefill_class", failed=f"{type(e).__name__}: {str(e)[:200]}")]
            for r in recs:
                f.write(json.dumps(r) + "\n")
            f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
