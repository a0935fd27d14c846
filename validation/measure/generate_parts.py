"""Where a ``generate()`` token's host time goes: every piece of generate's per-token loop stamped in
the same calls, the compiled call split into Dynamo's side, the CUDA-graph tree's and the replay, and
the replayed graph's device span by CUDA events (issue 34: the static compiled token's two halves).

    python3 -m validation.measure.generate_parts --model hf:gemma-2b --batches 1,8 --out OUT.jsonl
    python3 -m validation.measure.generate_parts --tiny --out /tmp/parts.jsonl      # CPU dry run

One JSONL line a case (the environment first), ``kind: "generate"`` with the fields the scorer reads
from validation/measure/generate_run.py's records (``token_ms_reps``, ``python_us_reps``,
``statistic: "fastest rep"``, ``wall_ms``, ``ttft_ms``, ``token_ms``, ``forward_host_ms``,
``prep_host_ms``, ``kv_cache_bytes``) and ``parts``:

- timed calls (``--reps``): only the token stamp (a logits processor: one a token), as generate_run;
- stamped calls (``--stamped``): every piece below wraps its function with two clock reads
  (``time.perf_counter``; no sync). Per token (the interval from one logits-processor call to the next)
  the time inside each piece; ``loop`` is the interval less the top-level pieces: generate's loop
  Python and its eager lines between them (the logits' fp32 copy, argmax, the eos arithmetic, the
  ``cat``), and any wait outside ``stop``:
  - top level: ``prep`` (``prepare_inputs_for_generation``), ``call`` (the compiled call that
    ``get_compiled_call`` returns, or ``__call__`` eager), ``update``
    (``_update_model_kwargs_for_generation``), ``procs`` (``LogitsProcessorList.__call__``), ``crit``
    (``StoppingCriteriaList.__call__``), ``stop`` (``StopCheck.__call__``: its ``.max() == 0`` read
    waits for the GPU);
  - inside ``call`` (compiled): ``fx`` (Inductor's ``CompiledFxGraph.__call__``: what is left of
    ``call`` outside it is Dynamo's guards and frame, AOTAutograd's wrappers and the output's
    reconstruction), ``tree`` (``CUDAGraphTreeManager.run``), ``node`` (``CUDAGraphNode.run``: the
    static-input check, copy-in, replay, output reconstruction), ``replay`` (``CUDAGraphNode.run_graph``:
    ``cudaGraphLaunch``);
  ``parts`` holds each piece's median over the stamped calls' tokens (their fastest call, µs), and
  ``tree_inputs`` / ``tree_non_static`` (the inputs the tree's node receives, the ones it copies in);
- one events call: CUDA events around each replay: ``graph_device_us``, the replayed graph's span on
  the GPU (median over tokens).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time

import torch

TOP = ("prep", "call", "update", "procs", "crit", "stop")
INNER = ("fx", "tree", "node", "replay")


class Stamps:
    """Wraps the pieces; while armed, ``ev`` collects ``(name, t0, t1)`` of every call (and, with
    ``events``, CUDA events around each replay in ``graph_events``). The class-level hooks go in before
    the first call: the CUDA-graph tree binds ``manager.run`` when it records (``functools.partial``), so
    a later patch would not see it; disarmed they only pass the call on. ``undo()`` restores."""

    def __init__(self):
        self.ev: list = []
        self.graph_events: list = []
        self.info: dict = {}
        self.armed = self.events = False
        self._undo: list = []
        self._inst_undo: list = []
        from transformers.generation.logits_process import LogitsProcessorList
        from transformers.generation.stopping_criteria import StoppingCriteriaList
        from transformers.generation.utils import StopCheck
        self._cls(LogitsProcessorList, "__call__", "procs")
        self._cls(StoppingCriteriaList, "__call__", "crit")
        self._cls(StopCheck, "__call__", "stop")
        try:
            from torch._inductor import cudagraph_trees as ct
            self._cls(ct.CUDAGraphTreeManager, "run", "tree")
            self._cls(ct.CUDAGraphNode, "run", "node", self._count_inputs)
            self._replay(ct.CUDAGraphNode)
        except (ImportError, AttributeError, KeyError) as e:
            self.info["tree_hook"] = f"{type(e).__name__}: {e}"
        try:
            from torch._inductor.output_code import CompiledFxGraph
            self._cls(CompiledFxGraph, "__call__", "fx")
        except (ImportError, AttributeError, KeyError) as e:
            self.info["fx_hook"] = f"{type(e).__name__}: {e}"

    def arm(self, model, events: bool = False):
        """Stamp the next calls: the model's own pieces (instance attributes) and the class hooks."""
        self.ev.clear()
        self.graph_events.clear()
        self._inst(model, "prepare_inputs_for_generation", "prep")
        self._inst(model, "_update_model_kwargs_for_generation", "update")
        orig_get = model.get_compiled_call
        model.get_compiled_call = lambda *a, **k: self._timed(orig_get(*a, **k), "call")
        plain = type(model).__call__
        model.__call__ = self._timed(lambda *a, **k: plain(model, *a, **k), "call")
        self._inst_undo += [lambda: delattr(model, "get_compiled_call"), lambda: delattr(model, "__call__")]
        self.armed, self.events = True, events

    def disarm(self):
        self.armed = self.events = False
        for u in reversed(self._inst_undo):
            u()
        self._inst_undo.clear()

    def _timed(self, fn, name, pre=None, always=True):
        ev, me = self.ev, self

        @functools.wraps(fn)
        def timed(*a, **k):
            if not (always or me.armed):
                return fn(*a, **k)
            if pre is not None:
                pre(*a)
            t0 = time.perf_counter()
            out = fn(*a, **k)
            ev.append((name, t0, time.perf_counter()))
            return out
        return timed

    def _inst(self, obj, attr, name):
        setattr(obj, attr, self._timed(getattr(obj, attr), name))
        self._inst_undo.append(lambda: delattr(obj, attr))

    def _cls(self, cls, attr, name, pre=None):
        orig = cls.__dict__[attr]
        setattr(cls, attr, self._timed(orig, name, pre, always=False))
        self._undo.append(lambda: setattr(cls, attr, orig))

    def _count_inputs(self, node, new_inputs, *_):
        if "tree_inputs" not in self.info:
            self.info["tree_inputs"] = len(new_inputs)
            self.info["tree_non_static"] = len(getattr(node, "non_static_input_idx", None) or [])

    def _replay(self, cls):
        orig = cls.__dict__["run_graph"]
        me = self

        def run_graph(node):
            if not me.armed:
                return orig(node)
            if me.events:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                orig(node)
                b.record()
                me.graph_events.append((a, b))
                return None
            t0 = time.perf_counter()
            orig(node)
            me.ev.append(("replay", t0, time.perf_counter()))
            return None
        cls.run_graph = run_graph
        self._undo.append(lambda: setattr(cls, "run_graph", orig))

    def undo(self):
        self.disarm()
        for u in reversed(self._undo):
            u()
        self._undo.clear()


