"""``gpusim.generate``: a whole Hugging Face ``generate()`` call, predicted from its parts.

What runs (:mod:`gpusim.predict.decode` has the transformers source it follows): one eager
prefill over the prompt (``logits_to_keep=1``), then per output token generate's own tail
(logits processors, argmax, stopping criteria, the host's read of the stop flag), and N-1
decode steps over a cache that grows by one token each. Each part is an ordinary
prediction of a captured graph on the GPU spec and host profile asked.

**The decode curve.** A step's cost depends on its context only through the attention over
the cache and the cache update (``DynamicCache``'s ``cat`` copies the whole cache; a static
cache attends over all ``max_cache_len`` positions whatever the context): bytes affine in
the context, the GEMMs that stream the weights constant. So the step is predicted at a few
contexts (``samples``, default 2: the first and last step's context, and evenly between) and the time
of every other step is the **piecewise-linear interpolation** between its neighbours: exact
at the sampled contexts, exact everywhere if the step is affine in the context, and
monotone wherever the sampled times are. Contexts whose step arguments have one signature
(a full-attention static cache: same shapes, the context only in tensor values) trace to one
graph and are captured once (:mod:`gpusim.predict.reuse`).

**The compiled call.** generate enters its compiled forward (``mode="reduce-overhead"``) through
Dynamo, whose guards check every tensor input (weights and cache too) on every call, then the CUDA
graph tree checks the static inputs, copies the others in and replays: the host's reduce-overhead
call (the timeline's replay) and per-input figures price it (:func:`dynamo_entry_us`).

**Warm or cold.** A prediction is the steady state: the process has run these lengths before
(a server, a measurement after warm-up calls). ``warm=False`` predicts the first call at them,
where every eager forward builds a cuDNN attention plan per layer (:func:`plan_build_us`).

**One token's wall.** The forward (its host issue ``host_us``, its GPU finishing
``latency_us`` after the call starts) is followed by generate's tail, whose last act is a
sync: the host waits for the GPU before the next step. So a token takes
``max(forward.host_us + tail.host_us, forward.latency_us + tail.device_us)`` plus the tail's
wait, which is what the simulation of the two in sequence gives when the tail's only sync
is its last op (:func:`token_us`).

**Memory.** Weights plus the largest of the prefill's (its activations and the cache it
fills, returned so that it stays alive; a static cache is resident from the start), the
last decode step's (its resident cache and inputs, and its activation peak: a
``DynamicCache`` step's ``cat`` replaces each layer's tensors and eager frees the old ones
then, which capture records as released inputs, :mod:`gpusim.sim.memory`) and generate's
per-token tail's (the whole cache, the logits and the tail's own tensors: it runs after the
forward has freed its activations, so it does not stack on their peak; a real CPU
``generate()`` tracked op by op peaks in the prefill, at the simulation's live bytes,
validation/measure/cpu_liveness.py), each with the caching allocator's blocks of what is
resident (the weights' and the inputs' rounding and whole blocks, as
:attr:`~gpusim.sim.memory.MemoryEstimate.total_bytes` counts them). Activations and the cache grow linearly in the batch; the largest batch
that fits divides the free memory by the per-sequence bytes. The peak is the call's own:
what its caller holds besides the weights is not in it. A caller that keeps a previous
call's result (``return_dict_in_generate=True``: the int64 sequences and the whole cache,
``output_bytes``) while the next call runs has that much more allocated (docs/llm.md).
"""

from __future__ import annotations

import bisect
import dataclasses
import gc
from dataclasses import dataclass, field

from gpusim.capture.tracing import capture
from gpusim.hw.host import load_host
from gpusim.graph.opgraph import OpGraph
from gpusim.predict import decode, repeated, reuse
from gpusim.predict.pipeline import Prediction, as_spec, lower, predict_lowering
from gpusim.sim.memory import capacity_bytes
from gpusim.util import forked
from gpusim.util.collector import loading_for_good

#: generate's mode -> the runtime that runs the decode step (prefill and tail stay eager)
STEP_MODES = {"eager": "eager", "compiled": "cudagraph"}


