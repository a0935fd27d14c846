"""The masked-attention law, fitted on the sdpa_mask sweep (``validation.measure.sdpa_mask``):
a masked 16-bit attention call costs the unmasked law plus the mask read once per batch and
head, ``B x H x Sq x Skv x 2`` bytes, at a rate per mask layout (the classes of
:func:`gpusim.lower.dispatch.mask_layout`):

- ``attention_mask_dense_tbps``: one (B, 1, S, S) matrix shared by the heads (the sweep's
  ``dense`` points: how Inductor realises a mask);
- ``attention_mask_bcast_tbps``: (B, 1, 1, S) expanded over the queries (``bcast_q``: how eager
  Hugging Face passes a padding mask);
- ``attention_mask_heads_tbps``: (B, H, S, S), a matrix per head (``dense_heads``).

Each rate is the least-squares slope through the origin of the extra time (the masked call's
attention kernel less the same shape's unmasked one) over the mask bytes, on the shapes whose
sequence is a multiple of 8 (ViT's 197 tokens read an unaligned mask, far slower: listed, not
fitted). Printed: the rates, each layout's error on the fitted points (the masked time as the
measured unmasked time plus the law's extra), leave-one-shape-out (each shape predicted by the
rate fitted on the others), the ``compiled_hf`` points' attention kernels against the dense rate,
and the unaligned shapes at the aligned rates. The unaligned shapes (a key count not a multiple of 8)
fit two more figures: the query tile of cuDNN's CTAs (64 or 128, the one that fits best) and the
rate (GB/s) at which one CTA reads its tile x Skv of the mask, the time going by waves of CTAs over
the SMs (``attention_mask_unaligned_*``, dense and per-head layouts; gpusim.cost.laws.unaligned_mask_us).

    python3 -m validation.fit.fit_sdpa_mask [--gpu h200] [--write]

``--write`` puts the three figures, with the sweep's provenance, into the GPU's calibrated spec.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

from gpusim.hw.spec import calibrated_name, load_spec
from validation.fit.fit_triton import emit_measured, spec_fit_args

#: sweep layout -> spec figure
LAYOUTS = {"dense": "attention_mask_dense_tbps", "bcast_q": "attention_mask_bcast_tbps",
           "dense_heads": "attention_mask_heads_tbps"}
UNALIGNED = ("attention_mask_unaligned_tile", "attention_mask_unaligned_cta_gbps")
FIGURES = tuple(LAYOUTS.values()) + UNALIGNED
ALIGN = 8
#: the unaligned fit's candidate query tiles: the one whose per-wave rate scatters least is kept
TILES = (64, 128)
#: the layouts a dense or per-head mask takes (the unaligned law's); bcast_q reads one row per batch
DENSE_LIKE = ("dense", "dense_heads", "heads_bcast_b")


def read(path: str) -> tuple[dict, dict]:
    """``(environment, {(B, H, S, D, layout): attention kernel µs})``; the attention kernel is
    every kernel but Inductor's generated mask kernel (``triton_``)."""
    env, points = {}, {}
    for line in open(path):
        r = json.loads(line)
        if r.get("kind") == "environment":
            env = r
        elif r.get("kind") == "sdpa_mask" and "failed" not in r:
            us = sum(k["us"] for k in r["kernels"] if not k["name"].startswith("triton_"))
            points[(r["B"], r["H"], r["S"], r["D"], r["layout"])] = us
    return env, points


def mask_bytes(shape: tuple) -> float:
    b, h, s, _ = shape
    return 2.0 * b * h * s * s


def shapes(points: dict, aligned: bool = True) -> list[tuple]:
    return sorted({k[:4] for k in points if (k[2] % ALIGN == 0) == aligned and k[:4] + ("none",) in points})


def fit_rate(points: dict, layout: str, on: list[tuple]) -> float:
    """TB/s: bytes over the extra time, least squares through the origin."""
    xs = [mask_bytes(s) for s in on]
    ys = [points[s + (layout,)] - points[s + ("none",)] for s in on]
    slope = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)      # µs per byte
    return 1.0 / slope / 1e6


def predicted(points: dict, shape: tuple, rate: float) -> float:
    return points[shape + ("none",)] + mask_bytes(shape) / (rate * 1e6)


def err(points: dict, shape: tuple, layout: str, rate: float) -> float:
    """Signed % error of the masked kernel time."""
    return (predicted(points, shape, rate) / points[shape + (layout,)] - 1) * 100


