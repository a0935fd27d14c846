"""16-bit attention with a padding mask, eager against torch.compile: the data the masked-attention law is fitted on.

``python3 -m validation.measure.sdpa_mask --out FILE.jsonl [--budget-s 160] [--reps 10] [--device cpu]``

Why: the held-out and zoo compiled records (H100, torch 2.11) run the same cuDNN attention kernel
(``cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_...``) 1.4-2.7x slower than the
eager records of the same models (BERT 8x12x512x64: 19.4 us eager, 34.9 us compiled; Llama-3.2-1B
8x32x512x64: 38.6 vs 92.4 us); the extra time is about the bytes of a per-head bias
(B x H x S x S x 2) at the DRAM rate. Eager Hugging Face code passes a padding mask expanded from
(B, 1, 1, S) (stride 0 over the queries) or none at all (an all-ones mask is dropped after a host
check); Inductor realises the mask densely (``sdpa_constraint``), so cuDNN reads a dense bias.

Points (bf16, cuDNN backend as PyTorch picks it): shapes (B, H, S, D) of the records' attention calls,
each with the mask laid out as ``none``; ``bcast_q`` (B, 1, 1, S) expanded to (B, 1, S, S), stride 0
over queries, as eager HF passes it; ``dense`` (B, 1, S, S) contiguous, as Inductor realises it;
``dense_heads`` (B, H, S, S) contiguous; ``heads_bcast_b`` (1, H, S, S) expanded over the batch, as
BEiT passes its relative position bias; ``compiled_hf``: ``torch.compile`` of the HF recipe (an int
padding mask (B, S) -> ``(1 - m[:, None, None, :].expand(B, 1, S, S)) * finfo.min`` -> SDPA), whose
kernels are the mask kernel Inductor writes and the attention call. Each point is warmed up (the
compile happens there), then profiled: ``reps`` calls in one profiler session, L2 flushed before each
(:func:`validation.measure.timing.profile_call`), median device time per kernel. Output: JSONL, an
environment line (``kind: environment``) then one line per point (``kind: sdpa_mask``: B, H, S, D,
layout, mode, kernels [{name, us}]), flushed after each; points stop starting after ``--budget-s``
seconds (listed as ``not_reached`` in the closing ``kind: summary`` line).
"""

from __future__ import annotations


import torch
import torch.nn.functional as F

from validation.measure import timing as measure
from validation.measure.bench_common import sweep_main

#: (B, H, S, D): BERT-base / GPT-2 (batch 8 x 512), XLM-R (16 x 256), OPUS-MT (4 x 384),
#: Llama-3.2-1B / Phi-1.5 (32 heads), Mistral-7B (head dim 128), ViT-S (197 tokens, unaligned);
#: then BEiT-base's relative-position-biased calls (issue 35: 257 tokens at batch 1, 101 at batch 8,
#: both unaligned; H100 held-out records: 17.6 and 9.6 us a call against 4.5 us unmasked) with
#: their aligned neighbours (256, 104 tokens), and ViT-B's 197 tokens at batch 1
SHAPES = ((8, 12, 512, 64), (16, 12, 256, 64), (4, 8, 384, 64), (8, 32, 512, 64),
          (8, 32, 512, 128), (32, 6, 197, 64), (1, 12, 128, 64),
          (1, 12, 257, 64), (1, 12, 256, 64), (8, 12, 101, 64), (8, 12, 104, 64), (1, 12, 197, 64))
#: ``heads_bcast_b``: a (1, H, S, S) bias per head expanded over the batch (stride 0), as timm's
#: BEiT passes its relative position bias
LAYOUTS = ("none", "bcast_q", "dense", "dense_heads", "heads_bcast_b", "compiled_hf")


def points(small: bool = False) -> list[dict]:
    """Every (shape, layout) point, the cheap layouts of a shape first."""
    shapes = ((1, 2, 16, 8),) if small else SHAPES
    return [{"B": b, "H": h, "S": s, "D": d, "layout": lay, "dtype": "bfloat16"}
            for (b, h, s, d) in shapes for lay in LAYOUTS]


def _hf_attention(q, k, v, pad):
    """The HF recipe: int padding mask -> additive bias expanded over the queries -> SDPA."""
    b, _, s, _ = q.shape
    m = pad[:, None, None, :].expand(b, 1, s, s).to(q.dtype)
    bias = (1.0 - m) * torch.finfo(q.dtype).min
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def make(p: dict, device: str):
    """``(fn, args)`` of one point."""
    b, h, s, d, dt = p["B"], p["H"], p["S"], p["D"], getattr(torch, p["dtype"])
    q, k, v = (torch.randn(b, h, s, d, device=device, dtype=dt) for _ in range(3))
    pad = torch.ones(b, s, device=device, dtype=torch.long)
    pad[: b // 2, -(s // 8):] = 0                       # half the rows padded, as a batch of texts
    lay = p["layout"]
    if lay == "compiled_hf":
        torch._dynamo.reset()
        return torch.compile(_hf_attention, dynamic=False), (q, k, v, pad)
    if lay == "none":
        mask = None
    else:
        m = ((1.0 - pad.to(dt)) * torch.finfo(dt).min)[:, None, None, :]
        mask = {"bcast_q": lambda: m.expand(b, 1, s, s),
                "dense": lambda: m.expand(b, 1, s, s).contiguous(),
                "dense_heads": lambda: m.expand(b, h, s, s).contiguous(),
                "heads_bcast_b": lambda: torch.randn(1, h, s, s, device=device, dtype=dt).expand(b, h, s, s)}[lay]()
    return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)), (q, k, v)


def run_point(p: dict, reps: int, device: str) -> dict:
    rec = dict(p, kind="sdpa_mask", mode="compiled" if p["layout"] == "compiled_hf" else "eager")
    return measure.profiled_record(rec, lambda: make(p, device), reps, device)

def main(argv=None) -> int:
    return sweep_main(argv, __doc__, "sdpa_mask", points, run_point,
                      lambda p: f"{p['B']}x{p['H']}x{p['S']}x{p['D']} {p['layout']:<12}", 160.0)


if __name__ == "__main__":
    raise SystemExit(main())
