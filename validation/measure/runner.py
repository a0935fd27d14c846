"""``gpusim validate``: measure the built-in cases on the CUDA GPU at hand.

For every case (example x size preset x dtype) it captures the graph exactly as gpusim
predicts it, then measures on the GPU:

* **eager**: per-kernel device times (profiler, L2 flushed before each call), device
  time per call (CUDA events, L2 flushed), steady-state wall time per call, kernels;
* **compiled**: the same for ``torch.compile(fn)``;
* **partitions**: chosen fusion partitions executed for real: the captured FX graph is
  split into one sub-module per group (``torch.fx.passes.split_module``), each compiled
  on its own, so every group is its own compiled region; the profiler counts how many
  kernels each group actually became.

Each case is appended as one row to ``<out>/classic.jsonl.gz`` (:mod:`validation.records.store`)
as soon as it is done, so a run that is cut off keeps what it measured; a failing case (OOM, compile error) is recorded
with its error and the run goes on. Measured numbers are only ever written here.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
import traceback

import torch
import torch.utils._pytree as pytree
from torch.fx.passes.split_module import split_module

from gpusim.util.atomic import atomic_write
from gpusim.capture.tracing import capture_full
from gpusim.util.errors import UserError
from gpusim.models.examples import EXAMPLES, build_example
from gpusim.hw.spec import load_spec
from gpusim.util.progress import progress
from gpusim.fusion.scoring import Scorer
from gpusim.fusion.search import greedy, search
from validation.measure import timing as measure
from validation.records.store import append_record, read_records

PARTITION_ALGOS = ("greedy", "bytes", "exact")


def _atomic_json(path: str, doc) -> None:
    atomic_write(path, json.dumps(doc, indent=1, default=str))


def plan_cases(names=None, quick=False):
    """(example, preset, dtype) triples to run, smallest first."""
    cases = []
    for name, ex in EXAMPLES.items():
        if names and name not in names:
            continue
        presets = list(ex.presets)
        for preset in presets:
            dts = list(ex.dtypes)
            if quick or (ex.category == "model" and preset != presets[-1]):
                dts = dts[:1]
            elif preset != presets[-1] and ex.category == "classic":
                # half precision matters where bytes or tensor cores dominate: the large preset
                dts = dts[:1]
            for dt in dts:
                cases.append((name, preset, dt))
    return cases


def flat_runner(gm):
    """A copy of the traced GraphModule that takes and returns flat lists of tensors."""
    g2 = copy.deepcopy(gm)
    g2.graph._codegen = torch.fx.graph.CodeGen()
    g2.recompile()
    return g2


def split_by_groups(cap, groups):
    """Split the captured graph into one sub-module per group; views and getitems follow
    their producer, views of inputs their first consumer. Returns the split module."""
    graph = cap.graph
    fx_of = {n: graph.node(n).get("fx_name", n) for n in graph.g.nodes}
    gid = {}
    for i, grp in enumerate(groups):
        for n in grp:
            gid[fx_of[n]] = i
    flat = flat_runner(cap.gm)
    nodes = list(flat.graph.nodes)
    # producers first: views/getitems join their source's group
    for n in nodes:
        if n.op != "call_function" or n.name in gid:
            continue
        srcs = [a for a in n.all_input_nodes if a.name in gid]
        if srcs:
            gid[n.name] = gid[srcs[0].name]
    # views of graph inputs (weight.t()) join their first consumer's group
    for n in reversed(nodes):
        if n.op == "call_function" and n.name not in gid:
            users = [u for u in n.users if u.name in gid]
            gid[n.name] = gid[users[0].name] if users else 0
    # partitions in dependency order (a legal partition can put a group first in capture
    # order that reads a later one, e.g. matmul+add reading a second matmul)
    split = split_module(flat, None, lambda node: gid[node.name], keep_original_order=False)
    return split


def partitioned_callable(cap, groups, compile_groups=True):
    split = split_by_groups(cap, groups)
    subs = [name for name, _ in split.named_children() if name.startswith("submod_")]
    for name in subs:
        mod = getattr(split, name)
        wrapped = _ranged(torch.compile(mod) if compile_groups else mod, name)
        setattr(split, name, wrapped)
    return split, subs


def _ranged(mod, name):
    """Wrap a sub-module so each call runs inside a profiler range named after it."""

    class Ranged(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = mod

        def forward(self, *a, **k):
            with torch.profiler.record_function(f"gpusim:{name}"):
                return self.inner(*a, **k)
    return Ranged()


def _kernels_per_range(prof, prefix="gpusim:"):
    """Kernel count and device µs under each ``gpusim:`` profiler range (one call)."""
    out = {}

    def walk(e):
        n = len(getattr(e, "kernels", []) or [])
        t = sum(k.duration for k in (getattr(e, "kernels", []) or []))
        for c in e.cpu_children:
            cn, ct = walk(c)
            n += cn
            t += ct
        return n, t
    for e in prof.events():
        if e.name.startswith(prefix) and e.cpu_parent is None or (
                e.name.startswith(prefix) and not e.cpu_parent.name.startswith(prefix)):
            n, t = walk(e)
            rec = out.setdefault(e.name[len(prefix):], [])
            rec.append({"kernels": n, "us": t})
    return out


def measure_callable(fn, args, label):
    rec = {"label": label}
    rec["device"] = measure.time_device(fn, args, flush=True)
    rec["device_warm"] = measure.time_device(fn, args, flush=False)
    rec["wall"] = measure.time_wall(fn, args)
    rec["profile"] = measure.profile_kernels(fn, args, flush=True)
    return rec


def run_case(name, preset, dtype_name, spec_name="h100"):
    dt = getattr(torch, dtype_name)
    sizes = dict(EXAMPLES[name].presets[preset])
    torch.manual_seed(0)
    fn, args = build_example(name, device="cuda", dtype=dt, **sizes)
    cap = capture_full(fn, args, name=name)
    rec = {"case": f"{name}/{preset}/{dtype_name}", "example": name, "preset": preset,
           "dtype": dtype_name, "sizes": sizes, "graph": cap.graph.to_dict(),
           "capture_s": cap.seconds, "runs": {}, "partitions": [], "errors": {}}
    full_args = _full_args(fn, args)

    def guarded(key, thunk):
        try:
            return thunk()
        except Exception as e:  # noqa: BLE001 - record and go on
            rec["errors"][key] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            torch.cuda.empty_cache()
            return None

    with torch.no_grad():
        r = guarded("eager", lambda: measure_callable(fn, args, "eager"))
        if r:
            rec["runs"]["eager"] = r
        torch._dynamo.reset()
        cfn = torch.compile(fn)
        r = guarded("compiled", lambda: measure_callable(cfn, args, "compiled"))
        if r:
            rec["runs"]["compiled"] = r
        if EXAMPLES[name].category == "classic":
            seen = set()
            parts = []
            for algo in PARTITION_ALGOS:
                res = guarded(f"search:{algo}", lambda: search(cap.graph, gpu=spec_name,
                                                               mode="compiled", algo=algo,
                                                               fold_bn=False))
                if res is None:
                    continue
                key = res.partition.canonical()
                if key in seen:
                    continue
                seen.add(key)
                parts.append((algo, [list(g) for g in res.partition.groups]))
            single = [[n] for n in cap.graph.compute_nodes]
            if frozenset(frozenset(g) for g in single) not in seen:
                parts.append(("singletons", single))
                seen.add(frozenset(frozenset(g) for g in single))
            # random legal partitions widen the spread for the rank correlation
            sc = Scorer(cap.graph, load_spec(spec_name), "compiled")
            for seed in range(12):
                if len(parts) >= 6:
                    break
                p = greedy(cap.graph, sc, "random", seed=seed)
                if p.canonical() not in seen:
                    seen.add(p.canonical())
                    parts.append((f"random{seed}", [list(g) for g in p.groups]))
            for algo, groups in parts:
                def run_part(groups=groups, algo=algo):
                    torch._dynamo.reset()
                    split, subs = partitioned_callable(cap, groups)
                    flat_in = _flat_inputs(full_args)
                    m = measure_callable(lambda *a: split(*a), flat_in, f"partition:{algo}")
                    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
                        split(*flat_in)
                        torch.cuda.synchronize()
                    m["per_group"] = _kernels_per_range(prof)
                    m["submodules"] = subs
                    return m
                r = guarded(f"partition:{algo}", run_part)
                if r:
                    rec["partitions"].append({"algo": algo, "groups": groups, **r})
    del fn, args, full_args
    torch.cuda.empty_cache()
    return rec


def _full_args(fn, args):
    if isinstance(fn, torch.nn.Module):
        params = dict(fn.named_parameters(remove_duplicate=False))
        buffers = dict(fn.named_buffers(remove_duplicate=False))
        return (params, buffers, *args)
    return tuple(args)


def _flat_inputs(full_args):
    return [x for x in pytree.tree_leaves(full_args)]


def main(a) -> int:
    try:
        os.makedirs(a.out, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot make the results folder {a.out}: {e.strerror or e}") from None
    try:
        measure.require_cuda()
    except RuntimeError as e:
        raise UserError(str(e)) from None
    names = set(a.cases.split(",")) if a.cases else None
    cases = plan_cases(names, a.quick)
    env = measure.env_info()
    _atomic_json(os.path.join(a.out, "env.json"), env)
    deadline = time.time() + float(os.environ.get("GPUSIM_VALIDATE_SECONDS", "1e9"))
    out = os.path.join(a.out, "classic.jsonl.gz")
    measured = {r.get("case") for r in read_records(out)}
    done = 0
    for i, (name, preset, dt) in enumerate(progress(cases, "validating")):
        if f"{name}/{preset}/{dt}" in measured:
            done += 1
            continue
        if time.time() > deadline:
            print(f"time budget reached after {done}/{len(cases)} cases", file=sys.stderr)
            break
        t0 = time.time()
        try:
            rec = run_case(name, preset, dt)
        except Exception as e:  # noqa: BLE001 - a case that cannot even be built
            rec = {"case": f"{name}/{preset}/{dt}", "example": name, "preset": preset,
                   "dtype": dt, "failed": f"{type(e).__name__}: {e}"[:500],
                   "traceback": traceback.format_exc()[-2000:]}
        rec["seconds"] = time.time() - t0
        rec["env"] = {k: env.get(k) for k in ("gpu", "gpu_name", "torch", "cuda")}
        append_record(out, rec)
        done += 1
        msg = f"[{done}/{len(cases)}] {name}/{preset}/{dt} {rec['seconds']:.1f}s" + (
            " FAILED" if rec.get("failed") or rec.get("errors") else "")
        print(msg, file=sys.stderr, flush=True)
    return 0