@dataclass
class GenerateResult:
    """A predicted ``generate()`` call; every figure a plain number (µs, bytes)."""

    model: str
    gpu: str
    host: str
    dtype: str
    batch: int
    prompt: int
    new: int
    cache: str
    mode: str
    ttft_us: float                  # prefill + generate's tail of the first token
    token_us: list[float]           # wall of output tokens 2..new (index 0: the second token)
    sample_contexts: list[int]      # contexts at which the decode step was predicted
    sample_token_us: list[float]    # the token wall predicted there
    sample_device_us: list[float]   # the step's device time there (forward + tail)
    step_kernels: int               # kernels per decode step (forward + tail)
    prefill_us: float
    prefill_device_us: float
    prefill_kernels: int
    tail_host_us: float             # generate's own host work per token (tail dispatch + its sync)
    tail_device_us: float
    tail_kernels: int
    kv_cache_bytes: int             # at the end of the call
    output_bytes: int               # what the call returns with return_dict_in_generate=True: sequences + cache
    weights_bytes: int
    peak_bytes: int                 # weights + cache + activations at the worst moment
    capacity_bytes: int
    max_batch: int                  # the largest batch whose peak fits (at this prompt + new)
    parts: dict = field(default_factory=dict, repr=False)   # the Predictions composed

    @property
    def tpot_us(self) -> float:
        """Mean time per output token after the first."""
        return sum(self.token_us) / len(self.token_us) if self.token_us else 0.0

    @property
    def total_us(self) -> float:
        return self.ttft_us + sum(self.token_us)

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens (all sequences) per second of the whole call."""
        return self.batch * self.new / self.total_us * 1e6

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens per second while decoding (batch / mean time per output token)."""
        return self.batch / self.tpot_us * 1e6 if self.token_us else 0.0

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "parts"}
        d.update(tpot_us=self.tpot_us, total_us=self.total_us, tokens_per_s=self.tokens_per_s,
                 decode_tokens_per_s=self.decode_tokens_per_s, fits=self.fits)
        return d


def interpolate(xs: list[int], ys: list[float], x: float) -> float:
    """Piecewise-linear through ``(xs, ys)`` (xs increasing); constant beyond the ends."""
    if len(xs) == 1 or x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x) - 1
    t = (x - xs[i]) / (xs[i + 1] - xs[i])
    return ys[i] + t * (ys[i + 1] - ys[i])


def sample_contexts(first: int, last: int, samples: int) -> list[int]:
    """``samples`` contexts from ``first`` to ``last`` inclusive, evenly spaced, distinct."""
    if last <= first or samples <= 1:
        return [first]
    n = min(samples, last - first + 1)
    return sorted({first + round(i * (last - first) / (n - 1)) for i in range(n)})


def token_us(forward: Prediction, tail: Prediction, before: Prediction | None = None,
             cold: bool = False) -> float:
    """One token's wall: ``before`` (``prepare_inputs_for_generation``: the inputs' slices and,
    for a static cache, the 4D mask, eager before the forward), the forward, then generate's
    tail ending in the host's sync; ``cold``: the forward's attention shapes are new to the
    process (:func:`plan_build_us`). The library's Python in ``before`` and the tail is
    :func:`library_python_us`."""
    f = forward.timeline
    b = part_host_us(before) + (plan_build_us(forward) if cold else 0.0)
    b += dynamo_entry_us(forward)
    return max(b + f.host_us + part_host_us(tail), b + f.latency_us + tail.device_us)


def part_host_us(p: Prediction | None) -> float:
    """An eager part's host time: its dispatch (the timeline) and the library's Python."""
    return p.timeline.host_us + library_python_us(p) if p is not None else 0.0


def library_python_us(p: Prediction) -> float:
    """The Python frames transformers runs in a part generate calls per token (its masking
    functions' closures, the cache's methods, the processors' and criteria's ``__call__``),
    counted at capture (:class:`~gpusim.predict.decode.LibraryFrames`: ``library_frames``),
    each priced as the host prices a model's Python per torch call (``python_torch_call_us``:
    a frame of library code between torch calls). 0 on a host without the figure."""
    per = p.host.python_torch_call_us if p.host is not None else None
    return p.graph.meta.get("library_frames", 0) * (per or 0.0)


