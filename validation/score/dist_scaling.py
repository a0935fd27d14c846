"""Why DDP steps grow with the world: the records' two causes, per record (docs/distributed.md, issue 33).

For every DDP step record at 2 or more GPUs (``validation/results/dist/*.jsonl``) against the same case at world 1
on the same lease (a lease without world 1 is skipped: its host may differ):

- ``step``: the timed step's growth (median wall, slowest rank), ms and x;
- (a) NCCL's SM share, from rank 0's profiled step (kernel sequences match one to one): the compute kernels' growth
  in all (``d_kernels``), split into tensor-core kernels (GEMMs, convolutions, attention: :func:`is_tensor_core`) and
  the rest, each over the time an NCCL kernel was resident beside them; and what gpusim's law says of the same
  overlaps (``law``: :func:`gpusim.cost.collectives.sm_share_factor`, a tensor-core kernel on the SMs NCCL's channels
  leave, the rest unslowed by SMs: the record's own residency, the link file's channels, the spec's SM count);
- (b) the host: the pure-Python probe before each timed step (``python_us``, slowest rank), median at this world
  over world 1's (leases that recorded it).

The profiled step runs after a barrier under the profiler; its NCCL kernels wait far longer for peers than the
timed steps' can (their span is 1.2-1.7x the timed wall), so (a) here is an upper bound of what the timed steps pay.

    python3 -m validation.score.dist_scaling
"""

from __future__ import annotations

import os
import re
import statistics
import sys

from validation.records.jsonl import env_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDS = os.path.join(ROOT, "validation", "results", "dist", "*.jsonl")
#: kernel names of tensor-core work: cuBLAS (nvjet, cutlass), cuDNN convolutions (xmma, implicit GEMM), attention
TENSOR_CORE = re.compile(r"gemm|xmma|nvjet|cutlass|sdpa|flash|fprop|dgrad|wgrad|cask", re.IGNORECASE)


def is_tensor_core(name: str) -> bool:
    return bool(TENSOR_CORE.search(name)) and "nchwToNhwc" not in name and "nhwcToNchw" not in name


def _nccl(k: dict) -> bool:
    return k["name"].startswith("ncclDevKernel")


def law_factor(gpu: str = "h200") -> float:
    """gpusim's SM-share factor for a compute-bound kernel beside a collective on all of NCCL's ring channels."""
    from gpusim.cost.collectives import link_for, sm_share_factor
    from gpusim.hw.spec import spec_for
    spec = spec_for(gpu)
    link = link_for(spec)
    return sm_share_factor(link.nccl_coll["coll_channels"], spec.sm_count)


def sm_row(rec: dict, world1: dict, factor: float) -> dict | None:
    """(a) for one record against world 1's kernels; None when the compute kernel sequences differ."""
    ks = sorted(rec["kernels"], key=lambda k: k["ts_us"])
    base = [k for k in sorted(world1["kernels"], key=lambda k: k["ts_us"]) if not _nccl(k)]
    comp = [k for k in ks if not _nccl(k)]
    if len(base) != len(comp) or any(a["name"] != b["name"] for a, b in zip(base, comp)):
        return None
    nccl = [(k["ts_us"], k["ts_us"] + k["dur_us"]) for k in ks if _nccl(k)]
    out = {"tc_w1": 0.0, "tc": 0.0, "mem_w1": 0.0, "mem": 0.0, "law": 0.0, "all_w1": 0.0, "all": 0.0}
    for a, b in zip(base, comp):
        s, e = b["ts_us"], b["ts_us"] + b["dur_us"]
        out["all_w1"] += a["dur_us"]
        out["all"] += b["dur_us"]
        covered = sum(max(0.0, min(e, y) - max(s, x)) for x, y in nccl)
        if covered < 0.95 * b["dur_us"]:
            continue
        key = "tc" if is_tensor_core(b["name"]) else "mem"
        out[f"{key}_w1"] += a["dur_us"]
        out[key] += b["dur_us"]
        if key == "tc":      # the law's compute-bound kernels; streaming ones keep their SMs (the microbenchmark)
            out["law"] += a["dur_us"] * (factor - 1.0)
    out["nccl_resident"] = sum(y - x for x, y in nccl)
    return {k: v / 1e3 for k, v in out.items()}


