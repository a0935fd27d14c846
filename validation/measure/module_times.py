"""Measured device time per ``nn.Module`` (eager), to score ``gpusim predict --by module``.

On a CUDA machine, every module call runs inside a profiler range named after its path
(global forward pre/post hooks, the same paths :class:`gpusim.capture.scopes.ModuleScopes` gives
capture's nodes); each kernel counts in the innermost module whose range launched it.
Per model: the median over ``--reps`` profiled calls (L2 flushed before each) of each
module's kernel time, appended as one row to ``--out`` (:mod:`validation.records.store`).

    # on the GPU machine (torch 2.11, timm, transformers; writes gzip JSON Lines)
    PYTHONPATH=$PWD python3 -m validation.measure.module_times --out $OUT/modules.jsonl.gz
    # anywhere: predicted against measured rows, per module cut at --depth
    python3 -m validation.measure.module_times --compare validation/results/h100/modules.jsonl.gz --depth 2
"""

from __future__ import annotations

import argparse
import statistics
import sys

#: (model, dtype, sizes): a CNN, a timm CNN with squeeze-excite, a ViT and an encoder
CASES = [("tv:resnet18", "float32", {"batch": 32}), ("timm:seresnet18", "float16", {"batch": 32}),
         ("tv:vit_b_16", "bfloat16", {"batch": 8}), ("hf:bert-base", "bfloat16",
                                                      {"batch": 8, "seq": 512})]
RANGE = "gpusim:mod:"


def _module_ranges(root):
    """Hooks that open a profiler range per module call; returns the handles to remove."""
    import torch
    names = {}
    for n, m in root.named_modules(remove_duplicate=False):
        names.setdefault(id(m), n)
    stack = []

    def pre(mod, inputs):
        stack.append(torch.ops.profiler._record_function_enter_new(
            RANGE + names.get(id(mod), type(mod).__name__), None))

    def post(mod, inputs, output):
        if stack:
            torch.ops.profiler._record_function_exit._RecordFunction(stack.pop())
    hooks = torch.nn.modules.module
    return [hooks.register_module_forward_pre_hook(pre), hooks.register_module_forward_hook(post)]


def _innermost(e) -> str:
    while e is not None:
        if e.name.startswith(RANGE):
            return e.name[len(RANGE):]
        e = e.cpu_parent
    return ""


def measure_case(model: str, dtype: str, sizes: dict, reps: int = 5) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from gpusim.models import zoo
    from validation.measure import timing as measure
    m, args = zoo.build(model, device="cuda", dtype=dtype, **sizes)
    fl = measure.flusher()
    per_call = []
    with torch.no_grad():
        for _ in range(3):
            m(*args)
        torch.cuda.synchronize()
        handles = _module_ranges(m)
        try:
            for _ in range(reps):
                fl.flush()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    m(*args)
                    torch.cuda.synchronize()
                mods: dict[str, list] = {}
                for e in prof.events():
                    for k in e.kernels:
                        r = mods.setdefault(_innermost(e), [0.0, 0])
                        r[0] += k.duration
                        r[1] += 1
                per_call.append(mods)
        finally:
            for h in handles:
                h.remove()
    paths = sorted({p for c in per_call for p in c})
    modules = {p: {"us": statistics.median(c.get(p, [0.0])[0] for c in per_call),
                   "kernels": statistics.mode(c.get(p, [0, 0])[1] for c in per_call)}
               for p in paths}
    return {"case": f"{model}|{dtype}|" + ",".join(f"{k}={v}" for k, v in sizes.items()),
            "model": model, "dtype": dtype, "sizes": sizes, "reps": reps, "modules": modules,
            "kernel_sum_us": round(sum(r["us"] for r in modules.values()), 3),
            "env": measure.env_info()}


def compare(path: str, depth: int, gpu: str = "h100") -> str:
    """Measured against predicted time per module cut at ``depth`` (eager)."""
    from gpusim.util.fmt import table
    from gpusim.models.resolve import model_graph
    from gpusim.report.rollup import ROOT, cut, rollup
    from gpusim.predict.pipeline import predict
    from validation.records.store import read_records
    out = []
    for r in read_records(path):
        p = predict(model_graph(r["model"], r["dtype"], r["sizes"]), gpu=gpu, mode="eager")
        pred = {row.path: row.us for row in rollup(p, depth)}
        meas: dict[str, float] = {}
        for path_, v in r["modules"].items():
            k = cut(path_, depth)
            meas[k] = meas.get(k, 0.0) + v["us"]
        rows = [[k or ROOT, f"{meas.get(k, 0):.1f}", f"{pred.get(k, 0):.1f}",
                 f"{(pred.get(k, 0) / meas[k] - 1) * 100:+.0f}%" if meas.get(k) else "-"]
                for k in list(dict.fromkeys(list(meas) + list(pred)))]
        out += [f"{r['case']} on {r['env']['gpu_name']}: measured {r['kernel_sum_us']:.0f} us, "
                f"predicted {sum(pred.values()):.0f} us of kernels",
                table(rows, ["module", "measured us", "predicted us", "error"]), ""]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="records file to append to (CUDA)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--compare", metavar="RECORDS", help="score predictions on these records")
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--gpu", default="h100")
    a = ap.parse_args(argv)
    if a.compare:
        print(compare(a.compare, a.depth, a.gpu))
        return 0
    if not a.out:
        ap.error("give --out (measure, CUDA) or --compare RECORDS")
    from validation.measure import timing as measure
    from validation.records.store import append_record
    measure.require_cuda()
    for model, dtype, sizes in CASES:
        row = measure_case(model, dtype, sizes, a.reps)
        append_record(a.out, row)
        print(f"{row['case']}: {len(row['modules'])} modules, {row['kernel_sum_us']:.0f} us",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
