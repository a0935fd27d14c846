"""docs/accuracy.md's section on LLM inference, from the stored predictions of
``validation.score.generate_accuracy`` (``validation/results/generate/predictions.json``, written where it
rewrites docs/llm.md): prefill and decode-step device time per GPU, time per output token eager and static
compiled and the static path's speed-up on the leases timed call by call, KV-cache bytes and peak memory.
The page never re-runs that scorer (~13 min); docs/llm.md has every record's row."""

from __future__ import annotations

import json
import os
import statistics

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORED = os.path.join(ROOT, "validation", "results", "generate", "predictions.json")

LLM_HEAD = """## LLM inference: prefill, decode steps and whole generate() calls

Hugging Face decoders (Llama-3.2-1B, Qwen2-0.5B, Phi-1.5, Gemma-2B; the decode steps also Mistral-7B and GPT-2;
random weights, bf16) on H100 and H200 leases (`validation/measure/generate_run.py`, `validation/results/generate/`), predicted by
`python3 -m validation.score.generate_accuracy` (stored in `validation/results/generate/predictions.json`, read
here). Device time: the prefill (one forward over the prompt filling a DynamicCache) and one eager decode step
against the sum of their profiled kernels. Time per output token: whole `generate()` calls on the records timed
call by call (`statistic: fastest rep`: H200 leases j, m, n, o and p) on their lease's own host profile. Every record's row, the machine kinds'
profiles, the compiled call's split and what is still off: [llm.md](llm.md)."""


def load(path: str = STORED) -> dict | None:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _err(p: float, m: float) -> float:
    return abs(p / m - 1) * 100


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f}%" if xs else "—"


def _p90(xs: list[float]) -> str:
    return f"{float(np.percentile(xs, 90)):.1f}%" if xs else "—"


def device_table(data: dict) -> str:
    """Median and p90 |error| of the device time per GPU: prefill cases and decode steps."""
    by: dict = {}
    for part in ("prefill", "decode_step"):
        for x in data.get(part, []):
            by.setdefault(x["gpu"], {"prefill": [], "decode_step": []})[part].append(
                _err(x["pred_device_us"], x["meas_device_us"]))
    out = ["| GPU | prefill device time: median / p90 \\|error\\| (cases) | decode step device time: median / p90 "
           "\\|error\\| (steps) |", "|---|---|---|"]
    for gpu, e in sorted(by.items()):
        cells = [f"{_med(x)} / {_p90(x)} ({len(x)})" if x else "—" for x in (e["prefill"], e["decode_step"])]
        out.append(f"| {gpu} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def tpot_table(rows: list[dict]) -> str:
    """Time per output token on the records timed call by call on their lease's own profile, eager and
    static compiled, and the speed-up of the static path over the eager dynamic one (pairs of one
    GPU, lease, model and batch, both timed call by call)."""
    fast = [x for x in rows if x["fastest_rep"] and x["lease_profile"]]
    errs = {mode: [_err(x["pred_tpot_us"], x["meas_tpot_us"]) for x in fast if x["mode"] == mode]
            for mode in ("eager", "compiled")}
    paths: dict = {}
    for x in rows:     # one entry per (GPU, host, model, batch, path): the last record, as docs/llm.md's table
        paths[(x["gpu"], x["host"], x["model"], x["batch"], x["cache"], x["mode"])] = x
    speed = []
    for (gpu, host, model, batch, cache, mode), dyn in sorted(paths.items()):
        st = paths.get((gpu, host, model, batch, "static", "compiled"))
        if (cache, mode) != ("dynamic", "eager") or st is None or not (dyn["fastest_rep"] and st["fastest_rep"]):
            continue
        ps, ms = dyn["pred_tpot_us"] / st["pred_tpot_us"], dyn["meas_tpot_us"] / st["meas_tpot_us"]
        speed.append(_err(ps, ms))
    out = ["| time per output token | median \\|error\\| | cases |", "|---|---|---|"]
    for what, e in (("dynamic cache, eager", errs["eager"]), ("static cache, compiled", errs["compiled"]),
                    ("static compiled over eager dynamic (speed-up)", speed)):
        out.append(f"| {what} | {_med(e)} | {len(e)} |")
    return "\n".join(out)


def memory_lines(rows: list[dict]) -> str:
    kv = [x for x in rows if x["meas_kv_bytes"] is not None]
    peak = [_err(x["pred_peak_bytes"], x["meas_peak_bytes"]) for x in rows if x["meas_peak_bytes"]]
    lines = [f"- KV-cache bytes exact in {sum(x['pred_kv_bytes'] == x['meas_kv_bytes'] for x in kv)} of {len(kv)} "
             "generate() calls (dynamic and static caches)."]
    if peak:
        lines.append(f"- Peak allocated (predicted peak plus what the harness held) within 2% in "
                     f"{sum(e <= 2 for e in peak)} of {len(peak)} calls, median error {statistics.median(peak):.1f}%.")
    return "\n".join(lines)


def llm_markdown(path: str = STORED) -> str | None:
    """The section's tables (without its head), or None if never scored."""
    data = load(path)
    if not data:
        return None
    rows = data.get("generate", [])
    return "\n".join(["", device_table(data), "", tpot_table(rows), "", memory_lines(rows)])
