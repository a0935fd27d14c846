"""What the data-parallel step records say about compute beside NCCL kernels (docs/distributed.md, "What is weak").

For every step record at 2 or more GPUs (``validation/results/dist/*.jsonl``, rank 0's profiled step), each compute
kernel is set against the same kernel (same position, same name) of the same case at world 1 on the same lease (a
lease without world 1: the first lease that has it). Printed per record:

- ``under``: the compute kernels that ran wholly while an NCCL kernel was resident, their time at world 1 and here,
  and the ratio (how much an NCCL kernel beside them slows them);
- ``rest``: the same for the kernels no NCCL kernel overlapped (the control: ~1.000);
- ``nccl``: the NCCL kernels' total resident time and the longest (a kernel is resident from its start, waiting for
  its peers, to its end).

    python3 -m validation.score.dist_overlap
"""

from __future__ import annotations

import os
import statistics
import sys

from validation.records.jsonl import env_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDS = os.path.join(ROOT, "validation", "results", "dist", "*.jsonl")


def _is_nccl(k: dict) -> bool:
    return k["name"].startswith("ncclDevKernel")


def overlap_row(rec: dict, world1: dict) -> dict | None:
    """The record's kernels against world 1's; None when the compute kernel sequences differ (FSDP2: world 1 does
    not shard, so its kernels are others)."""
    ks = sorted(rec["kernels"], key=lambda k: k["ts_us"])
    base = [k for k in sorted(world1["kernels"], key=lambda k: k["ts_us"]) if not _is_nccl(k)]
    comp = [k for k in ks if not _is_nccl(k)]
    if len(base) != len(comp) or any(a["name"] != b["name"] for a, b in zip(base, comp)):
        return None
    nccl = [(k["ts_us"], k["ts_us"] + k["dur_us"]) for k in ks if _is_nccl(k)]
    acc = {"under": [0.0, 0.0, 0], "rest": [0.0, 0.0, 0]}
    for a, b in zip(base, comp):
        s, e = b["ts_us"], b["ts_us"] + b["dur_us"]
        covered = sum(max(0.0, min(e, y) - max(s, x)) for x, y in nccl)
        key = "under" if covered >= 0.95 * b["dur_us"] else "rest" if covered == 0 else None
        if key:
            acc[key][0] += a["dur_us"]
            acc[key][1] += b["dur_us"]
            acc[key][2] += 1
    return {"case": rec["case"], "world": rec["world"], "step_ms": rec["step_ms"]["median"],
            **{f"{k}_w1_ms": v[0] / 1e3 for k, v in acc.items()}, **{f"{k}_ms": v[1] / 1e3 for k, v in acc.items()},
            **{f"{k}_kernels": v[2] for k, v in acc.items()},
            **{f"{k}_ratio": (v[1] / v[0] if v[0] else None) for k, v in acc.items()},
            "nccl_resident_ms": sum(y - x for x, y in nccl) / 1e3,
            "nccl_longest_ms": max((y - x for x, y in nccl), default=0.0) / 1e3}


def rows(pattern: str = RECORDS) -> list[dict]:
    recs = env_records(pattern, "step", ROOT)
    world1 = {}
    for _, r, path in recs:
        if r["world"] == 1 and "error" not in r:
            world1.setdefault((path, r["case"]), r)
            world1.setdefault(("any", r["case"]), r)
    out = []
    for _, r, path in recs:
        if r["world"] < 2 or "error" in r or not r.get("kernels"):
            continue
        one = world1.get((path, r["case"])) or world1.get(("any", r["case"]))
        row = overlap_row(r, one) if one else None
        if row:
            out.append({"record": path, **row})
    return out


def main() -> int:
    got = rows()
    for r in got:
        print(f"{os.path.basename(r['record']):34s} {r['case']:13s} {r['world']}  under NCCL: {r['under_kernels']:4d} "
              f"kernels {r['under_w1_ms']:5.1f} -> {r['under_ms']:5.1f} ms (x{r['under_ratio'] or 0:.3f})  rest: "
              f"{r['rest_w1_ms']:5.1f} -> {r['rest_ms']:5.1f} ms (x{r['rest_ratio'] or 0:.3f})  NCCL resident "
              f"{r['nccl_resident_ms']:5.1f} ms, longest {r['nccl_longest_ms']:5.2f}")
    big = [r["under_ratio"] for r in got if r["under_ratio"] and r["under_w1_ms"] > 1.0]
    if big:
        print(f"compute under a resident NCCL kernel (records with > 1 ms of it): median x{statistics.median(big):.3f}, "
              f"{min(big):.3f}-{max(big):.3f} over {len(big)} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
