"""The device's gap between consecutive kernels of a replayed CUDA graph (issue 34: the static compiled token).

A replayed graph's span on the GPU is its kernels' run times plus what the GPU spends between them. calibrate's
probe (a graph of 32 vs 1 tiny adds, ``cudagraph_kernel_us``) clamps at its floor, 0.05 µs, while a decoder's
replayed graph shows ~0.45 µs between kernels in the traces. This microbenchmark captures graphs of N kernels
and sets the replay's span against the same kernels' run times, varying what could make the gap:

- the kernel's kind: a tiny or a large in-place add, a skinny (M = 1) cuBLAS GEMM, a layer norm's reduction,
  Triton kernels of a ``torch.compile``d function (an RMS norm, a SiLU-and-multiply), and mixes of them;
- its duration (1-60 µs) and grid (the add's and the GEMM's sizes);
- one kernel repeated against distinct kernels alternating, the same multiset blocked against interleaved;
- the graph's size (32-2000 nodes).

For each graph (``micro``): ``eager_sum_us`` (the profiler's kernel sum of the same sequence run eagerly, the
median of 3 runs: what a kernel costs alone in the same cache state), ``span_busy_us`` (CUDA events around a
replay enqueued behind a ``torch.cuda._sleep`` long enough to cover the launch: the graph's span on the device,
no profiler), ``span_idle_us`` (the same with the GPU idle: the launch's latency included, as a token's replay
timed by events meets it), ``replay_wall_us`` (back-to-back replays) and, from two profiled replays, the graph's
own kernel sum and span and the gaps between consecutive kernels (median, mean, p10, p90).

``decoder``: a static-cache ``generate()`` compiled with CUDA graphs (transformers' own ``torch.compile``,
``mode="reduce-overhead"``) for a few-layer Llama of random weights (and, for diagnosis only, the zoo decoders
the scorer uses): each replay's span by CUDA events (GPU busy and idle before it, no profiler) against the
profiler's kernels of the same replay (correlated with its ``cudaGraphLaunch``). ``probe``: calibrate's
reduce-overhead probe and :func:`validation.measure.model_call_probe.model_call_probe` on the same host.

    python3 -m validation.measure.graph_gap micro --out FILE.jsonl [--quick]
    python3 -m validation.measure.graph_gap decoder --out FILE.jsonl [--models tiny2,tiny4] [--new 16]
    python3 -m validation.measure.graph_gap probe --out FILE.jsonl
    (--cpu: a dry run of the sequences and the records' logic on the CPU, no timing)
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time

import torch

CLOCK_GHZ = 1.98        # cycles a µs for torch.cuda._sleep (an H200 SM at its boost clock; the sleep need only cover)


def _stats(xs: list) -> dict:
    xs = sorted(xs)
    if not xs:
        return {}
    return {"median": round(statistics.median(xs), 4), "mean": round(statistics.mean(xs), 4),
            "p10": round(xs[int(0.1 * (len(xs) - 1))], 4), "p90": round(xs[int(0.9 * (len(xs) - 1))], 4),
            "max": round(xs[-1], 4), "n": len(xs)}


def menu(dev: str) -> dict:
    """Name -> a callable that launches one kernel (a skinny GEMM may add cuBLAS's split-K reduction).
    Inputs made once; in-place where the op allows, so that a graph of thousands holds little memory."""
    g = torch.Generator(device=dev).manual_seed(0)
    bf = torch.bfloat16

    def rnd(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=dev, dtype=dtype, generator=g)
    m: dict = {}
    for name, n in (("add_tiny", 1024), ("add_256k", 1 << 18), ("add_4m", 1 << 22), ("add_16m", 1 << 24),
                    ("add_32m", 1 << 25)):
        t = rnd(n)
        m[name] = (lambda t=t: t.add_(1.0))
    x1 = rnd(1, 2048, dtype=bf)
    for name, (k, n) in (("gemv_2k", (2048, 2048)), ("gemv_qkv", (2048, 3072)), ("gemv_8k", (2048, 8192)),
                         ("gemv_up", (2048, 16384)), ("gemv_big", (4096, 14336))):
        w = rnd(k, n, dtype=bf) / k ** 0.5
        x = x1 if k == 2048 else rnd(1, k, dtype=bf)
        m[name] = (lambda x=x, w=w: torch.mm(x, w))
    x8k = rnd(1, 8192, dtype=bf)
    wd = rnd(8192, 2048, dtype=bf) / 90.0
    m["gemv_down"] = lambda: torch.mm(x8k, wd)
    for name, shape in (("ln_small", (1, 2048)), ("ln_big", (64, 8192))):
        t = rnd(*shape, dtype=bf)
        m[name] = (lambda t=t: torch.nn.functional.layer_norm(t, (t.shape[-1],)))
    wn = rnd(2048, dtype=bf)

    def rms(x, w):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w

    def silu_mul(a, b):
        return torch.nn.functional.silu(a) * b
    if dev == "cuda":
        rms_c, silu_c = torch.compile(rms, dynamic=False), torch.compile(silu_mul, dynamic=False)
    else:
        rms_c, silu_c = rms, silu_mul
    a8, b8 = rnd(1, 8192, dtype=bf), rnd(1, 8192, dtype=bf)
    m["tri_rms"] = lambda: rms_c(x1, wn)
    m["tri_silu"] = lambda: silu_c(a8, b8)
    r2k = rnd(2048, dtype=bf)
    m["add_res"] = lambda: r2k.add_(1.0)
    # distinct kernels of one duration: unary ops of one size, each its own code (ew_<op>_<size>), and one
    # op's code over distinct tensors (neg_<i>_<size>); Triton kernels that differ only in a constant
    for size, tag in ((1 << 18, "256k"), (1 << 22, "4m")):
        xs, ys = rnd(size), torch.empty(size, device=dev)
        for op in UNARY:
            m[f"ew_{op}_{tag}"] = (lambda f=getattr(torch, op), xs=xs, ys=ys: f(xs, out=ys))
        for i in range(16):
            xi, yi = rnd(size), torch.empty(size, device=dev)
            m[f"neg_{i}_{tag}"] = (lambda xi=xi, yi=yi: torch.neg(xi, out=yi))
    xt = rnd(1 << 18)
    for i in range(8):
        fn = (lambda x, c=float(i + 2): x * c + 1.0)
        fc = torch.compile(fn, dynamic=False) if dev == "cuda" else fn
        m[f"tri_c{i}"] = (lambda fc=fc: fc(xt))
    return m


UNARY = ("neg", "abs", "sin", "cos", "exp", "sigmoid", "tanh", "sqrt", "log1p", "erf", "exp2", "floor", "ceil",
         "reciprocal", "expm1", "trunc")


#: a Llama layer's decode kernels at hidden 2048, in order (norm, QKV, the rotary-and-cache stand-in,
#: output projection, residual, norm, gate-and-up, SiLU-and-multiply, down, residual)
LAYER = ["tri_rms", "gemv_qkv", "add_tiny", "gemv_2k", "add_res", "tri_rms", "gemv_up", "tri_silu", "gemv_down",
         "add_res"]


def distinct_configs() -> list[tuple[str, list, int]]:
    """Does the gap grow with the number of distinct kernels a graph cycles through? ``k`` distinct codes
    (unary ops), one code over ``k`` tensors, ``k`` Triton kernels; 128 nodes; two sizes (~1 and ~8 µs)."""
    out = []
    for tag in ("256k", "4m"):
        for k in ((1, 2, 3, 4, 6, 8, 12, 16) if tag == "256k" else (1, 4, 16)):
            out.append((f"cycle ew k={k} {tag}", [f"ew_{op}_{tag}" for op in UNARY[:k]], 128))
        for k in ((2, 8, 16) if tag == "256k" else (16,)):
            out.append((f"cycle neg-tensors k={k} {tag}", [f"neg_{i}_{tag}" for i in range(k)], 128))
    out += [(f"cycle triton k={k}", [f"tri_c{i}" for i in range(k)], 128) for k in (1, 2, 8)]
    out += [("mix layer", LAYER, 160), ("repeat add_tiny", ["add_tiny"], 128)]    # the first run's, again
    return out


def configs(quick: bool = False) -> list[tuple[str, list, int]]:
    """(label, the names cycled, nodes)."""
    out = [("repeat add_tiny", ["add_tiny"], n) for n in ((32, 512) if quick else (32, 128, 512, 2000))]
    if quick:
        return out + [("mix layer", LAYER, 40), ("alternate add_tiny+gemv_2k", ["add_tiny", "gemv_2k"], 32)]
    for nm in ("add_256k", "add_4m", "add_16m", "add_32m", "gemv_2k", "gemv_8k", "gemv_big", "ln_small", "ln_big",
               "tri_rms", "tri_silu", "gemv_down"):
        out.append((f"repeat {nm}", [nm], 128))
    for pair in (("add_tiny", "gemv_2k"), ("tri_rms", "gemv_2k"), ("ln_small", "add_tiny"), ("tri_rms", "tri_silu"),
                 ("add_4m", "gemv_8k"), ("add_tiny", "add_4m")):
        out.append((f"alternate {'+'.join(pair)}", list(pair), 128))
    out.append(("blocked gemv_2k|tri_rms", ["gemv_2k"] * 64 + ["tri_rms"] * 64, 128))
    out += [("mix layer", LAYER, n) for n in (40, 160, 500, 2000)]
    return out


def _device_kernels(prof) -> list[tuple[float, float, str]]:
    """(start µs, duration µs, name) of the profiled device work, memcpy/memset other than device-to-device left out."""
    ks = []
    for e in prof.events():
        dt = getattr(e, "device_type", None)
        if dt is None or "CUDA" not in str(dt):
            continue
        if e.name.startswith(("Memcpy", "Memset")) and "DtoD" not in e.name:
            continue
        ks.append((float(e.time_range.start), float(e.time_range.elapsed_us()), e.name))
    return sorted(ks)


def _profiled(fn) -> list[tuple[float, float, str]]:
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return _device_kernels(prof)


def _gaps(ks) -> list[float]:
    return [b[0] - (a[0] + a[1]) for a, b in zip(ks, ks[1:])]


def _sleep_cycles(us: float) -> int:
    return int(us * CLOCK_GHZ * 1e3)


def event_spans(replay, nodes: int, reps: int = 20) -> dict:
    """CUDA events around ``reps`` replays: ``busy`` behind a sleep that covers the launch (the device's span),
    ``idle`` with the GPU drained first (the launch's latency in it)."""
    out = {}
    cover = max(200.0, 1.0 * nodes)       # µs of sleep: more than the host's launch of the graph
    for how in ("busy", "idle"):
        spans = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if how == "busy":
                torch.cuda._sleep(_sleep_cycles(cover))
            else:
                torch.cuda.synchronize()
            a.record()
            replay()
            b.record()
            b.synchronize()
            spans.append(a.elapsed_time(b) * 1e3)
        out[how] = _stats(spans)
    return out


def measure_graph(fns: list, dev: str = "cuda") -> dict:
    """One graph of ``fns`` (each launching its kernel): the records' figures (see the module's doc)."""
    def run():
        for f in fns:
            f()
    for _ in range(2):
        run()
    if dev != "cuda":
        return {"nodes": len(fns)}
    torch.cuda.synchronize()
    eager = [_profiled(run) for _ in range(3)]
    eager_sum = statistics.median(sum(k[1] for k in ks) for ks in eager)
    per_name: dict = {}
    for k in eager[-1]:
        per_name.setdefault(k[2][:200], []).append(k[1])
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()                       # warm on a side stream before capture, as torch's docs do
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        run()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    spans = event_spans(g.replay, len(fns))
    t0 = time.perf_counter()
    n_wall = 20
    for _ in range(n_wall):
        g.replay()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / n_wall * 1e6
    prof = [_profiled(g.replay) for _ in range(2)]
    gaps = [x for ks in prof for x in _gaps(ks)]
    row = {"gap_by_pair_us": pair_gaps(prof), "nodes": len(fns), "eager_kernels": statistics.mode(len(ks) for ks in eager),
           "eager_sum_us": round(eager_sum, 2),
           "kernel_us": {n: round(statistics.median(v), 3) for n, v in per_name.items()},
           "span_busy_us": spans["busy"], "span_idle_us": spans["idle"], "replay_wall_us": round(wall, 2),
           "graph_kernels": len(prof[-1]),
           "graph_prof_sum_us": round(statistics.median(sum(k[1] for k in ks) for ks in prof), 2),
           "graph_prof_span_us": round(statistics.median(ks[-1][0] + ks[-1][1] - ks[0][0] for ks in prof), 2),
           "graph_prof_gap_us": _stats(gaps)}
    n = row["eager_kernels"]
    if n > 1:
        row["gap_per_kernel_us"] = round((spans["busy"]["median"] - eager_sum) / (n - 1), 4)
    del g
    return row


def gap_probe(dev: str = "cuda", nodes: int = 160) -> dict:
    """calibrate's probe of the GPU's ``graph_kernel_gap_us``: a graph of a decoder layer's kernels (:data:`LAYER`,
    ``nodes`` of them; validation/fit/fit_graph_gap.py's model-like graphs), its record with ``gap_us``."""
    m = menu(dev)
    row = measure_graph([m[LAYER[i % len(LAYER)]] for i in range(nodes)], dev)
    return {**{k: v for k, v in row.items() if k not in ("kernel_us", "gap_by_pair_us")},
            "gap_us": row.get("gap_per_kernel_us")}


def gap_figure(raw: dict | None) -> dict:
    """``{"graph_kernel_gap_us": ...}`` from :func:`gap_probe`'s record (never below 0); {} without one."""
    if not raw or raw.get("gap_us") is None:
        return {}
    return {"graph_kernel_gap_us": float(max(0.0, raw["gap_us"]))}


def micro(out: str, quick: bool = False, dev: str = "cuda", which: str = "kinds") -> int:
    m = menu(dev)
    with open(out, "a") as f:
        f.write(json.dumps(environment(dev)) + "\n")
        for label, names, n in (distinct_configs() if which == "distinct" else configs(quick)):
            fns = [m[names[i % len(names)]] for i in range(n)]
            try:
                row = {"kind": "graph_gap", "config": label, "names": sorted(set(names)), "distinct": len(set(names)),
                       **measure_graph(fns, dev)}
            except Exception as e:  # noqa: BLE001 - record and go on
                row = {"kind": "graph_gap_error", "config": label, "nodes": n, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps({k: v for k, v in row.items() if k != "kernel_us"})[:400], flush=True)
            if dev == "cuda":
                torch.cuda.empty_cache()
    return 0


def environment(dev: str) -> dict:
    if dev != "cuda":
        return {"kind": "environment", "gpu": "cpu (dry run)", "torch": torch.__version__}
    from validation.measure.decode_run import environment as env
    return env()


# ---- the compiled decoder's replayed graph --------------------------------------------------------------------

def tiny_llama(layers: int, dev: str):
    import transformers
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=8192,
                                   num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                                   max_position_embeddings=1024, eos_token_id=2)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).to(dev, torch.bfloat16 if dev == "cuda" else torch.float32).eval()


class ReplayHook:
    """Wraps ``CUDAGraphNode.run_graph`` (the replay): while ``how`` is set, CUDA events around each replay,
    behind a sleep (``busy``) or not (``idle``)."""

    def __init__(self, nodes_hint: int = 500):
        from torch._inductor import cudagraph_trees as ct
        self.cls, self.orig = ct.CUDAGraphNode, ct.CUDAGraphNode.__dict__["run_graph"]
        self.how, self.events, self.cover = None, [], max(200.0, 1.0 * nodes_hint)
        me = self

        def run_graph(node):
            if me.how is None:
                return me.orig(node)
            if me.how == "busy":
                torch.cuda._sleep(_sleep_cycles(me.cover))
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            me.orig(node)
            b.record()
            me.events.append((a, b))
            return None
        self.cls.run_graph = run_graph

    def undo(self):
        self.cls.run_graph = self.orig


def trace_graph_kernels(path: str) -> list[list[tuple[float, float, str]]]:
    """Each ``cudaGraphLaunch`` of a Chrome trace: its device work (start, duration, name), in order."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    launches = sorted((e for e in ev if e.get("name") == "cudaGraphLaunch"), key=lambda e: e["ts"])
    dev = {}
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            dev.setdefault(e.get("args", {}).get("correlation"), []).append((float(e["ts"]), float(e["dur"]), e["name"]))
    return [sorted(dev[c]) for c in (la["args"]["correlation"] for la in launches) if c in dev]


def decoder_case(model, name: str, batch: int, prompt: int, new: int, dev: str = "cuda") -> dict:
    ids = torch.randint(3, model.config.vocab_size, (batch, prompt), device=dev)
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new, do_sample=False,
              pad_token_id=0, use_cache=True, cache_implementation="static")
    row = {"kind": "graph_gap_decoder", "model": name, "batch": batch, "prompt": prompt, "new": new}
    with torch.no_grad():
        for _ in range(3):
            model.generate(ids, **kw)
        if dev != "cuda":
            return row
        hook = ReplayHook()
        try:
            for how in ("busy", "idle"):
                hook.how, hook.events = how, []
                model.generate(ids, **kw)
                torch.cuda.synchronize()
                spans = [a.elapsed_time(b) * 1e3 for a, b in hook.events]
                row[f"span_{how}_us"] = _stats(spans[1:] or spans)
        finally:
            hook.how = None
            hook.undo()
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            model.generate(ids, **kw)
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "t.json")
            prof.export_chrome_trace(p)
            graphs = trace_graph_kernels(p)
    graphs = [ks for ks in graphs if ks]
    if graphs:
        sizes = statistics.mode(len(ks) for ks in graphs)
        same = [ks for ks in graphs if len(ks) == sizes][1:] or graphs[:1]
        gaps = [x for ks in same for x in _gaps(ks)]
        row.update(graph_kernels=sizes, replays_profiled=len(same),
                   graph_prof_sum_us=round(statistics.median(sum(k[1] for k in ks) for ks in same), 2),
                   graph_prof_span_us=round(statistics.median(ks[-1][0] + ks[-1][1] - ks[0][0] for ks in same), 2),
                   graph_prof_gap_us=_stats(gaps),
                   kernel_us={k[2][:80]: round(k[1], 3) for k in same[-1]} if sizes <= 40 else None)
        row["gap_by_pair_us"] = pair_gaps(same)
    return row


def pair_gaps(replays: list, top: int = 25) -> dict:
    """The gap after each kernel (median over replays of the same kernels), the median over the kernel's
    occurrences, keyed by the names before and after: the ``top`` most frequent pairs."""
    replays = [ks for ks in replays if len(ks) == len(replays[0])]
    pairs: dict = {}
    for i in range(len(replays[0]) - 1):
        g = statistics.median(ks[i + 1][0] - ks[i][0] - ks[i][1] for ks in replays)
        pairs.setdefault(f"{replays[0][i][2][:120]} -> {replays[0][i + 1][2][:120]}", []).append(g)
    return {k: round(statistics.median(v), 3) for k, v in sorted(pairs.items(), key=lambda kv: -len(kv[1]))[:top]}


def decoder(out: str, models: list[str], batch: int, prompt: int, new: int, dev: str = "cuda") -> int:
    with open(out, "a") as f:
        f.write(json.dumps(environment(dev)) + "\n")
        for name in models:
            try:
                if name.startswith("tiny"):
                    model = tiny_llama(int(name[4:]), dev)
                else:
                    from gpusim.models import zoo
                    model, _ = zoo.build(name, device=dev, dtype=torch.bfloat16)
                model.config.use_cache = True
                row = decoder_case(model, name, batch, prompt, new, dev)
            except Exception as e:  # noqa: BLE001 - record and go on
                row = {"kind": "graph_gap_decoder_error", "model": name, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            model = None
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps({k: v for k, v in row.items() if k not in ("kernel_us", "gap_by_pair_us")})[:600], flush=True)
            torch._dynamo.reset()
            if dev == "cuda":
                torch.cuda.empty_cache()
    return 0


def probe(out: str, dev: str = "cuda") -> int:
    """calibrate's reduce-overhead probe (host_bench's three compiled chains) and the tiny decoder's call."""
    from validation.measure import host_bench
    from validation.measure import timing as measure
    from validation.measure.model_call_probe import model_call_figure, model_call_probe
    row: dict = {"kind": "model_call_probe"}
    mats = [torch.randn(16, 16, device=dev) for _ in range(9)]
    ro = {}
    if dev == "cuda":
        for k, n_in in ((1, 1), (8, 1), (1, 16)):
            torch._dynamo.reset()
            ins = tuple(torch.randn(16, 16, device=dev) for _ in range(n_in))
            cf = torch.compile(host_bench.chain_inputs(k, mats), mode="reduce-overhead")
            ro[f"{k}x{n_in}"] = {"kernels": k, "inputs": n_in, "wall_us": measure.time_wall(cf, ins)["median_us"]}
        torch._dynamo.reset()
        row["reduce_overhead"] = ro
        row["cudagraph_launch"] = host_bench.graph_launch_host(dev)
        base1, i16 = ro["1x1"]["wall_us"], ro["1x16"]["wall_us"]
        fitted = {"cudagraph_tree_input_us": max(0.0, (i16 - base1) / 15)}
        fitted["cudagraph_tree_call_us"] = max(0.5, base1 - fitted["cudagraph_tree_input_us"])
        row["fitted"] = fitted
    rounds = []
    for _ in range(2 if dev == "cuda" else 1):
        t0 = time.perf_counter()
        p = model_call_probe(dev)
        rounds.append({**p, "seconds": round(time.perf_counter() - t0, 1)})
    row["probe_rounds"] = rounds
    if ro:
        row["compiled_model_call_us"] = [model_call_figure(p, row["fitted"]) for p in rounds]
    with open(out, "a") as f:
        f.write(json.dumps(environment(dev)) + "\n")
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row)[:1500], flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("micro", "decoder", "probe"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--set", default="kinds", choices=("kinds", "distinct"), help="micro: which graphs")
    ap.add_argument("--models", default="tiny2,tiny4")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--cpu", action="store_true", help="dry run on the CPU: sequences and records, no timing")
    a = ap.parse_args(argv)
    dev = "cpu" if a.cpu else "cuda"
    if a.what == "micro":
        return micro(a.out, a.quick, dev, a.set)
    if a.what == "decoder":
        return decoder(a.out, a.models.split(","), a.batch, a.prompt if dev == "cuda" else 8, a.new, dev)
    return probe(a.out, dev)


if __name__ == "__main__":
    sys.exit(main())