def per_token(ev: list) -> list[dict]:
    """Each token's pieces (µs): the intervals between consecutive ``procs`` starts; a piece belongs to
    the token in which it starts; ``loop``: the interval less the top-level pieces."""
    starts = [t0 for n, t0, _ in ev if n == "procs"]
    out = []
    for a, b in zip(starts, starts[1:]):
        d = {"token": (b - a) * 1e6}
        for n, t0, t1 in ev:
            if a <= t0 < b:
                d[n] = d.get(n, 0.0) + (t1 - t0) * 1e6
        d["loop"] = d["token"] - sum(d.get(n, 0.0) for n in TOP)
        out.append(d)
    return out


def medians(tokens: list[dict]) -> dict:
    names = sorted({k for t in tokens for k in t})
    return {n: round(statistics.median(t.get(n, 0.0) for t in tokens), 1) for n in names}


def _cache_bytes(cache) -> int:
    from validation.measure.generate_run import _cache_bytes as cb
    return cb(cache)


def case(model, batch, prompt, new, cache, reps, stamped, vocab, device) -> dict:
    from transformers import LogitsProcessorList

    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    ids = torch.randint(3, vocab, (batch, prompt), device=device)
    kw = dict(do_sample=False, attention_mask=torch.ones_like(ids), pad_token_id=0, use_cache=True,
              return_dict_in_generate=True, cache_implementation="static" if cache == "static" else None)

    def call(n, stamp=None):
        sync()
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=n, min_new_tokens=n,
                             logits_processor=LogitsProcessorList([stamp] if stamp else []), **kw)
        sync()
        return (time.perf_counter() - t0) * 1e3, out
    row: dict = {}
    s = Stamps()
    try:
        return _case(model, batch, prompt, new, cache, reps, stamped, s, call, cuda, sync, row)
    finally:
        s.undo()


