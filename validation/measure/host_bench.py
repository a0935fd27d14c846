"""The host half of ``gpusim calibrate``'s measurements: what this machine's CPU, driver
and PyTorch build cost per eager op, view, module call, sync, compiled call and graph
replay (tight loops on tiny tensors, so the GPU never limits them), the probe the host
breakdown runs beside each case, and the Python law scaled to this host. Lab code: it
needs a CUDA GPU; the fits live in :mod:`validation.fit.calibrate`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gpusim.capture.tracing import capture_full
from gpusim.hw.host import load_host
from validation.measure import timing as measure
from validation.measure.reference_forwards import (compiled_reference_walls, fastest_walls, median_walls,
                                                  reference_walls)
from validation.measure.runner import partitioned_callable


def host_microbenchmarks() -> dict:
    """Host-side costs on this machine (CPU, driver, PyTorch build): eager dispatch per op
    by kind, views, module calls, syncs, compiled calls and inputs, separately compiled
    regions, CUDA graph replays (manual and ``mode="reduce-overhead"``). Wall clocks of
    back-to-back calls on tiny tensors, so the GPU never limits them."""
    measure.require_cuda()
    dev = "cuda"
    h: dict = {"machine": measure.host_info()}
    tiny = torch.randn(1, device=dev)

    def eager_ops(k):
        return add_chain(tiny, k)

    def views(k):
        def f():
            y = tiny
            for _ in range(k):
                y = y.view(-1)
            return y
        return f
    # library ops (GEMM, norm, conv, attention) go through more dispatch layers than an add
    xs = torch.randn(4, 64, device=dev)
    wl = torch.randn(64, 64, device=dev)
    im = torch.randn(1, 8, 8, 8, device=dev)
    wc = torch.randn(8, 8, 3, 3, device=dev)
    q = torch.randn(1, 2, 8, 32, device=dev)
    lib = {"linear": lambda: F.linear(xs, wl), "layer_norm": lambda: F.layer_norm(xs, (64,)),
           "conv2d": lambda: F.conv2d(im, wc, padding=1),
           "sdpa": lambda: F.scaled_dot_product_attention(q, q, q)}

    def loop(f, k):
        def g():
            for _ in range(k):
                f()
        return g
    rounds = [reference_walls()]     # the reference forwards, timed thrice over the run
    h["library_ops"] = {
        name: (measure.time_wall(loop(f, 50))["median_us"] - measure.time_wall(loop(f, 1))["median_us"]) / 49
        for name, f in lib.items()}
    h["module_calls"] = module_call_walls(tiny)
    # a compiled call's cost per tensor input (guards, input handling): one reduction
    # over k inputs, compiled, for k = 1 and 64
    per_in = {}
    for k in (1, 64):
        torch._dynamo.reset()
        ins = [torch.randn(16, device=dev) for _ in range(k)]
        cf = torch.compile(lambda *xs: torch.stack(xs).sum())
        per_in[k] = {"wall_us": measure.time_wall(cf, tuple(ins))["median_us"],
                     "kernels": len(measure.profile_kernels(cf, tuple(ins), flush=False, reps=2)["kernels"])}
    h["compiled_inputs"] = per_in
    # one launch runtime call: what a library op pays per helper kernel it launches inside
    # its own dispatch (cuDNN's layout transforms, a GEMM's bias or split-K reduction)
    h["launch_api_us"] = measure.launch_api_us(eager_ops(50))
    h["eager_100_ops_us"] = measure.time_wall(eager_ops(100))["median_us"]
    h["eager_1_op_us"] = measure.time_wall(eager_ops(1))["median_us"]
    h["views_100_us"] = measure.time_wall(views(100))["median_us"]
    h["views_1_us"] = measure.time_wall(views(1))["median_us"]
    mats = [torch.randn(16, 16, device=dev) for _ in range(9)]

    def chain(k):
        # each step is an extern matmul and a Triton relu: 2k kernels
        def f(x):
            for i in range(k):
                x = torch.relu(x @ mats[i])
            return x
        return f
    comp = {}
    for k in (1, 8):
        torch._dynamo.reset()
        cf = torch.compile(chain(k))
        x = torch.randn(16, 16, device=dev)
        comp[k] = {"wall_us": measure.time_wall(cf, (x,))["median_us"],
                   "kernels": len(measure.profile_kernels(cf, (x,), flush=False, reps=2)["kernels"])}
    h["compiled"] = comp
    h["compiled_split"] = compiled_launch_split(dev)
    h["compiled_library"] = compiled_library_split(dev)
    rounds.append(reference_walls())
    # each group of a partition run as its own compiled region (the validation harness)
    regions = {}
    for k in (1, 6):
        chain_fn = lambda x: torch.relu(x + 1) * 2 + torch.sin(x) - x.abs() / 3 + torch.cos(x)  # noqa: E731
        xx = torch.randn(1024, device=dev)
        cap = capture_full(chain_fn, (xx,))
        nodes = cap.graph.compute_nodes
        groups = [nodes] if k == 1 else [[n] for n in nodes]
        torch._dynamo.reset()
        split, subs = partitioned_callable(cap, groups)
        regions[len(groups)] = {"wall_us": measure.time_wall(lambda: split(xx))["median_us"],
                                "kernels": len(measure.profile_kernels(lambda: split(xx), flush=False, reps=2)["kernels"])}
    h["regions"] = regions
    graphs = {}
    for k in (1, 32):
        s = torch.randn(1024, device=dev)
        g = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            y = s
            for _ in range(k):
                y = y + 1
        graphs[k] = {"wall_us": measure.time_wall(g.replay)["median_us"],
                     "device_us": measure.time_device(g.replay, flush=False)["median_us"]}
    h["cudagraph"] = graphs
    h["cudagraph_launch"] = graph_launch_host(dev)
    # d) host<->device syncs: a tiny kernel then a read of its result on the host, against
    # the same kernel without the read (the GPU drains, the host waits for the copy)
    y1 = torch.randn(8, device=dev)
    h["sync"] = {
        "item_us": measure.time_wall(lambda: (y1 + 1).sum().item())["median_us"],
        "no_item_us": measure.time_wall(lambda: (y1 + 1).sum())["median_us"],
        "nonzero_us": measure.time_wall(lambda: torch.nonzero(y1 > 0))["median_us"],
        "gt_us": measure.time_wall(lambda: y1 > 0)["median_us"],
        "synchronize_us": measure.time_wall(torch.cuda.synchronize)["median_us"]}
    # e) eager dispatch per op for more kinds: factories, indexing, cat, reductions
    ix = torch.tensor([0, 2, 4], device=dev)
    kinds = {"add": lambda: torch.add(y1, 1.0), "arange": lambda: torch.arange(16, device=dev),
             "full": lambda: torch.full((4, 4), 1.0, device=dev), "index": lambda: y1[ix],
             "cat": lambda: torch.cat([y1, y1]), "sum": lambda: y1.sum(-1),
             "softmax": lambda: torch.softmax(y1, -1), "to_dtype": lambda: y1.to(torch.float16)}
    h["op_kinds"] = {name: (measure.time_wall(loop(f, 50))["median_us"]
                            - measure.time_wall(loop(f, 1))["median_us"]) / 49
                     for name, f in kinds.items()}
    # f) torch.compile(mode="reduce-overhead") (CUDA graph trees): the replay's host cost
    # with 1 and 8 kernels' worth of graph and 1 vs 16 inputs
    ro = {}
    for k, n_in in ((1, 1), (8, 1), (1, 16)):
        torch._dynamo.reset()
        ins = tuple(torch.randn(16, 16, device=dev) for _ in range(n_in))
        cf = torch.compile(chain_inputs(k, mats), mode="reduce-overhead")
        ro[f"{k}x{n_in}"] = {"kernels": k, "inputs": n_in,
                             "wall_us": measure.time_wall(cf, ins)["median_us"]}
    h["reduce_overhead"] = ro
    torch._dynamo.reset()
    # f2) a whole decoder's compiled call beyond f) (validation/measure/model_call_probe.py)
    from validation.measure.model_call_probe import model_call_probe
    h["model_call"] = model_call_probe(dev)
    torch._dynamo.reset()
    h["stream"] = stream_busy(dev)
    # f3) eager host time per top-level call inside a decoder forward, by class (inforward_*_us)
    from validation.measure.decode_host_probe import probe_round
    try:
        h["decode_host"] = probe_round(dev)
    except Exception as ex:  # noqa: BLE001 - the rest of the calibration stands without it
        h["decode_host_error"] = f"{type(ex).__name__}: {ex}"[:300]
    # g) the reference forwards: eager host time inside a real forward (eager_forward_factor),
    # the median of three timings spread over the run (the host's speed drifts within
    # seconds: one H200 calibration timed GPT-2 at 1.25x and ResNet-50 at 2.04x its prediction)
    rounds.append(reference_walls())
    h["reference_walls_rounds"] = rounds
    h["reference_walls"] = median_walls(rounds)
    # h) the same forwards under torch.compile (compiled_forward_factor): once a round (each
    # timing compiles them again; calibrate --host-only's three rounds give three)
    comp = compiled_reference_walls(dev)
    h["compiled_reference_walls_rounds"] = [comp]
    h["compiled_reference_walls"] = median_walls([comp])
    return h


#: leaves of the raw host timings that count things (kernels, inputs) rather than time them
COUNT_KEYS = ("kernels", "inputs", "triton")


def fastest_rounds(rounds: list[dict]) -> dict:
    """Several :func:`host_microbenchmarks` rounds merged into one: every timing leaf the
    fastest of the rounds (the host without contention: :func:`fastest_walls`' reason), counts
    and the machine as the first round has them, the reference forwards' rounds pooled and
    their fastest taken."""
    def merge(xs, key=""):
        x0 = xs[0]
        if isinstance(x0, dict):
            return {k: merge([x[k] for x in xs], k) for k in x0}
        if isinstance(x0, bool) or not isinstance(x0, (int, float)) or key in COUNT_KEYS:
            return x0
        return min(xs)
    walls = [(f"{p}reference_walls_rounds", f"{p}reference_walls") for p in ("", "compiled_")]
    out = {k: merge([r[k] for r in rounds], k) for k in rounds[0]
           if not any(k in w for w in walls) and k != "model_call"}
    calls = [r["model_call"] for r in rounds if "call_us" in (r.get("model_call") or {})]
    if calls or "model_call" in rounds[0]:      # the fastest round's call whole (its counts with it)
        out["model_call"] = min(calls, key=lambda c: c["call_us"]) if calls else rounds[0]["model_call"]
    for rounds_key, key in walls:
        pooled = [w for r in rounds for w in r.get(rounds_key, [])]
        if pooled:
            out[rounds_key] = pooled
            out[key] = fastest_walls(pooled)
    out["statistic"] = f"fastest of {len(rounds)} rounds"
    return out


def graph_launch_host(dev: str = "cuda", ks: tuple = (1, 256), reps: int = 50) -> dict:
    """Host time of one CUDA graph launch (``graph.replay()``, i.e. ``cudaGraphLaunch``) of ``k``
    tiny in-place adds, the stream drained before each launch so that the call never waits on a
    full queue: ``{k: median µs}``. The slope is the host's launch cost per graph node, which a
    replay's wall hides when the GPU is the slower side (``cudagraph_call_us``'s graphs)."""
    import time
    out = {}
    for k in ks:
        y = torch.zeros(1024, device=dev)
        g = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            for _ in range(k):
                y.add_(1)
        g.replay()
        walls = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            g.replay()
            walls.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
        out[k] = float(sorted(walls)[len(walls) // 2])
    return out


def stream_busy(dev: str = "cuda", k: int = 32, n: int = 2048) -> dict:
    """A stream kept full: a CUDA graph of ``k`` steps of a 16-bit GEMM (n x n x n) and
    a bias add on its output (2k kernels of ~5-30 us, as in a model), replayed back to
    back (wall per replay; no host cost between its kernels), against the profiler's
    kernel sum of one replay (L2 flushed, as gpusim's kernel estimates are)."""
    x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    ws = [torch.randn(n, n, device=dev, dtype=torch.bfloat16) / n ** 0.5 for _ in range(4)]
    b = torch.randn(n, device=dev, dtype=torch.bfloat16)

    def step():
        y = x
        for i in range(k):
            y = (y @ ws[i % 4]) + b
        return y
    step()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    prof = measure.profile_kernels(g.replay, flush=True, reps=3)
    return {"kernels": len(prof["kernels"]), "kernel_sum_us": float(sum(kk["us"] for kk in prof["kernels"])),
            "wall_us": measure.time_wall(g.replay)["median_us"]}


def add_chain(x, k: int):
    """``k`` eager adds in a row on ``x``: the host's cost per dispatched op."""
    def f():
        y = x
        for _ in range(k):
            y = torch.add(y, 1.0)
        return y
    return f


def module_call_walls(x) -> dict:
    """Wall per call of a chain of 1 and of 64 identity modules (``nn.Module.__call__``
    itself: the chain launches no kernel)."""
    chains = {k: torch.nn.Sequential(*[torch.nn.Identity() for _ in range(k)]) for k in (1, 64)}
    return {k: measure.time_wall(lambda m=m: m(x))["median_us"] for k, m in chains.items()}


def host_probe(modules: bool = True) -> dict:
    """A quick look at the host's speed now, measured as ``calibrate --host-only`` measures
    ``eager_op_us`` and (``modules``) ``eager_module_us`` (the validation harness takes
    one per case)."""
    tiny = torch.randn(1, device="cuda")
    op = (measure.time_wall(add_chain(tiny, 100))["median_us"]
          - measure.time_wall(add_chain(tiny, 1))["median_us"]) / 99
    if not modules:
        return {"eager_op_us": op}
    mc = module_call_walls(tiny)
    return {"eager_op_us": op, "module_us": (mc[64] - mc[1]) / 63}


def model_call_figures(probe: dict | None, fitted: dict, diag: dict) -> dict:
    """``compiled_model_call_us`` measured by the probe (:func:`model_call_figure`, with the reduce-overhead
    figures ``fitted``), the probe's record in ``diag``; {} where it did not run."""
    from validation.measure.model_call_probe import model_call_figure
    fig = model_call_figure(probe, fitted)
    if probe:
        diag["model_call"] = probe
    return {} if fig is None else {"compiled_model_call_us": fig}


def python_law(eager_module_us: float | None, tree_call_us: float | None = None) -> tuple[dict, dict]:
    """The model's Python per call for a host whose bare nn.Module call costs
    ``eager_module_us``: the reference host's law (``python_module_call_us``,
    ``python_torch_call_us``, fitted by ``validation/score/host_accuracy.py --fit`` in units of
    its ``eager_module_us``) scaled to this host's probe; and, given the host's
    ``cudagraph_tree_call_us``, a whole decoder's compiled call beyond it
    (:func:`validation.measure.model_call_probe.model_call_law`). Returns (fields, provenance)."""
    from validation.measure.model_call_probe import model_call_law
    out, prov = model_call_law(tree_call_us)
    ref = load_host()
    if not eager_module_us or not ref.eager_module_us:
        return out, prov
    for k in ("python_module_call_us", "python_torch_call_us"):
        if getattr(ref, k) is None:
            continue
        units = getattr(ref, k) / ref.eager_module_us
        out[k] = units * eager_module_us
        prov[k] = ("derived", f"{units:.4f} x this host's eager_module_us {eager_module_us:.4f}: "
                   f"the reference host's law in units of its eager_module_us "
                   f"(hosts/reference.toml {k}: {ref.provenance[k][1]})")
    return out, prov


def chain_inputs(k: int, mats):
    """k extern matmuls (plus Triton epilogues) on the sum of the inputs."""
    def f(*xs):
        x = xs[0]
        for t in xs[1:]:
            x = x + t
        for i in range(k):
            x = torch.relu(x @ mats[i])
        return x
    return f


def compiled_launch_split(dev: str = "cuda", ks: tuple = (1, 16)) -> dict:
    """What Inductor's generated wrapper pays per kernel by how it launches it, and per
    tensor input by what the input is (the calibrate chain mixes extern matmuls and Triton
    relus and its inputs are plain tensors; a model's are mostly parameters):

    ``extern``  ``x = x @ w`` k times, one weight: k extern matmul calls, no Triton kernel;
    ``triton``  k elementwise steps, each step's result a graph output and Inductor's
                fusion limited to one node (``max_fusion_size=1``), so each step is its own
                Triton kernel and the call has one tensor input;
    ``params``  an ``nn.Module`` whose k registered parameters are stacked and summed
                (``compiled_inputs``' program, the tensors parameters instead of arguments).

    Each at k in ``ks``: wall of back-to-back calls and the kernels the profiler saw (the
    fit divides by the launches that really happened)."""
    x = torch.randn(16, 16, device=dev)
    w = torch.randn(16, 16, device=dev)

    def extern(k):
        def f(x, w):
            for _ in range(k):
                x = x @ w
            return x
        return f

    def triton(k):
        def f(x):
            outs = []
            for _ in range(k):
                x = torch.sin(x) + 1.0
                outs.append(x)
            return outs
        return f

    class Params(torch.nn.Module):
        def __init__(self, k):
            super().__init__()
            self.ps = torch.nn.ParameterList(torch.nn.Parameter(torch.randn(16, device=dev)) for _ in range(k))

        def forward(self, x):
            return torch.stack(list(self.ps)).sum() + x

    progs = {"extern": (extern, (x, w), {}), "triton": (triton, (x,), {"max_fusion_size": 1}),
             "params": (Params, (torch.randn(16, device=dev),), {})}
    out: dict = {}
    with torch.no_grad():
        for name, (make, args, cfg) in progs.items():
            out[name] = {}
            for k in ks:
                torch._dynamo.reset()
                cf = torch.compile(make(k))
                with torch._inductor.config.patch(**cfg):
                    cf(*args)                # compiled here, under the config
                out[name][k] = {"wall_us": measure.time_wall(cf, args)["median_us"],
                                "kernels": len(measure.profile_kernels(cf, args, flush=False, reps=2)["kernels"])}
    return out


def library_chains(dev: str = "cuda") -> dict:
    """``{name: (make(k), args)}``: k extern library calls as a model makes them, each
    followed by a pointwise op (one Triton kernel: a model's wrapper alternates library
    calls and its own kernels, and the zoo's compiled records put the extra cost of a real
    model's wrapper on the library calls), each chain's tensors one input however long it is
    (the weights of step i are views of one stacked tensor, as a model's are parameters the
    wrapper reinterprets), bf16 at shapes a transformer or CNN block runs but small enough
    that the host bounds the call:

    ``linear``     ``x = relu(F.linear(x, W[i], B[i]))``: cuBLASLt GEMMs with a bias
                   (``extern_kernels.addmm``), 256 tokens of width 256;
    ``attention``  ``q = relu(sdpa(q, k, v))``: cuDNN attention on a CUDA GPU that has it
                   (``aten._scaled_dot_product_cudnn_attention``, as the zoo's compiled
                   transformers run it), 2x4 heads of 128 x 64;
    ``conv``       ``x = relu(F.conv2d(x, W[i], B[i], padding=1))``: cuDNN 3x3
                   convolutions, 32 channels of 16x16."""
    bf = dict(device=dev, dtype=torch.bfloat16)
    n = 16

    def linear(k):
        def f(x, w, b):
            for i in range(k):
                x = torch.relu(F.linear(x, w[i], b[i]))
            return x
        return f

    def attention(k):
        def f(q, kk, v):
            for _ in range(k):
                q = torch.relu(F.scaled_dot_product_attention(q, kk, v))
            return q
        return f

    def conv(k):
        def f(x, w, b):
            for i in range(k):
                x = torch.relu(F.conv2d(x, w[i], b[i], padding=1))
            return x
        return f
    q = torch.randn(2, 4, 128, 64, **bf)
    return {"linear": (linear, (torch.randn(256, 256, **bf), torch.randn(n, 256, 256, **bf) / 16,
                                torch.randn(n, 256, **bf))),
            "attention": (attention, (q, torch.randn_like(q), torch.randn_like(q))),
            "conv": (conv, (torch.randn(1, 32, 16, 16, **bf), torch.randn(n, 32, 32, 3, 3, **bf) / 17,
                            torch.randn(n, 32, **bf)))}


def compiled_library_split(dev: str = "cuda", ks: tuple = (1, 16), backend: str = "inductor") -> dict:
    """What Inductor's wrapper pays per extern library call of each class inside a model
    (:func:`library_chains`), beside ``compiled_launch_split``'s tiny fp32 matmul: each chain
    compiled at k in ``ks``, its wall of back-to-back calls, the kernels the profiler saw and
    how many of them Triton generated (the fit prices those at the Triton figure and the
    library's helper kernels at one launch), and the library kernels' names. Attention runs under cuDNN's SDPA backend where
    the GPU has it. ``backend="eager"`` on a CPU: a dry run of the programs, no figure."""
    from contextlib import nullcontext
    from torch.nn.attention import SDPBackend, sdpa_kernel
    out: dict = {}
    with torch.no_grad():
        for name, (make, args) in library_chains(dev).items():
            cudnn = name == "attention" and dev == "cuda"
            out[name] = {}
            for k in ks:
                torch._dynamo.reset()
                try:
                    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]) if cudnn else nullcontext():
                        cf = torch.compile(make(k), backend=backend)
                        cf(*args)            # compiled here, under the attention backend
                        ks_ = measure.profile_kernels(cf, args, flush=False, reps=2)["kernels"]
                        wall = measure.time_wall(cf, args)["median_us"]
                except RuntimeError as e:    # no cuDNN attention on this GPU: no figure
                    if not cudnn:
                        raise
                    out[name] = {"error": str(e).splitlines()[0][:200]}
                    break
                lib_names = sorted({kn["name"][:80] for kn in ks_ if not kn["name"].startswith("triton")})
                out[name][k] = {"wall_us": wall, "kernels": len(ks_),
                                "triton": sum(1 for kn in ks_ if kn["name"].startswith("triton")),
                                "library_kernels": lib_names}    # which library ran (cuDNN's SDPA?)
    return out
