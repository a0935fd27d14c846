"""Hugging Face ``generate()`` of the zoo's decoders on a GPU: whole generations (eager with a
DynamicCache, and the static cache that transformers compiles), prefills, and the host of one eager
decode step; one JSONL line a case, the environment first. What ``gpusim.generate`` and the decode
host model are scored against (issue 34).

    python3 -m validation.measure.generate_run --out OUT.jsonl [--what generate,prefill,decode_host]

Kinds of line:
- ``generate``: ``model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False)``
  with ``cache_implementation`` None (DynamicCache, eager) or "static" (transformers compiles the
  forward on CUDA: ``mode="compiled"``). Random prompt ids, all-ones attention mask. Two warm-up calls
  (the static path compiles and records CUDA graphs there), then ``--reps`` timed calls (host wall,
  synchronised): ``wall_ms``; ``ttft_ms`` from calls with ``max_new_tokens=1``; ``token_ms``: the
  interval between consecutive logits-processor calls (one a token; generate syncs every token for
  its stopping criteria), median over the timed calls, token by token; peak allocated memory over one
  call (``peak_allocated_bytes``, with nothing else of the process's held: ``allocated_before_bytes``
  allocated when it starts, ``holds_previous_output: false``; records without that field held the
  previous timed call's result, its whole cache, during the measured call: docs/llm.md), and the
  bytes of the returned cache's tensors. ``forward_host_ms``: the host time inside each
  decode forward call (the compiled call for a static cache, ``self.__call__`` for eager; a wrapper
  stamps entry and exit, no sync), median over the timed calls, token by token: the token interval less
  this is generate's own per-token host work plus any wait for the GPU. ``prep_host_ms``: the same
  for each ``prepare_inputs_for_generation`` call (the prefill's first where generate's prefill
  calls it), the host work before each forward (slices; a static cache's 4D mask). ``profiled``: one more call of
  ``--profile-new`` tokens under the profiler (CUDA activity): kernels per call by name, and their
  count and device-time sum; ``kernel_us`` (device time by name) and ``kernel_seq`` (every kernel in
  start order, ``[index into kernel_names, µs]``); with ``--cpu-profile`` also CPU activity: ``cpu_self``
  (the 40 CPU event names with the most self time) and ``cpu_span_us``. ``allocator_delta``: the caching
  allocator's counters (device mallocs and frees, retries, segments) over one more unprofiled call.
- ``prefill``: one forward over the prompt with ``use_cache=True`` and ``logits_to_keep=1`` (as
  generate's first step), wall (median of 10) and its kernels (count and device-time sum).
- ``decode_host``: one eager decode step (DynamicCache filled by a prefill of ``context`` tokens, the
  argmax read by the host; ``variant`` "bare": ids and cache only, "generate": also the attention mask,
  cache position and position ids that generate passes): unprofiled wall (median of 10), then one step under the profiler with CPU
  and CUDA activities: kernels (count, device-time sum, and by name), module calls (a forward pre-hook), top-level
  aten ops (no aten op among their CPU ancestors) and their CPU time, CUDA launch calls, and the 15
  CPU events with the most self time.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time

import torch

from validation.measure.decode_run import environment
from validation.measure.host_drift import python_us, token_stamp


def _med(xs) -> dict:
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3),
            "n": len(xs)}


def _cache_bytes(cache) -> int:
    seen, total = set(), 0
    for layer in getattr(cache, "layers", []) or []:
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor) and id(t) not in seen:
                seen.add(id(t))
                total += t.numel() * t.element_size()
    return total


def _timed_forward(model, sink: list, prep_sink: list | None = None):
    """Wrap what generate calls for each decode forward so that each call's host time lands in
    ``sink``: the compiled call (``get_compiled_call``) and the instance's ``__call__`` (generate
    5.x reads ``self.__call__`` for its eager decode forward); and, given ``prep_sink``, each
    ``prepare_inputs_for_generation`` call's (the inputs' slices and, for a static cache, the 4D
    mask: what generate runs on the host before each forward)."""
    orig_get = model.get_compiled_call
    plain = type(model).__call__
    orig_prep = model.prepare_inputs_for_generation

    def stamp(fn):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            sink.append((t0, time.perf_counter()))
            return out
        return timed
    model.get_compiled_call = lambda *a, **k: stamp(orig_get(*a, **k))
    model.__call__ = stamp(lambda *a, **k: plain(model, *a, **k))
    if prep_sink is not None:
        # generate checks its kwargs against this method's signature: the wrapper must show it
        @functools.wraps(orig_prep)
        def prep(*a, **k):
            t0 = time.perf_counter()
            out = orig_prep(*a, **k)
            prep_sink.append((t0, time.perf_counter()))
            return out
        model.prepare_inputs_for_generation = prep

    def undo():
        del model.get_compiled_call
        del model.__call__
        if prep_sink is not None:
            del model.prepare_inputs_for_generation
    return undo


def _by_name(ks) -> dict:
    out = {}
    for e in ks:
        out[e.name[:120]] = out.get(e.name[:120], 0) + 1
    return out


ALLOC_STATS = ("num_alloc_retries", "num_device_alloc", "num_device_free", "segment.all.allocated",
               "segment.all.freed", "allocation.all.allocated")


def _kernel_detail(ks) -> dict:
    """Device time by kernel name, and every kernel in start order as ``[name index, µs]`` over a
    name table (so one decode step's kernels can be matched one by one with a prediction)."""
    ks = sorted(ks, key=lambda e: e.time_range.start)
    names, seq, us = {}, [], {}
    for e in ks:
        n = e.name[:120]
        seq.append([names.setdefault(n, len(names)), round(e.device_time, 2)])
        us[n] = round(us.get(n, 0.0) + e.device_time, 2)
    return {"kernel_us": us, "kernel_names": list(names), "kernel_seq": seq}


def _cpu_self(events, top: int = 40) -> dict:
    """The host side of the profiled call: the ``top`` CPU event names by self time ``[name, count,
    self µs]``, and the profiled call's CPU span."""
    by, lo, hi = {}, None, None
    for e in events:
        if e.device_type != torch.autograd.DeviceType.CPU:
            continue
        c = by.setdefault(e.name[:80], [0, 0.0])
        c[0] += 1
        c[1] += e.self_cpu_time_total
        lo = e.time_range.start if lo is None else min(lo, e.time_range.start)
        hi = e.time_range.end if hi is None else max(hi, e.time_range.end)
    rows = sorted(by.items(), key=lambda kv: -kv[1][1])[:top]
    return {"cpu_self": [[k, n, round(u, 1)] for k, (n, u) in rows],
            "cpu_span_us": round((hi - lo) if lo is not None else 0.0, 1)}


def generate_case(model, batch, prompt, new, cache, reps, vocab, profile_new=0, cpu_profile=False) -> dict:
    from transformers import LogitsProcessorList
    ids = torch.randint(3, vocab, (batch, prompt), device="cuda")
    mask = torch.ones_like(ids)
    kw = dict(do_sample=False, attention_mask=mask, pad_token_id=0, use_cache=True,
              cache_implementation="static" if cache == "static" else None)

    def call(n, stamp=None):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, return_dict_in_generate=True,
                             logits_processor=LogitsProcessorList([stamp] if stamp else []), **kw)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3, out
    with torch.no_grad():
        for _ in range(2):
            call(new)
            call(1)
        walls, ttfts, steps, fwd, probes = [], [], [], [], []
        out = None
        for _ in range(reps):
            probes.append(round(python_us(), 1))    # the host's own speed now (contention episodes)
            ttfts.append(call(1)[0])
            stamp = token_stamp()
            out = None      # the previous call's result (its whole cache) would be allocated during this one
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            w, out = call(new, stamp)
            walls.append(w)
            steps.append([(b - a) * 1e3 for a, b in zip(stamp.t, stamp.t[1:])])
        peak = torch.cuda.max_memory_allocated()
        sink, prep_sink, preps = [], [], []
        undo = _timed_forward(model, sink, prep_sink)
        try:
            for _ in range(reps):
                sink.clear()
                prep_sink.clear()
                call(new)
                fwd.append([(b - a) * 1e3 for a, b in sink])
                preps.append([(b - a) * 1e3 for a, b in prep_sink])
        finally:
            undo()
        stats0 = torch.cuda.memory_stats()
        call(new)
        stats1 = torch.cuda.memory_stats()
        alloc = {k: stats1.get(k, 0) - stats0.get(k, 0) for k in ALLOC_STATS}
        prof_row = {}
        if profile_new:
            from torch.profiler import ProfilerActivity, profile
            acts = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if cpu_profile else [])
            with profile(activities=acts) as prof:
                call(profile_new)
            ks = _kernels(prof)
            prof_row = {"profiled": {"new": profile_new, "kernel_count": len(ks),
                                     "kernel_sum_us": round(sum(e.device_time for e in ks), 1),
                                     "kernels": _by_name(ks), **_kernel_detail(ks),
                                     **(_cpu_self(prof.events()) if cpu_profile else {})}}
    tokens = [round(statistics.median(col), 4) for col in zip(*steps)]
    fwd_ms = [round(statistics.median(col), 4) for col in zip(*fwd)] if fwd and all(fwd) else []
    prep_ms = [round(statistics.median(col), 4) for col in zip(*preps)] if preps and all(preps) else []
    return {**prof_row, "forward_host_ms": fwd_ms, "prep_host_ms": prep_ms, "kind": "generate", "batch": batch, "prompt": prompt, "new": new, "cache": cache,
            "mode": "compiled" if cache == "static" else "eager", "wall_ms": _med(walls), "ttft_ms": _med(ttfts),
            "token_ms": tokens, "token_ms_reps": [[round(t, 4) for t in st] for st in steps],
            "python_us_reps": probes, "statistic": "fastest rep",
            "peak_allocated_bytes": peak, "allocated_before_bytes": before,
            "holds_previous_output": False, "allocator_delta": alloc,
            "kv_cache_bytes": _cache_bytes(out.past_key_values),
            "cache_class": type(out.past_key_values).__name__,
            "generated_tokens": int(out.sequences.shape[1] - prompt)}