def dynamo_entry_us(pred: Prediction) -> float:
    """generate calls its compiled forward (``torch.compile(mode="reduce-overhead")``: CUDA graph
    trees) through Dynamo (``get_compiled_call``) on every token: the guards check each tensor input
    (weights and cache too), AOTAutograd's wrapper passes them on, and the tree checks the static
    inputs' addresses before the replay. The host's ``reduce-overhead`` figures price that call:
    ``cudagraph_tree_call_us`` (the whole call of a one-input graph, Dynamo's entry included: the
    timeline's replay, :mod:`gpusim.sim.timeline`) and ``cudagraph_tree_input_us`` per further tensor
    input, here. The default mode's figures (``compiled_call_us`` + ``compiled_input_us`` per input,
    Inductor's wrapper checking each input's size and stride) priced it before: a replay skips that
    wrapper, and they read the records' compiled calls 2x high for 370-420 inputs (docs/static_token.md).
    A whole decoder's call costs more than that probe's one matmul, little of it per input: the host's
    ``compiled_model_call_us`` where it has one (measured from a lease's stamped generate calls,
    validation/fit/fit_model_call.py; elsewhere derived from the host's ``cudagraph_tree_call_us``
    by ``validation.measure.model_call_probe.model_call_law``).
    A host without the reduce-overhead figures (the machine kinds' profiles) keeps the default
    mode's. 0 for an eager forward."""
    if pred.mode != "cudagraph" or pred.host is None:
        return 0.0
    h, inputs = pred.host, pred.graph.meta.get("inputs", 0)
    if h.cudagraph_tree_input_us is None or h.cudagraph_tree_call_us is None:
        return h.compiled_call_us + inputs * (h.compiled_input_us or 0.0)
    return max(inputs - 1, 0) * h.cudagraph_tree_input_us + (h.compiled_model_call_us or 0.0)


def generate(model, batch: int = 1, prompt: int = 512, new: int = 128, gpu="h100",
             cache: str = "dynamic", mode: str = "eager", host=None, dtype="bfloat16",
             samples: int = 2, warm: bool = True) -> GenerateResult:
    """Predict ``model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
    cache_implementation=cache)`` for ``batch`` prompts of ``prompt`` tokens.

    Parameters
    ----------
    model : ``"hf:NAME"`` (the zoo), ``"path/file.py:NAME"`` (``NAME()`` returns a Hugging Face
        causal LM) or the module itself
    cache : ``"dynamic"`` (HF's default) | ``"static"`` (``cache_implementation="static"``)
    mode : ``"eager"`` | ``"compiled"``: the decode step as generate compiles it for a static
        cache (``torch.compile(mode="reduce-overhead")``: CUDA graphs); the prefill stays eager
    samples : contexts at which the decode step is predicted (interpolated between); a static
        cache's step is flat in the context (it attends over all ``max_cache_len`` positions),
        so it takes at most 2 (the first and last step)
    warm : the process has run these lengths before (a server in its steady state, a
        measurement after warm-up calls); ``False``: the first call at these lengths, whose
        every eager step builds cuDNN attention plans (:func:`plan_build_us`)

    >>> r = generate("hf:qwen2-0.5b", batch=1, prompt=128, new=16)   # doctest: +SKIP
    >>> r.ttft_us, r.tpot_us, r.kv_cache_bytes                        # doctest: +SKIP
    """
    return generate_runs(model, [(cache, mode)], batch, prompt, new, gpu, host, dtype, samples,
                         warm)[0]


def generate_runs(model, runs, batch: int, prompt: int, new: int, gpu="h100", host=None,
                  dtype="bfloat16", samples: int = 2, warm: bool = True,
                  jobs: int = 1) -> list[GenerateResult]:
    """:func:`generate` for each ``(cache, mode)`` of ``runs``, the model built once and
    generate's tail (the same for every cache) predicted once; ``jobs``: as
    :func:`generate_grid`."""
    grid = generate_grid(model, runs, [batch], [prompt], new, [gpu], host, dtype, samples, warm, jobs)
    return list(grid.values())


