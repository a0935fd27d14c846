"""docs/accuracy.md's section on training steps across GPUs, from the stored predictions of
``validation.score.dist_accuracy`` (``validation/results/dist/predictions.json``): step wall, memory per rank and
scaling over one GPU, by strategy and world size, every lease (record file) beside the others.

    python3 -m validation.reports.dist_page     # rewrite only that section (after validation.score.dist_accuracy)
"""

from __future__ import annotations

import json
import os
import statistics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORED = os.path.join(ROOT, "validation", "results", "dist", "predictions.json")

DIST_HEAD = """## Across GPUs: data-parallel training steps

DDP ResNet-50, DDP GPT-2 and FSDP2 Llama-3.2-1B (`validation/measure/dist_steps.py`) at 1, 2 and 4 GPUs of an
NVIDIA H200 x4 host (all pairs NV18), on three leases of the same day (`validation/results/dist/`, one column
each: lease 3 ran FSDP2 and DDP ResNet-50 at 2 and 4 GPUs only). Measured: the median step wall of the slowest
rank (each step timed from a synchronised start to `cuda.synchronize()`), rank 0's peak allocated memory. Predicted
once per case and world, the step as timed (gpusim's `synced_step_us`: one step from an idle GPU) (`python3 -m validation.score.dist_accuracy`,
stored in `validation/results/dist/predictions.json`; details and NCCL kernel counts in docs/distributed.md). The
spread column is the largest measured step over the smallest across leases: the noise any error here is read
against (FSDP2's wall moves ~40% between leases). Scaling: step at N GPUs over the same lease's step at 1 GPU
(lease 3: lease 1's)."""


def load(path: str = STORED) -> dict | None:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _lease(record: str) -> str:
    return os.path.basename(record).removesuffix(".jsonl")


def _err(p, m):
    return None if not m or p is None else (p - m) / m


def _pct(x) -> str:
    return "—" if x is None else f"{x:+.1%}"


def tables(rows: list[dict]) -> str:
    leases = sorted({x["record"] for x in rows}, key=_lease)
    names = [_lease(r) for r in leases]
    cases = sorted({(x["case"], x["world"]) for x in rows})
    by = {(x["record"], x["case"], x["world"]): x for x in rows}
    out = ["**Step wall** (ms, predicted; measured per lease with the error)", "",
           "| case | GPUs | predicted | " + " | ".join(names) + " | spread |",
           "|---|---|---|" + "---|" * len(names) + "---|"]
    for case, w in cases:
        xs = [by.get((r, case, w)) for r in leases]
        pred = next(x for x in xs if x)["pred_step_ms"]
        meas = [x["meas_step_ms"] for x in xs if x]
        cells = [f"{x['meas_step_ms']:.1f} ({_pct(_err(pred, x['meas_step_ms']))})" if x else "—" for x in xs]
        out.append(f"| {case} | {w} | {pred:.1f} | " + " | ".join(cells) + f" | {max(meas) / min(meas) - 1:.0%} |")
    out += ["", "**Memory per rank** (GiB, peak allocated; predicted / measured per lease with the error)", "",
            "| case | GPUs | predicted | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
    for case, w in cases:
        xs = [by.get((r, case, w)) for r in leases]
        pred = next(x for x in xs if x)["pred_peak"]
        cells = [f"{x['meas_peak'] / 2**30:.2f} ({_pct(_err(pred, x['meas_peak']))})" if x else "—" for x in xs]
        out.append(f"| {case} | {w} | {pred / 2**30:.2f} | " + " | ".join(cells) + " |")
    out += ["", "**Scaling over 1 GPU** (step at N GPUs / at 1 GPU; predicted, measured per lease with the error)", "",
            "| case | GPUs | predicted | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
    for case, w in cases:
        if w == 1:
            continue
        xs = [by.get((r, case, w)) for r in leases]
        pred = next(x for x in xs if x)["pred_scaling"]
        cells = [f"{x['meas_scaling']:.2f} ({_pct(_err(pred, x['meas_scaling']))})" if x and x["meas_scaling"]
                 else "—" for x in xs]
        out.append(f"| {case} | {w} | {pred:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def summary(rows: list[dict]) -> str:
    """Median absolute error by strategy and world size, each lease and all together."""
    leases = sorted({x["record"] for x in rows}, key=_lease)

    def med(sel, key):
        vals = [abs(e) for e in (key(x) for x in sel) if e is not None]
        return f"{statistics.median(vals):.1%}" if vals else "—"
    step = lambda x: _err(x["pred_step_ms"], x["meas_step_ms"])  # noqa: E731
    mem = lambda x: _err(x["pred_peak"], x["meas_peak"])  # noqa: E731
    scal = lambda x: _err(x["pred_scaling"], x["meas_scaling"]) if x["world"] > 1 else None  # noqa: E731
    out = ["**Median absolute error** by strategy and GPU count (step wall per lease, then all leases; memory and "
           "scaling over all leases)", "",
           "| strategy | GPUs | " + " | ".join(f"step, {_lease(r)}" for r in leases)
           + " | step, all | memory per rank | scaling |", "|---|---|" + "---|" * (len(leases) + 3)]
    groups = [(s, w) for s in ("ddp", "fsdp") for w in sorted({x["world"] for x in rows})] + [("all", None)]
    for s, w in groups:
        sel = [x for x in rows if (s == "all" or x["case"].startswith(s)) and (w is None or x["world"] == w)]
        if not sel:
            continue
        per = [med([x for x in sel if x["record"] == r], step) for r in leases]
        out.append(f"| {s} | {'all' if w is None else w} | " + " | ".join(per)
                   + f" | {med(sel, step)} | {med(sel, mem)} | {med(sel, scal)} |")
    return "\n".join(out)


def dist_markdown(path: str = STORED) -> str | None:
    """The section's tables (without its head), or None if never scored."""
    data = load(path)
    if not data:
        return None
    host = data.get("host", "")
    return "\n".join(["", f"Host figures: {host}." if host else "", "", summary(data["rows"]), "",
                      tables(data["rows"])])


def update_dist(page: str = os.path.join(ROOT, "docs", "accuracy.md")) -> None:
    """Rewrite only docs/accuracy.md's last section (training steps across GPUs, from the stored predictions),
    appending it if the page has none."""
    from gpusim.util.atomic import atomic_write
    with open(page) as f:
        text = f.read()
    kept = text.split(DIST_HEAD.splitlines()[0], 1)[0].rstrip("\n")
    block = dist_markdown()
    atomic_write(page, "\n".join([kept] + (["", DIST_HEAD, block] if block else [])).rstrip() + "\n")


if __name__ == "__main__":
    update_dist()