def _case(model, batch, prompt, new, cache, reps, stamped, s, call, cuda, sync, row) -> dict:
    from validation.measure.host_drift import python_us, token_stamp
    with torch.no_grad():
        for _ in range(2):
            call(new)
            call(1)
        walls, ttfts, steps, probes, out = [], [], [], [], None
        for _ in range(reps):
            probes.append(round(python_us(), 1))
            ttfts.append(call(1)[0])
            st = token_stamp()
            out = None
            w, out = call(new, st)
            walls.append(w)
            steps.append([(b - a) * 1e3 for a, b in zip(st.t, st.t[1:])])
        kv, cache_class = _cache_bytes(out.past_key_values), type(out.past_key_values).__name__
        out = None
        runs, info = [], {}
        for _ in range(stamped):
            s.arm(model)
            try:
                call(new)
            finally:
                s.disarm()
            runs.append(per_token(s.ev))
        info.update(s.info)
        if cuda and cache == "static":
            s.arm(model, events=True)
            try:
                call(new)
                sync()
            finally:
                s.disarm()
            spans = [a.elapsed_time(b) * 1e3 for a, b in s.graph_events]
            if spans:
                row["graph_device_us"] = round(statistics.median(spans[1:] or spans), 1)
                row["graph_replays"] = len(spans)
    best = min(runs, key=lambda r: statistics.mean(t["token"] for t in r)) if runs and all(runs) else []
    col = lambda name: [round(statistics.median(c), 4) for c in zip(*[[t.get(name, 0.0) / 1e3 for t in r] for r in runs])]
    med = lambda xs: {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3),
                      "max": round(max(xs), 3), "n": len(xs)}
    return {**row, "kind": "generate", "batch": batch, "prompt": prompt, "new": new, "cache": cache,
            "mode": "compiled" if cache == "static" else "eager", "wall_ms": med(walls), "ttft_ms": med(ttfts),
            "token_ms": [round(statistics.median(c), 4) for c in zip(*steps)],
            "token_ms_reps": [[round(t, 4) for t in s] for s in steps], "python_us_reps": probes,
            "statistic": "fastest rep", "forward_host_ms": col("call") if runs and all(runs) else [],
            "prep_host_ms": col("prep") if runs and all(runs) else [],
            "parts": medians(best) if best else {}, "parts_stamped_calls": len(runs), **info,
            "holds_previous_output": False, "kv_cache_bytes": kv,
            "cache_class": cache_class}


def _tiny():
    import transformers
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                                   eos_token_id=2)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="hf:llama-3.2-1b")
    ap.add_argument("--batches", default="1")
    ap.add_argument("--caches", default="static,dynamic")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3, help="timed calls (token stamp only)")
    ap.add_argument("--stamped", type=int, default=2, help="calls with every piece stamped")
    ap.add_argument("--tiny", action="store_true", help="CPU dry run: a one-layer Llama, prompt 8, 4 new")
    a = ap.parse_args(argv)
    if a.tiny:
        module, name, device, a.prompt, a.new = _tiny(), "tiny-llama", "cpu", 8, 4
    else:
        from gpusim.models import zoo
        module, _ = zoo.build(a.model, device="cuda", dtype=torch.bfloat16)
        name, device = a.model, "cuda"
    module.config.use_cache = True
    with open(a.out, "a") as f:
        if device == "cuda":
            from validation.measure.decode_run import environment
            env = environment()
        else:
            env = {"kind": "environment", "gpu": "cpu (dry run)", "torch": torch.__version__}
        f.write(json.dumps({**env, "command": " ".join(sys.argv), "dtype": "bfloat16",
                            "transformers": __import__("transformers").__version__}) + "\n")
        f.flush()
        for c in a.caches.split(","):
            for b in (int(x) for x in a.batches.split(",")):
                try:
                    row = {"model": name, "dtype": "bfloat16",
                           **case(module, b, a.prompt, a.new, c, a.reps, a.stamped, module.config.vocab_size, device)}
                except Exception as e:  # noqa: BLE001 - record the failure and go on
                    row = {"model": name, "kind": "generate_parts_error", "batch": b, "cache": c,
                           "error": f"{type(e).__name__}: {str(e)[:300]}"}
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(json.dumps({k: v for k, v in row.items() if not k.startswith("token_ms")
                                  and k not in ("forward_host_ms", "prep_host_ms")})[:600], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
