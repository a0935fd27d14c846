"""Text of a predicted ``generate()`` call (:mod:`gpusim.predict.generate`): one column per
cache/mode asked, side by side, then the time per output token as the cache grows."""

from __future__ import annotations

from gpusim.util.fmt import fmt_bytes, fmt_us, table

LABELS = {("dynamic", "eager"): "dynamic cache, eager", ("static", "compiled"): "static cache, compiled",
          ("static", "eager"): "static cache, eager"}


def generate_text(results) -> str:
    """``results``: one or more :class:`~gpusim.predict.generate.GenerateResult` of the same
    model, batch, prompt and length."""
    r0 = results[0]
    head = (f"{r0.model} generate on {r0.gpu} (host {r0.host}), {r0.dtype}: batch {r0.batch}, "
            f"prompt {r0.prompt}, {r0.new} new tokens (greedy)")
    rows = [
        ["time to first token"] + [fmt_us(r.ttft_us) for r in results],
        ["  prefill (device)"] + [f"{fmt_us(r.prefill_us)} ({fmt_us(r.prefill_device_us)})" for r in results],
        ["time per output token (mean)"] + [fmt_us(r.tpot_us) for r in results],
        ["  device per step"] + [fmt_us(sum(r.sample_device_us) / max(1, len(r.sample_device_us)))
                                 for r in results],
        ["  kernels per step"] + [str(r.step_kernels) for r in results],
        ["  generate's own host per token"] + [f"{fmt_us(r.tail_host_us)} ({r.tail_kernels} kernels)"
                                               for r in results],
        ["total"] + [fmt_us(r.total_us) for r in results],
        ["tokens/s (whole call)"] + [f"{r.tokens_per_s:,.0f}" for r in results],
        ["tokens/s (decoding)"] + [f"{r.decode_tokens_per_s:,.0f}" for r in results],
        ["KV cache"] + [fmt_bytes(r.kv_cache_bytes) for r in results],
        ["peak (weights + cache + activations)"] + [fmt_bytes(r.peak_bytes) for r in results],
        ["fits in " + fmt_bytes(r0.capacity_bytes)] + ["yes" if r.fits else "NO" for r in results],
        [f"largest batch that fits (prompt {r0.prompt} + {r0.new})"] + [f"{r.max_batch:,}" for r in results],
    ]
    labels = [LABELS.get((r.cache, r.mode), f"{r.cache}, {r.mode}") for r in results]
    out = [head, "", table(rows, [""] + labels)]
    curve = [[str(c)] + [fmt_us(_at(r, c)) for r in results] for c in results[0].sample_contexts]
    if curve:
        out += ["", "time per output token by context (predicted at these contexts, linear between):",
                table(curve, ["context"] + labels)]
    return "\n".join(out)


def _at(r, context: int) -> float:
    if context in r.sample_contexts:
        return r.sample_token_us[r.sample_contexts.index(context)]
    i = min(max(context - r.prompt, 0), len(r.token_us) - 1)
    return r.token_us[i]