def generate_grid(model, runs, batches, prompts, new: int, gpus, host=None, dtype="bfloat16",
                  samples: int = 2, warm: bool = True, jobs: int = 1) -> dict:
    """:func:`generate` over ``gpus x batches x prompts x runs`` (``runs``: ``(cache, mode)``
    pairs) -> ``{(gpu, batch, prompt, cache, mode): GenerateResult}`` (``gpu`` as given), the
    model built once and each graph captured once for every GPU (capture knows no GPU).

    ``jobs=2``: the work is split in two shares (by cache when several are asked, else by batch
    and prompt), the second predicted in a forked copy of this process on a second core
    (:func:`gpusim.util.forked.both`; where there is none, one after the other here). The
    figures are the same; no result keeps its ``parts`` (the Predictions composed), which stay
    in the process that made them."""
    from gpusim.models.resolve import parse_dtype
    for b in batches:
        for p in prompts:
            for cache, mode in runs:
                decode.check_request(b, p, new, cache, mode)
    dt = parse_dtype(dtype)
    specs, hp = [(g, as_spec(g)) for g in gpus], load_host(host)
    # loading the model imports transformers and its model classes (~0.7 million objects
    # that live as long as the process): the collector off meanwhile, then they and what
    # torch holds are frozen (gpusim.util.collector). Every capture collects garbage once
    # before it traces (gpusim.capture.lifetimes): frozen, the loaded objects are not rescanned
    # (~0.25 s a capture); tracing runs with the collector off either way, so no traced
    # tensor's death moves. No collection before the freeze: it found next to nothing for
    # ~0.25 s (what garbage the imports left is kept until the unfreeze, and no tensor a
    # capture traces is in it).
    with loading_for_good():
        module, label = decode.load_lm(model, dt)
    items = [(b, p, cache, mode) for b in batches for p in prompts for cache, mode in runs]
    graphs: dict = {}       # (batch, prompt) -> the graphs captured for it (and their predictions)

    def predict_share(share) -> dict:
        out = {}
        for b, p, cache, mode in share:
            bp = graphs.setdefault((b, p), {})
            for g, spec in specs:
                out[(g, b, p, cache, mode)] = _one(
                    bp, module, label, cache, mode, b, p, new, spec, hp, dt,
                    min(samples, 2) if cache == "static" else samples,
                    _tail(bp, module, label, b, p, new, spec, hp), warm)
        return out

    try:
        shares = _shares(items) if jobs > 1 else [items]
        if len(shares) == 1:
            out = predict_share(items)
        else:
            # the first tail here, before the fork: the first capture pays torch's one-off
            # costs (lazy imports, the tracer's caches), which the fork then inherits
            b, p = items[0][:2]
            _tail(graphs.setdefault((b, p), {}), module, label, b, p, new, specs[0][1], hp)
            mine, theirs = forked.both(lambda: _plain(predict_share(shares[0])),
                                       lambda: _plain(predict_share(shares[1])))
            out = {**mine, **theirs}
        return {(g, b, p, cache, mode): out[(g, b, p, cache, mode)]
                for b, p, cache, mode in items for g, _ in specs}
    finally:
        gc.unfreeze()


def _tail(graphs, module, label, batch, prompt, new, spec, hp) -> Prediction:
    """generate's per-token tail (logits processors, argmax, stopping criteria), once per
    batch and prompt, on ``spec``."""
    return _predict(graphs, "tail", decode.tail_fn(prompt, new, bool(decode.eos_ids(module)), module),
                    lambda: decode.tail_args(module, batch, prompt), spec, "eager", hp,
                    f"{label} generate tail", frames=True)


def _shares(items) -> list[list]:
    """``items`` (batch, prompt, cache, mode) in two shares that share no capture but the
    tail: by cache when there are two, else by (batch, prompt) in turn; one share when the
    work does not split."""
    caches = list(dict.fromkeys(i[2] for i in items))
    key = (lambda i: i[2]) if len(caches) > 1 else (lambda i: i[:2])
    keys = list(dict.fromkeys(key(i) for i in items))
    if len(keys) < 2:
        return [items]
    half = {k: n % 2 for n, k in enumerate(keys)}
    return [[i for i in items if half[key(i)] == s] for s in (0, 1)]


