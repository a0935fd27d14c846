"""Serving questions over whole generations: batch x context x GPU -> time to first token,
time per output token, decode tokens/s, peak memory (:func:`gpusim.predict.generate.generate_grid`,
one capture per graph for every GPU), and which GPU serves a target tokens/s at a bound on the
time per output token most cheaply.

The answer's law: on one GPU the best configuration is the one that fits and meets the bound
with the most decode tokens/s (batch / time per output token); serving ``target`` tokens/s
takes ``ceil(target / best)`` such GPUs (independent replicas), costing that many times the
GPU's hourly price (``--price``; without prices the GPUs are ranked by how many are needed)."""

from __future__ import annotations

import math

from gpusim.util.fmt import fmt_bytes, table


def serving_rows(model, gpus, batches, prompts, new: int, cache: str = "dynamic",
                 mode: str = "eager", host=None, dtype="bfloat16", jobs: int = 1) -> list[dict]:
    """One row per GPU x batch x prompt, plain numbers; ``jobs``: as
    :func:`~gpusim.predict.generate.generate_grid`."""
    from gpusim.predict.generate import generate_grid
    grid = generate_grid(model, [(cache, mode)], batches, prompts, new, gpus, host, dtype, jobs=jobs)
    rows = []
    for (_, b, p, _, _), r in grid.items():
        rows.append({"gpu": r.gpu, "model": r.model, "batch": b, "prompt": p, "new": new,
                     "cache": cache, "mode": mode, "ttft_ms": r.ttft_us / 1e3,
                     "tpot_ms": r.tpot_us / 1e3, "tokens_per_s": r.decode_tokens_per_s,
                     "kv_cache_bytes": r.kv_cache_bytes, "peak_bytes": r.peak_bytes,
                     "fits": r.fits})
    return rows


def cheapest(rows: list[dict], prices: dict, target_tps: float | None,
             max_tpot_ms: float | None) -> list[dict]:
    """Per prompt length, per GPU: its best configuration under the bound, the GPUs needed
    for ``target_tps`` and their cost per hour; cheapest first (no prices: fewest GPUs,
    then most tokens/s)."""
    best: dict = {}
    for r in rows:
        if not r["fits"] or (max_tpot_ms is not None and r["tpot_ms"] > max_tpot_ms):
            continue
        k = (r["prompt"], r["gpu"])
        if k not in best or r["tokens_per_s"] > best[k]["tokens_per_s"]:
            best[k] = r
    out = []
    for (prompt, gpu), r in best.items():
        n = math.ceil(target_tps / r["tokens_per_s"]) if target_tps else 1
        price = prices.get(gpu)
        out.append({"prompt": prompt, "gpu": gpu, "batch": r["batch"], "tpot_ms": r["tpot_ms"],
                    "tokens_per_s": r["tokens_per_s"], "gpus_needed": n,
                    "usd_per_hour": n * price if price is not None else None,
                    "usd_per_million_tokens": price * 1e6 / (3600 * r["tokens_per_s"])
                    if price is not None else None})
    out.sort(key=lambda a: (a["prompt"], a["usd_per_hour"] is None,
                            a["usd_per_hour"] or 0.0, a["gpus_needed"], -a["tokens_per_s"]))
    return out


def serving_text(rows: list[dict], ranked: list[dict], target_tps, max_tpot_ms) -> str:
    r0 = rows[0]
    head = (f"{r0['model']} serving, {r0['cache']} cache, {r0['mode']}: {r0['new']} new tokens "
            "per request")
    body = table([[r["gpu"], str(r["batch"]), str(r["prompt"]), f"{r['ttft_ms']:.1f}",
                   f"{r['tpot_ms']:.2f}", f"{r['tokens_per_s']:,.0f}", fmt_bytes(r["peak_bytes"]),
                   "yes" if r["fits"] else "NO"] for r in rows],
                 ["GPU", "batch", "prompt", "TTFT ms", "ms/token", "tokens/s", "peak", "fits"])
    out = [head, "", body, ""]
    bound = f"at most {max_tpot_ms:g} ms per token" if max_tpot_ms is not None else "no latency bound"
    goal = f"{target_tps:,.0f} tokens/s" if target_tps else "one GPU"
    if not ranked:
        out.append(f"No GPU meets {bound} with a batch that fits.")
        return "\n".join(out)
    for prompt in sorted({a["prompt"] for a in ranked}):
        first = next(a for a in ranked if a["prompt"] == prompt)
        cost = (f", ${first['usd_per_hour']:.2f}/h (${first['usd_per_million_tokens']:.3f} per "
                "million tokens)" if first["usd_per_hour"] is not None else
                " (give --price GPU=USD_PER_HOUR to rank by cost)")
        out.append(f"prompt {prompt}, {goal}, {bound}: {first['gpu']} x{first['gpus_needed']} "
                   f"at batch {first['batch']} ({first['tokens_per_s']:,.0f} tokens/s each){cost}")
    return "\n".join(out)
