"""Decode attention in the H200 generate records: each record's measured cuDNN one-query attention
kernel and ``lean_reduction_kernel`` (per call: the profiled window's kernel time over its count)
against the kernels gpusim predicts for the same model's decode step (eager dynamic cache, static
cache compiled), with the decode-attention law (:mod:`gpusim.cost.decode_attention`) and without
it (the same spec less its sdpa_decode figures: the FLOP law, a reduction kernel every call), and
the step's device time and time per token both ways (on the H200 machine kind's host profile).

    python3 -m validation.score.decode_attention_records [--records validation/results/generate/h200-2026-11-28f.jsonl]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from gpusim.hw.schema import DECODE_ATTENTION_FIGURES
from gpusim.hw.spec import load_spec
from gpusim.predict.generate import generate_runs
from validation.score.decode_accuracy import HOSTS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDS = os.path.join(ROOT, "validation", "results", "generate", "h200-2026-11-28f.jsonl")
MAIN, LEAN = "sm80_flash_fprop", "lean_reduction"


def measured(r: dict) -> tuple[float, float, int, int]:
    """(attention µs per call, reduction µs per call, attention calls, reduction calls)."""
    pr = r["profiled"]
    out = []
    for key in (MAIN, LEAN):
        names = [n for n in pr["kernels"] if key in n]
        count = sum(pr["kernels"][n] for n in names)
        out.append((sum(pr["kernel_us"][n] for n in names) / count if count else 0.0, count))
    return out[0][0], out[1][0], out[0][1], out[1][1]


def predicted(res) -> tuple[float, float, int, int, float, float]:
    """(attention µs per call, reduction µs per call, calls, reductions, step device µs, TPOT µs)
    of the last sampled decode step."""
    step = list(res.parts["steps"].values())[-1]
    att = [k for k in step.kernels if k.role == "main" and "scaled_dot_product" in " ".join(k.op_types)]
    red = [k for k in step.kernels if k.variant == "lean_reduction"]
    return (sum(k.us for k in att) / max(len(att), 1), sum(k.us for k in red) / max(len(red), 1),
            len(att), len(red), step.device_us, res.tpot_us)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", default=RECORDS)
    a = ap.parse_args(argv)
    after = load_spec("h200-sxm-calibrated")
    before = dataclasses.replace(after, **{f: None for f in DECODE_ATTENTION_FIGURES})
    rows = [json.loads(line) for line in open(a.records)]
    rows = [r for r in rows if r.get("kind") == "generate" and r.get("profiled")]
    print("| model | batch | cache, mode | attention µs/call meas / before / after | reduction µs/call meas "
          "(calls) / before / after (calls) | step device µs before / after | TPOT ms meas / before / after |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ma, ml, na, nl = measured(r)
        out = {}
        for label, spec in (("before", before), ("after", after)):
            out[label] = predicted(generate_runs(r["model"], [(r["cache"], r["mode"])], r["batch"], r["prompt"],
                                                 r["new"], gpu=spec, host=HOSTS["NVIDIA H200"], samples=1)[0])
        b, f = out["before"], out["after"]
        tpot = sorted(r["token_ms"])[len(r["token_ms"]) // 2]
        print(f"| {r['model']} | {r['batch']} | {r['cache']}, {r['mode']} | {ma:.1f} / {b[0]:.1f} / {f[0]:.1f} | "
              f"{ml:.1f} ({nl}/{na}) / {b[1]:.1f} ({b[3]}/{b[2]}) / {f[1]:.1f} ({f[3]}/{f[2]}) | "
              f"{b[4]:.0f} / {f[4]:.0f} | {tpot:.2f} / {b[5] / 1e3:.2f} / {f[5] / 1e3:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