def rows(pattern: str = RECORDS) -> list[dict]:
    recs = [(r, path) for _, r, path in env_records(pattern, "step", ROOT) if "error" not in r]
    w1 = {(path, r["case"]): r for r, path in recs if r["world"] == 1}
    factor = law_factor()
    out = []
    for r, path in recs:
        one = w1.get((path, r["case"]))
        if r["world"] < 2 or not r["case"].startswith("ddp") or one is None:
            continue
        row = {"record": os.path.basename(path), "case": r["case"], "world": r["world"],
               "step_w1": one["step_ms"]["median"], "step": r["step_ms"]["median"], "law_factor": factor}
        row["d_step"] = row["step"] - row["step_w1"]
        py, py1 = r.get("python_us"), one.get("python_us")
        row["python_ratio"] = statistics.median(py) / statistics.median(py1) if py and py1 else None
        sm = sm_row(r, one, factor) if r.get("kernels") and one.get("kernels") else None
        if sm:
            row.update(sm)
            row["d_kernels"] = sm["all"] - sm["all_w1"]
        out.append(row)
    return out


def python_factor(pattern: str = RECORDS) -> tuple[float, int, int, list[str]]:
    """The host's pure-Python probe with 2+ ranks over 1 rank: the median over every timed step at 2 and 4 ranks over
    the median at 1 rank, pooled over the leases that recorded both (every case: the probe is the host's, not the
    step's). Returns (factor, steps at 2+ ranks, steps at 1 rank, records)."""
    one, many, files = [], [], []
    by_file: dict = {}
    for _, r, path in env_records(pattern, "step", ROOT):
        if r.get("python_us"):
            by_file.setdefault(path, []).append(r)
    for path, recs in sorted(by_file.items()):
        if any(r["world"] == 1 for r in recs) and any(r["world"] > 1 for r in recs):
            files.append(path)
            for r in recs:
                (one if r["world"] == 1 else many).extend(r["python_us"])
    if not one or not many:
        return float("nan"), 0, 0, []
    return statistics.median(many) / statistics.median(one), len(many), len(one), files


SM_SHARE = os.path.join(ROOT, "validation", "results", "dist", "*-sm_share.jsonl")


def sm_share_rows(pattern: str = SM_SHARE) -> list[dict]:
    """``validation/measure/sm_share.py``'s records: per compute case, its ratio beside a waiting NCCL kernel of each
    size and beside a busy one, and whether it is tensor-core work (GEMM, convolution)."""
    import glob
    import json
    out: dict = {}
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("kind") != "sm_share" or r.get("ratio") is None:
                    continue
                key = (os.path.basename(path), r["compute"], tuple(r["shape"]))
                row = out.setdefault(key, {"record": key[0], "compute": r["compute"], "shape": list(r["shape"]),
                                           "alone_us": r["alone_us"], "sm_count": r["sm_count"],
                                           "tensor_core": r["compute"].startswith(("gemm", "conv"))})
                row[f"{r['mode']}_{r['comm_bytes']}"] = r["ratio"]
    return list(out.values())


def _x(a, b):
    return f"x{a / b:.3f}" if b else "   -  "