def _plain(results: dict) -> dict:
    """The results without their Predictions (which do not leave their process)."""
    return {k: dataclasses.replace(r, parts={}) for k, r in results.items()}


_UNIT_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "tf32": "float32"}


def plan_build_us(pred: Prediction) -> float:
    """Host time an eager call spends building cuDNN attention execution plans when its
    attention shapes are new to the process: cuDNN's SDPA keeps a plan per shape, and a call
    at a shape it has not seen builds one first (``cudnn_attention_plan_us`` of the host, per
    attention kernel that runs on cuDNN: the GPU's first SDPA backend for its dtype). A decode
    step at a context the process has not run is such a call, once per layer. 0 for a CUDA
    graph (replays build nothing) and on a host without the figure."""
    from gpusim.hw.arch import attention_backend
    per = pred.host.cudnn_attention_plan_us if pred.host is not None else None
    if not per or pred.mode == "cudagraph":
        return 0.0
    n = sum(1 for k in pred.kernels if k.kind == "attention" and k.role == "main"
            and attention_backend(pred.spec, _UNIT_DTYPES.get(str(k.unit).split("_")[0], "")) == "cudnn")
    return n * per


def _predict(graphs: dict, key, fn, args, spec, mode, host, name, same=None, module=None,
             frames: bool = False) -> Prediction:
    """Capture ``fn(*args())`` once per ``key`` (the graph is the same on every GPU), then
    lower, cost and simulate it on ``spec``. ``same``: the calls of one function under this
    name whose arguments have one :func:`~gpusim.predict.reuse.signature` trace to one graph,
    so the first capture serves them all (renamed: the graph is shared, not copied).
    ``module``: the decoder ``fn`` runs, whose repeated layers may be captured at 2, 3 and 4
    of them and extended (:mod:`gpusim.predict.repeated`; the same graph, checked).
    ``frames``: count the library's Python frames the call runs (``meta["library_frames"]``)."""
    if key not in graphs and frames:
        counted = decode.LibraryFrames(fn)
        graphs[key] = capture(counted, args(), name=name)
        graphs[key].meta["library_frames"] = counted.frames
        gc.freeze()
    if key not in graphs:
        a = args() if same is not None else None
        sig = reuse.signature(a) if same is not None else None
        first = graphs.get((same, sig)) if sig is not None else None
        if first is None:
            g = (repeated.capture_repeated(module, fn, args, name, capture, graphs,
                                           ("rule",) + same if same is not None else None)
                 if module is not None else None)
            graphs[key] = g if g is not None else capture(fn, a if a is not None else args(), name=name)
            gc.freeze()     # as generate_grid does: the next capture's collection skips what is kept
            if sig is not None:
                graphs[(same, sig)] = graphs[key]
        else:
            graphs[key] = OpGraph(first.g, name=name, meta=first.meta)
    g = graphs[key]
    # a graph shared under another name (``same``) lowers, costs and simulates as its first
    # name did on this GPU, host and mode: that prediction, renamed (its memory too, once known)
    memo = ("prediction", id(g.g), mode, id(spec), id(host))
    first = graphs.get(memo)
    if first is not None and first.graph.g is g.g and first.graph.meta == g.meta:
        out = dataclasses.replace(first, graph=g)
        if "memory" in first.__dict__:
            out.memory = first.memory
        return out
    graphs[memo] = pred = predict_lowering(lower(g, mode, spec=spec), spec, host=host)
    return pred


