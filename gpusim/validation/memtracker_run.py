"""PyTorch's MemTracker on the zoo records' cases, for comparison with gpusim.memory.

For each zoo record (``validation/results/<gpu>/zoo/*.json``, eager runs), builds the same
model under ``FakeTensorMode`` on ``cuda`` and runs one no-grad forward inside
``torch.distributed._tools.mem_tracker.MemTracker``; writes the tracker's peak above the
pre-call total (weights and inputs), next to the measured and gpusim's figures, as JSON.
Failures are recorded with their one-line reason (MemTracker fails on some models).

    python -m gpusim.validation.memtracker_run --gpu h100 --out memtracker_h100.json
"""

from __future__ import annotations

import argparse
import json
import time


def run_one(rec: dict) -> dict:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    from .. import zoo
    from ..models import parse_dtype
    dev = torch.device("cuda")
    with FakeTensorMode(allow_non_fake_inputs=True):
        fn, args = zoo.build(rec["model"], device="cuda", dtype=parse_dtype(rec["dtype"]),
                             channels_last=bool(rec.get("channels_last")), **rec["sizes"])
        mt = MemTracker()
        if isinstance(fn, torch.nn.Module):
            mt.track_external(fn)
        with torch.no_grad(), mt:
            before = mt.get_tracker_snapshot("current").get(dev, {}).get("Total", 0)
            mt.reset_mod_stats()
            out = fn(*args)
            peak = mt.get_tracker_snapshot("peak").get(dev, {}).get("Total", 0)
        del out
    return {"memtracker_peak_above_pre_call": int(peak - before)}


def main(argv=None) -> int:
    from .zoo_accuracy import load_zoo_records, memory_rows
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--results", default="validation/results")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    recs = [r for r in load_zoo_records(a.results, a.gpu) if r["run"] == "eager"]
    ours = {r["case"]: r for r in memory_rows(recs)}
    out = []
    for rec in recs:
        row = {"case": rec["case_id"], "family": rec["family"],
               "measured": rec["memory"]["peak_allocated_above_pre_call"],
               "gpusim": ours.get(rec["case_id"], {}).get("pred_peak")}
        t0 = time.time()
        try:
            row.update(run_one(rec))
        except Exception as e:  # noqa: BLE001 - record why MemTracker failed
            row["memtracker_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        row["seconds"] = round(time.time() - t0, 2)
        out.append(row)
        print(json.dumps(row), flush=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