def cta_bytes(shape: tuple, tile: int, sms: int) -> float:
    """Waves of CTAs x one CTA's mask tile (``tile`` query rows x Skv, 2 bytes each)."""
    b, h, s, _ = shape
    waves = -(-b * h * -(-s // tile) // sms)
    return waves * min(s, tile) * s * 2.0


def fit_unaligned(points: dict, sms: int) -> tuple[dict, list[str]]:
    """The unaligned mask's per-CTA read rate (GB/s) per candidate tile, least squares through the
    origin of the dense-like layouts' extra time over waves x tile bytes; keeps the tile whose
    relative errors scatter least."""
    on = [(s, lay) for s in shapes(points, aligned=False) for lay in DENSE_LIKE if s + (lay,) in points]
    if not on:
        return {}, []
    best, lines = None, []
    for tile in TILES:
        xs = [cta_bytes(s, tile, sms) for s, _ in on]
        ys = [points[s + (lay,)] - points[s + ("none",)] for s, lay in on]
        slope = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)     # µs per byte
        e = [((points[s + ("none",)] + x * slope) / points[s + (lay,)] - 1) * 100 for (s, lay), x in zip(on, xs)]
        spread = statistics.median(map(abs, e))
        lines.append(f"unaligned, tile {tile}: {1e-3 / slope:.2f} GB/s per CTA on {len(on)} points; masked time "
                     f"|err| median {spread:.1f}%, max {max(map(abs, e)):.1f}% ({', '.join(f'{v:+.1f}' for v in e)})")
        if best is None or spread < best[0]:
            best = (spread, {UNALIGNED[0]: float(tile), UNALIGNED[1]: 1e-3 / slope})
    return best[1], lines


def report(points: dict) -> tuple[dict, list[str]]:
    on = shapes(points)
    rates, lines = {}, [f"fitted on {len(on)} aligned shapes (B, H, S, D): {', '.join(map(str, on))}"]
    for layout, fig in LAYOUTS.items():
        have = [s for s in on if s + (layout,) in points]
        rate = rates[fig] = fit_rate(points, layout, have)
        e = [err(points, s, layout, rate) for s in have]
        loo = [err(points, s, layout, fit_rate(points, layout, [t for t in have if t != s])) for s in have]
        lines.append(f"{layout}: {rate:.3f} TB/s; fitted points |err| median {statistics.median(map(abs, e)):.1f}%, "
                     f"max {max(map(abs, e)):.1f}%; leave one shape out |err| median "
                     f"{statistics.median(map(abs, loo)):.1f}%, max {max(map(abs, loo)):.1f}% "
                     f"({', '.join(f'{x:+.1f}' for x in loo)})")
    hf = [s for s in on if s + ("compiled_hf",) in points]
    if hf:
        e = [err(points, s, "compiled_hf", rates[LAYOUTS["dense"]]) for s in hf]
        lines.append(f"compiled_hf attention kernels at the dense rate (not fitted): |err| median "
                     f"{statistics.median(map(abs, e)):.1f}% ({', '.join(f'{x:+.1f}' for x in e)})")
    for s in shapes(points, aligned=False):
        e = [f"{lay} {err(points, s, lay, rates[fig]):+.1f}%" for lay, fig in LAYOUTS.items() if s + (lay,) in points]
        lines.append(f"unaligned {s} (not fitted): {', '.join(e)}")
    return rates, lines


def main(argv=None) -> int:
    a, path = spec_fit_args("fit_sdpa_mask", "sdpa_mask", argv)
    if path is None:
        return 2
    env, points = read(path)
    spec = load_spec(calibrated_name(a.gpu))
    rates, lines = report(points)
    slow, more = fit_unaligned(points, int(env.get("sm_count") or spec.sm_count))
    rates.update(slow)
    print("\n".join(lines + more))
    ref = (f"{env.get('gpu_name', a.gpu)}, {(env.get('utc') or '')[:10]}, python3 -m validation.measure.sdpa_mask "
           f"-> {os.path.relpath(path)}; fitted by python3 -m validation.fit.fit_sdpa_mask --gpu {a.gpu} "
           f"(mask bytes B x H x S x S x 2 over the attention kernel's time beyond the unmasked call, "
           f"{len(shapes(points))} aligned shapes; unaligned: waves of CTAs x tile x Skv x 2 bytes over the "
           f"extra time, {len(shapes(points, aligned=False))} shapes)")
    emit_measured(spec.path, FIGURES, rates, ref, ".3f", a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