def _one(graphs, module, label, cache, mode, batch, prompt, new, spec, hp, dt, samples, tail0, warm):
    max_len = prompt + new - 1      # generate's max_cache_len: max_length - 1 (the last token is never fed back)
    fwd = decode.forward_fn(module)
    static = cache == "static"
    prefill = _predict(graphs, ("prefill", cache), decode.forward_fn(module, True, build_mask=static),
                       lambda: decode.forward_args(module, cache, batch, prompt, 0, max_len, dt),
                       spec, "eager", hp, f"{label} prefill {prompt}", module=module)
    ttft = token_us(prefill, tail0, cold=not warm)
    contexts = sample_contexts(prompt, prompt + new - 2, samples) if new > 1 else []
    prep, shape = None, None
    if contexts:    # prepare_inputs_for_generation, eager, before each forward (a static cache: the 4D mask)
        prep = _predict(graphs, ("prep", cache), decode.prep_fn(module),
                        lambda: decode.prep_args(module, cache, batch, contexts[0], max_len, dt),
                        spec, "eager", hp, f"{label} generate inputs", frames=True)
        shape = decode.mask_of(prep.graph) if static else None
    steps, s_us, s_dev = [], [], []
    for c in contexts:
        s = _predict(graphs, ("step", cache, c), fwd,
                     lambda: decode.forward_args(module, cache, batch, 1, c, max_len, dt, shape), spec,
                     STEP_MODES[mode], hp, f"{label} decode {cache} at {c}", same=("step", cache),
                     module=module)
        steps.append(s)
        s_us.append(token_us(s, tail0, prep, cold=not warm))
        s_dev.append(s.device_us + tail0.device_us + extra(prep, "device_us"))
    tokens = [interpolate(contexts, s_us, prompt + k - 1) for k in range(1, new)]

    final = prompt + new - 1                       # cached tokens when the call returns
    kv = decode.kv_cache_bytes(module, cache, batch, final, max_len, dt)
    weights = prefill.memory.weights_bytes
    acts = [at_peak(prefill)] + ([at_peak(steps[-1])] if steps else [])
    # generate's tail runs once the forward has returned and freed its activations: the cache,
    # the tail's inputs (the logits, the ids and masks) and the weights' blocks are what it
    # holds besides its own
    acts.append(kv + at_peak(tail0) + prefill.memory.resident_overhead_bytes)
    # cuBLAS's workspace is the caching allocator's too (allocated at the first GEMM, kept)
    peak = weights + max(acts) + prefill.memory.workspace_bytes
    cap = int(capacity_bytes(spec))
    per_seq = (peak - weights) / batch
    max_b = int((cap - weights) // per_seq) if per_seq > 0 and cap > weights else 0
    return GenerateResult(
        model=label, gpu=spec.name, host=hp.name, dtype=str(dt).replace("torch.", ""),
        batch=batch, prompt=prompt, new=new, cache=cache, mode=mode, ttft_us=ttft,
        token_us=tokens, sample_contexts=contexts, sample_token_us=s_us, sample_device_us=s_dev,
        step_kernels=(steps[0].kernel_count + tail0.kernel_count + extra(prep, "kernel_count")) if steps else 0,
        prefill_us=prefill.end_to_end_us, prefill_device_us=prefill.device_us,
        prefill_kernels=prefill.kernel_count,
        tail_host_us=part_host_us(tail0) + part_host_us(prep),
        tail_device_us=tail0.device_us + extra(prep, "device_us"),
        tail_kernels=tail0.kernel_count + extra(prep, "kernel_count"), kv_cache_bytes=kv,
        output_bytes=kv + batch * (prompt + new) * 8,      # + the int64 sequences
        weights_bytes=weights, peak_bytes=int(peak), capacity_bytes=cap, max_batch=max_b,
        parts={"prefill": prefill, "tail": tail0, "prep": prep, "steps": dict(zip(contexts, steps))})


def at_peak(p: Prediction) -> int:
    """Bytes above the raw weights while part ``p`` is at its peak: its resident inputs, the
    caching allocator's rounding and whole blocks of the resident tensors (weights and inputs:
    ``resident_overhead_bytes``, what ``max_memory_allocated`` counts beyond their bytes) and its
    activation peak."""
    m = p.memory
    return m.inputs_bytes + m.resident_overhead_bytes + m.peak_bytes


def extra(p: Prediction | None, field: str):
    return getattr(p, field) if p is not None else 0


__all__ = ["generate", "generate_grid", "generate_runs", "GenerateResult", "interpolate", "sample_contexts", "token_us",
           "library_python_us", "part_host_us"]