def main() -> int:
    got = rows()
    print("| record | case | world | step ms w1 -> w (x) | kernels +ms | tensor-core under NCCL ms (x) | law +ms | "
          "rest under NCCL ms (x) | NCCL resident ms | (a) / step growth | python probe x |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in got:
        a = r.get("d_kernels")
        share = f"{a / r['d_step']:.0%}" if a is not None and r["d_step"] > 0 else "—"
        py = f"x{r['python_ratio']:.2f}" if r["python_ratio"] else "—"
        if "tc" in r:
            print(f"| {r['record'].removesuffix('.jsonl')} | {r['case']} | {r['world']} | {r['step_w1']:.1f} -> "
                  f"{r['step']:.1f} ({_x(r['step'], r['step_w1'])}) | {a:+.2f} | {r['tc_w1']:.1f} -> {r['tc']:.1f} "
                  f"({_x(r['tc'], r['tc_w1'])}) | {r['law']:+.2f} | {r['mem_w1']:.1f} -> {r['mem']:.1f} "
                  f"({_x(r['mem'], r['mem_w1'])}) | {r['nccl_resident']:.1f} | {share} | {py} |")
    tc = [r["tc"] / r["tc_w1"] for r in got if r.get("tc_w1", 0) > 1.0]
    mem = [r["mem"] / r["mem_w1"] for r in got if r.get("mem_w1", 0) > 1.0]
    sh = [r["d_kernels"] / r["d_step"] for r in got if "d_kernels" in r and r["d_step"] > 0]
    pys = [r["python_ratio"] for r in got if r["python_ratio"]]
    f = got[0]["law_factor"] if got else float("nan")
    print(f"\nlaw (a tensor-core kernel on the SMs NCCL's channels leave): x{f:.3f}")
    both = [(r["tc"] + r["mem"] - r["tc_w1"] - r["mem_w1"], r["law"]) for r in got if r.get("tc_w1", 0) + r.get("mem_w1", 0) > 1.0]
    if both:
        print(f"kernels under a resident NCCL kernel, growth law / measured: median "
              f"{statistics.median(b / a for a, b in both if a > 0):.2f} ({len(both)} records)")
    if tc:
        print(f"tensor-core kernels under a resident NCCL kernel: median x{statistics.median(tc):.3f} "
              f"({min(tc):.3f}-{max(tc):.3f}, {len(tc)} records with > 1 ms of them)")
    if mem:
        print(f"other kernels under a resident NCCL kernel: median x{statistics.median(mem):.3f} "
              f"({min(mem):.3f}-{max(mem):.3f}, {len(mem)} records)")
    if sh:
        print(f"profiled kernels' growth over the timed step's growth: median {statistics.median(sh):.0%} "
              f"({min(sh):.0%}-{max(sh):.0%}, {len(sh)} records)")
    sm = sm_share_rows()
    if sm:
        print("\nmicrobenchmark (validation/measure/sm_share.py): compute beside a waiting NCCL all-reduce of 8 KiB "
              "(1 channel) / 32 MiB (24 channels), and beside busy 256 MiB ones")
        for r in sm:
            print(f"  {r['compute']:16s} {'x'.join(map(str, r['shape'])):16s} alone {r['alone_us']:8.1f} us  "
                  f"waiting x{r.get('waiting_8192', 0):.2f} / x{r.get('waiting_33554432', 0):.2f}  "
                  f"busy x{r.get('busy_268435456', 0):.2f}")
        tcw = [r["waiting_33554432"] for r in sm if r["tensor_core"] and "waiting_33554432" in r]
        if tcw:
            print(f"  tensor-core kernels beside 24 waiting channels: median x{statistics.median(tcw):.3f} "
                  f"({min(tcw):.2f}-{max(tcw):.2f}); the law x{f:.3f}")
    f, n_many, n_one, files = python_factor()
    if files:
        print(f"python probe pooled (ranks_python_factor): x{f:.3f} = median over {n_many} timed steps at 2-4 ranks / "
              f"median over {n_one} at 1 rank, {', '.join(os.path.basename(x) for x in files)}")
    if pys:
        print(f"python probe at 2-4 ranks over 1 rank: median x{statistics.median(pys):.2f} "
              f"({min(pys):.2f}-{max(pys):.2f}, {len(pys)} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
