"""PyTorch's MemTracker on the zoo records' cases, for comparison with gpusim.sim.memory.

``torch.distributed._tools.mem_tracker.MemTracker`` under ``FakeTensorMode`` is what a
user would reach for instead of gpusim to predict an eager peak without a GPU. For each
eager zoo record (``validation/results/<gpu>/zoo.jsonl.gz``) this builds the same model
(``gpusim.models.zoo.build``) with fake ``cuda`` tensors and runs one no-grad forward inside the
tracker; it records the tracker's peak above the pre-call total (weights, buffers and
inputs), or the one-line reason it failed, next to the measured peak and gpusim's.

Fake ``cuda`` modules: ``build(device="cuda")`` inside ``FakeTensorMode`` fails in
``Module.to`` ("_apply(): Couldn't swap Conv2d.weight": a fake parameter is always
swapped, and the fake mode's memo holds a weak reference to it). So the model is built
on ``meta`` (real meta tensors, dtype and memory format applied) and each parameter,
buffer and input is then replaced by a fake ``cuda`` tensor of the same shape, dtype and
strides. This needs no GPU: it runs on a CPU-only machine with a CUDA build of torch.

MemTracker's result does not depend on the GPU, so each distinct case runs once and is
written into every GPU's file with that GPU's measurement::

    python -m validation.score.memtracker_run --gpus h100,h200 \\
        [--out-dir validation/results] [--cases 'tv:*'] [--no-gpusim]
    python -m validation.score.memtracker_run --refresh-gpusim   # gpusim column only

(``--records holdout``: the held-out models' records, into ``memtracker_holdout.json``)
writes ``<out-dir>/<gpu>/memtracker.json``: ``{"env": .., "cases": [row, ..]}`` with per
row ``case``, ``family``, ``measured``, ``memtracker`` (bytes) or ``memtracker_error``,
``sdpa_calls``; for models that call attention also ``memtracker_fused_sdpa`` (or its
``_error``: :class:`FusedSDPA`); ``gpusim`` (gpusim's peak at ``env.gpusim_commit``; the
tests recompute it) and the seconds each run took.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import platform
import subprocess
import time
from validation.measure.fake_cuda import _cuda_total, fake_cuda


class FusedSDPA:
    """Context: ``F.scaled_dot_product_attention`` on fake cuda tensors runs a fused
    kernel's meta function (``_scaled_dot_product_efficient_attention``: the output, no
    score matrix), as on a GPU. Without it a CPU-only host has no device to ask, so ATen's
    backend choice falls back to the math path, which materialises the attention scores
    (batch x heads x L x S) that no fused kernel on an H100 allocates. A boolean mask
    becomes an additive bias first and GQA's K/V are repeated, as ATen does. ``calls``
    counts the attention calls it rerouted."""

    def __init__(self):
        self.calls = 0
        self._saved = None

    def __enter__(self):
        import torch
        import torch.nn.functional as F
        self._saved = F.scaled_dot_product_attention

        def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                 enable_gqa=False):
            self.calls += 1
            if enable_gqa and k.size(-3) != q.size(-3):
                rep = q.size(-3) // k.size(-3)
                k, v = k.repeat_interleave(rep, -3), v.repeat_interleave(rep, -3)
            if attn_mask is not None and attn_mask.dtype == torch.bool:
                attn_mask = torch.where(attn_mask.logical_not(),
                                        torch.tensor(float("-inf"), dtype=q.dtype, device=q.device),
                                        torch.tensor(0.0, dtype=q.dtype, device=q.device))
            if attn_mask is not None:
                attn_mask = attn_mask.expand(q.size(0), q.size(1), q.size(-2), k.size(-2))
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                q, k, v, attn_mask, False, dropout_p, is_causal, scale=scale)[0]
        F.scaled_dot_product_attention = sdpa
        return self

    def __exit__(self, *exc):
        import torch.nn.functional as F
        F.scaled_dot_product_attention = self._saved
        return False


def run_one(rec: dict, fused_sdpa: bool = False) -> dict:
    """MemTracker's activation peak of one eager no-grad call of ``rec``'s case:
    ``{"memtracker": bytes above the pre-call total, "sdpa_calls": n}``; raises what
    MemTracker raises. ``fused_sdpa``: attention runs a fused kernel's meta function
    (:class:`FusedSDPA`) instead of the CPU-only host's math fallback."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    from gpusim.models import zoo
    from gpusim.models.resolve import parse_dtype
    fn, args = zoo.build(rec["model"], device="meta", dtype=parse_dtype(rec["dtype"]),
                         channels_last=bool(rec.get("channels_last")), **rec["sizes"])
    fake_mode = FakeTensorMode()
    fn, args = fake_cuda(fn, args, fake_mode)
    counter = FusedSDPA()
    with fake_mode, (counter if fused_sdpa else _count_sdpa(counter)):
        mt = MemTracker()
        mt.track_external(fn, *[a for a in args if isinstance(a, torch.Tensor)])
        with torch.no_grad(), mt:
            before = _cuda_total(mt.get_tracker_snapshot("current"))
            out = fn(*args)
            peak = _cuda_total(mt.get_tracker_snapshot("peak"))
        del out
    return {"memtracker": int(peak - before), "sdpa_calls": counter.calls}


@contextlib.contextmanager
def _count_sdpa(counter):
    """Count ``F.scaled_dot_product_attention`` calls without changing what they run."""
    import torch.nn.functional as F
    orig = F.scaled_dot_product_attention

    def sdpa(*a, **k):
        counter.calls += 1
        return orig(*a, **k)
    F.scaled_dot_product_attention = sdpa
    try:
        yield counter
    finally:
        F.scaled_dot_product_attention = orig