def _kernels(prof):
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
            and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]


def prefill_case(model, batch, prompt, vocab) -> dict:
    from torch.profiler import ProfilerActivity, profile
    from transformers import DynamicCache
    ids = torch.randint(3, vocab, (batch, prompt), device="cuda")

    def once():
        return model(ids, past_key_values=DynamicCache(config=model.config), use_cache=True, logits_to_keep=1)
    with torch.no_grad():
        for _ in range(3):
            once()
        walls = []
        for _ in range(10):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            once()
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) * 1e6)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            once()
            torch.cuda.synchronize()
    ks = _kernels(prof)
    return {"kind": "prefill", "batch": batch, "prompt": prompt, "wall_us": _med(walls),
            "kernel_count": len(ks), "kernel_sum_us": round(sum(e.device_time for e in ks), 1),
            "kernels": _by_name(ks), **_kernel_detail(ks)}


def _top_level_aten(events):
    out = []
    for e in events:
        if not e.name.startswith("aten::") or e.device_type != torch.autograd.DeviceType.CPU:
            continue
        p, nested = e.cpu_parent, False
        while p is not None:
            if p.name.startswith("aten::"):
                nested = True
                break
            p = p.cpu_parent
        if not nested:
            out.append(e)
    return out


def decode_host_case(model, batch, context, vocab, variant: str = "bare") -> dict:
    from torch.profiler import ProfilerActivity, profile
    from transformers import DynamicCache
    ids = torch.randint(3, vocab, (batch, context), device="cuda")
    cache = DynamicCache(config=model.config)
    calls = [0]

    def count(m, i):
        calls[0] += 1
    with torch.no_grad():
        out = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        nxt = out.logits[:, -1:].argmax(-1)

        pos = [context]

        def step():
            nonlocal nxt
            extra = {}
            if variant == "generate":      # what generate passes each step
                n = pos[0]
                extra = dict(attention_mask=torch.ones(batch, n + 1, dtype=torch.long, device="cuda"),
                             cache_position=torch.arange(n, n + 1, device="cuda"),
                             position_ids=torch.full((batch, 1), n, dtype=torch.long, device="cuda"))
                pos[0] += 1
            out = model(nxt, past_key_values=cache, use_cache=True, **extra)
            nxt = out.logits[:, -1:].argmax(-1)
            nxt.cpu()
        for _ in range(3):
            step()
        walls = []
        for _ in range(10):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            walls.append((time.perf_counter() - t0) * 1e6)
        hook = torch.nn.modules.module.register_module_forward_pre_hook(count)
        try:
            step()
            n_calls = calls[0]
        finally:
            hook.remove()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        prof_wall = (time.perf_counter() - t0) * 1e6
    ev = prof.events()
    ks = _kernels(prof)
    top = _top_level_aten(ev)
    launches = sum(1 for e in ev if e.device_type == torch.autograd.DeviceType.CPU
                   and ("LaunchKernel" in e.name or e.name.startswith("cuLaunch")))
    aten_cpu = sum(e.cpu_time_total for e in top)
    by_self = {}
    for e in ev:
        if e.device_type == torch.autograd.DeviceType.CPU:
            c = by_self.setdefault(e.name, [0, 0.0])
            c[0] += 1
            c[1] += e.self_cpu_time_total
    top_self = sorted(by_self.items(), key=lambda kv: -kv[1][1])[:15]
    return {"kind": "decode_host", "variant": variant, "batch": batch, "context": context, "cache_len_after": cache.get_seq_length(),
            "wall_us": _med(walls), "profiled_wall_us": round(prof_wall, 1), "kernel_count": len(ks),
            "kernel_sum_us": round(sum(e.device_time for e in ks), 1), "kernels": _by_name(ks), **_kernel_detail(ks),
            "module_calls": n_calls,
            "aten_top_level_ops": len(top), "aten_top_level_cpu_us": round(aten_cpu, 1), "cuda_launches": launches,
            "python_us_estimate": round(prof_wall - aten_cpu, 1),
            "top_self_cpu": [[k[:80], n, round(us, 1)] for k, (n, us) in top_self]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--what", default="generate,prefill,decode_host")
    ap.add_argument("--gen-models", default="hf:llama-3.2-1b,hf:qwen2-0.5b")
    ap.add_argument("--host-models", default="hf:llama-3.2-1b,hf:qwen2-0.5b,hf:gpt2,hf:mistral-7b")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--prompts", default="128,512,2048")
    ap.add_argument("--contexts", default="512,4096")
    ap.add_argument("--caches", default="dynamic,static")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--profile-new", type=int, default=8, help="generate: tokens of the one profiled call (0: none)")
    ap.add_argument("--cpu-profile", action="store_true",
                    help="generate: the profiled call also records CPU activity (self time by op)")
    ap.add_argument("--variants", default="bare,generate", help="decode_host: the bare step, and with generate's kwargs")
    a = ap.parse_args(argv)
    from gpusim.models import zoo
    what = set(a.what.split(","))
    batches = [int(x) for x in a.batches.split(",")]
    models = list(dict.fromkeys((a.gen_models.split(",") if what & {"generate", "prefill"} else [])
                                + (a.host_models.split(",") if "decode_host" in what else [])))
    with open(a.out, "a") as f:
        f.write(json.dumps({**environment(), "dtype": "bfloat16", "transformers": __import__("transformers").__version__}) + "\n")
        for name in models:
            torch.compiler.reset()
            module, _ = zoo.build(name, device="cuda", dtype=torch.bfloat16)
            module.config.use_cache = True
            vocab, maxpos = module.config.vocab_size, getattr(module.config, "max_position_embeddings", 1 << 20)
            cases = []
            if name in a.gen_models.split(","):
                if "prefill" in what:
                    cases += [("prefill", lambda b=b, p=int(p): prefill_case(module, b, p, vocab))
                              for b in batches for p in a.prompts.split(",") if int(p) < maxpos]
                if "generate" in what:
                    cases += [("generate", lambda b=b, c=c: generate_case(module, b, a.prompt, a.new, c, a.reps, vocab,
                                                                                  a.profile_new, a.cpu_profile))
                              for c in a.caches.split(",") for b in batches]
            if name in a.host_models.split(",") and "decode_host" in what:
                cases += [("decode_host", lambda b=b, c=min(int(c), maxpos - 32), v=v: decode_host_case(module, b, c, vocab, v))
                          for v in a.variants.split(",") for b in batches for c in a.contexts.split(",")]
            for kind, fn in cases:
                try:
                    row = {"model": name, "dtype": "bfloat16", **fn()}
                except Exception as e:  # noqa: BLE001 - record the failure and go on
                    row = {"model": name, "kind": kind, "error": f"{type(e).__name__}: {str(e)[:300]}"}
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(json.dumps({k: v for k, v in row.items() if k != "token_ms"})[:400], flush=True)
            del module
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