def environment() -> dict:
    import torch
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip() or None
    except OSError:
        commit = None
    return {"torch": torch.__version__, "python": platform.python_version(),
            "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs, "
                       f"no GPU (FakeTensorMode, fake cuda tensors)"
                       if not torch.cuda.is_available() else torch.cuda.get_device_name(),
            "gpusim_commit": commit, "utc": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())}


def _attempt(rec: dict, fused_sdpa: bool, key: str, timeout_s: int) -> dict:
    """One MemTracker run: ``{key: bytes, "sdpa_calls": n}`` or ``{key + "_error":
    "<Type>: <first line>"}``, and ``key + "_seconds"``."""
    from validation.measure.zoo_run import time_limit
    t0 = time.time()
    try:
        with time_limit(timeout_s):
            r = run_one(rec, fused_sdpa)
        row = {key: r["memtracker"]}
        if not fused_sdpa:
            row["sdpa_calls"] = r["sdpa_calls"]
    except Exception as e:  # noqa: BLE001 - record why MemTracker failed
        msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        row = {key + "_error": f"{type(e).__name__}: {msg}"}
    row[key + "_seconds"] = round(time.time() - t0, 2)
    return row


def _records(results: str, gpu: str, sub: str) -> list[dict]:
    """Measured, non-failed records of ``<results>/<gpu>/<sub>.jsonl.gz`` with a memory peak."""
    from validation.records.store import load_zoo_records
    return [r for r in load_zoo_records(results, gpu, sub)
            if (r.get("memory") or {}).get("peak_allocated_above_pre_call") is not None]


def _key(rec: dict) -> tuple:
    return (rec["model"], tuple(sorted(rec["sizes"].items())), rec["dtype"],
            bool(rec.get("channels_last")))


def gpusim_peaks(recs: list[dict], gpu: str) -> dict:
    """``{case id: gpusim's eager peak}`` for eager records of ``gpu``."""
    from gpusim.hw.spec import calibrated_name, load_spec
    from validation.score.zoo_accuracy import memory_rows
    name = calibrated_name(gpu)
    return {r["case"]: r["pred_peak"] for r in memory_rows(recs, load_spec(name) if name else None)}


def refresh_gpusim(out_dir: str, results: str, gpu: str) -> None:
    """Rewrite the ``gpusim`` column of ``<out_dir>/<gpu>/memtracker.json`` with the
    current model (MemTracker's figures unchanged)."""
    from validation.records.store import load_zoo_records
    p = os.path.join(out_dir, gpu, "memtracker.json")
    with open(p) as f:
        doc = json.load(f)
    ids = {c["case"] for c in doc["cases"]}
    ours = gpusim_peaks([r for r in load_zoo_records(results, gpu) if r["case_id"] in ids
                         and r["run"] == "eager"], gpu)
    for c in doc["cases"]:
        if c["case"] in ours:
            c["gpusim"] = ours[c["case"]]
    doc["env"]["gpusim_commit_of_gpusim_column"] = environment()["gpusim_commit"]
    with open(p, "w") as f:
        json.dump(doc, f, indent=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="h100,h200")
    ap.add_argument("--results", default="validation/results")
    ap.add_argument("--out-dir", default="validation/results")
    ap.add_argument("--cases", default="*", help="fnmatch pattern(s) on the model name, comma-separated")
    ap.add_argument("--records", default="zoo",
                    help="records folder under <results>/<gpu>/: zoo, or holdout (writes "
                         "memtracker_holdout.json)")
    ap.add_argument("--timeout-s", type=int, default=600, help="per case and variant")
    ap.add_argument("--no-gpusim", action="store_true", help="leave gpusim's figure out")
    ap.add_argument("--refresh-gpusim", action="store_true",
                    help="only recompute the gpusim column of existing files")
    a = ap.parse_args(argv)
    if a.refresh_gpusim:
        for gpu in a.gpus.split(","):
            refresh_gpusim(a.out_dir, a.results, gpu)
        return 0
    pats = a.cases.split(",")
    recs = {g: [r for r in _records(a.results, g, a.records) if r["run"] == "eager"
                and any(fnmatch.fnmatch(r["model"], p) for p in pats)]
            for g in a.gpus.split(",")}
    tracked: dict[tuple, dict] = {}
    for rec in [r for rs in recs.values() for r in rs]:
        k = _key(rec)
        if k in tracked:
            continue
        row = _attempt(rec, False, "memtracker", a.timeout_s)
        if row.get("sdpa_calls", 1):     # attention (or unknown): also with fused SDPA
            row.update(_attempt(rec, True, "memtracker_fused_sdpa", a.timeout_s))
        tracked[k] = row
        print(rec["case_id"], json.dumps(row), flush=True)
    env = environment()
    for gpu, rs in recs.items():
        ours = {} if a.no_gpusim else gpusim_peaks(rs, gpu)
        rows = []
        for rec in rs:
            row = {"case": rec["case_id"], "model": rec["model"], "family": rec["family"],
                   "measured": rec["memory"]["peak_allocated_above_pre_call"]}
            if rec["case_id"] in ours:
                row["gpusim"] = ours[rec["case_id"]]
            row.update(tracked[_key(rec)])
            rows.append(row)
        os.makedirs(os.path.join(a.out_dir, gpu), exist_ok=True)
        name = "memtracker.json" if a.records == "zoo" else f"memtracker_{a.records}.json"
        with open(os.path.join(a.out_dir, gpu, name), "w") as f:
            json.dump({"env": env, "tool": "torch.distributed._tools.mem_tracker.MemTracker "
                       "under FakeTensorMode, fake cuda tensors, one no-grad eager call; "
                       "peak Total minus Total before the call", "cases": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
