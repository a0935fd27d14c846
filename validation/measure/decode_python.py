"""The Python of one eager decode step of a zoo decoder, run for real on this machine's CPU (no GPU needed):
what it calls and how long its own Python takes, against what gpusim captures and prices (docs/eager_token.md).

    python3 -m validation.measure.decode_python hf:qwen2-0.5b,hf:llama-3.2-1b [--context 512] [--reps 40]

For each model (the zoo's full configuration, bf16, random weights on CPU; a DynamicCache of ``--context`` tokens,
the inputs generate passes at decode):

- ``real``: the step's nn.Module calls (a global forward pre-hook), top-level torch calls (gpusim's own counting mode,
  :class:`gpusim.capture.pycalls.TorchCalls`) and aten ops, as transformers runs them; ``captured``: the same counts of
  gpusim's capture of that step on meta tensors (what ``gpusim.hw.host.python_us`` prices);
- ``python_us``: the step's own Python: every torch call answered from a recording of the same step (no op runs), so
  the wall is the model's Python plus the replay mode's cost per call, measured on a loop of replayed ``torch.add``
  calls and taken out; the fastest of ``--reps`` steps (the collector off). In units of this CPU's ``eager_module_us``
  probe (calibrate's: ``nn.Sequential`` of 64 vs 1 ``nn.Identity``, per extra call), beside what the host law
  (``python_module_call_us`` and ``python_torch_call_us`` in units of ``eager_module_us``: hosts/reference.toml) gives
  for the captured counts. A CPU shared with other work makes the probe noisy: the units are the fastest of many
  probes, and the line says so.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import time

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from gpusim.capture.pycalls import TorchCalls


class _Record(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.out = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        r = func(*args, **(kwargs or {}))
        self.out.append(r)
        return r


class _Replay(TorchFunctionMode):
    def __init__(self, out):
        super().__init__()
        self.out, self.i = out, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        r = self.out[self.i]
        self.i += 1
        return r


class _Aten(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def _best_us(f, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best * 1e6


def module_call_us(rounds: int = 5) -> float:
    """This CPU's ``eager_module_us``: a call of ``nn.Sequential`` of 64 vs 1 ``nn.Identity``, per extra module (the
    fastest of ``rounds`` probes)."""
    one = torch.nn.Sequential(torch.nn.Identity())
    many = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(64)])
    x = torch.ones(1)

    def loop(m):
        def f():
            for _ in range(100):
                m(x)
        return f
    return min((_best_us(loop(many), 30) - _best_us(loop(one), 30)) / 100 / 63 for _ in range(rounds))


def replay_call_us(n: int = 2000) -> float:
    """The replay mode's own cost per torch call (a replayed ``torch.add`` less the bare loop)."""
    x = torch.ones(1)
    out = [x] * n

    def replayed():
        with _Replay(out):
            for _ in range(n):
                torch.add(x, 1)

    def bare():
        for _ in range(n):
            pass
    return (_best_us(replayed, 30) - _best_us(bare, 30)) / n


def _step(name: str, context: int, device: str):
    """(module, forward fn, a fresh-args factory) of the zoo decoder ``name``'s decode step."""
    from gpusim.models import zoo
    from gpusim.predict import decode
    module, _ = zoo.build(name, device=device, dtype=torch.bfloat16)
    module = module.eval()
    module.config.use_cache = True
    if device == "meta":
        return module, decode.forward_fn(module), lambda: decode.forward_args(
            module, "dynamic", 1, 1, context, context + 1, torch.bfloat16)
    cfg = module.config

    def args():
        from transformers import DynamicCache
        cache = DynamicCache(config=cfg)
        pos = torch.arange(context)
        for layer in range(cfg.num_hidden_layers):
            kv = torch.zeros(1, decode.kv_heads(cfg), context, decode.head_dim(cfg), dtype=torch.bfloat16)
            cache.update(kv, kv, layer, {"cache_position": pos})
        return (torch.tensor([[5]]), cache, torch.ones(1, context + 1, dtype=torch.long),
                torch.tensor([[context]]))
    return module, decode.forward_fn(module), args


def measure(name: str, context: int = 512, reps: int = 40) -> dict:
    from gpusim.capture.tracing import capture
    from gpusim.hw.host import load_host
    _, fwd, args = _step(name, context, "cpu")
    modules = [0]
    hook = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda m, a: modules.__setitem__(0, modules[0] + 1))
    calls, aten, rec = TorchCalls(), _Aten(), _Record()
    with torch.no_grad():
        fwd(*args())        # the first call runs one-time Python (lazy look-ups): not a decode step's
        modules[0] = 0
        try:
            with calls:
                fwd(*args())
        finally:
            hook.remove()
        with aten:
            fwd(*args())
        a = args()
        with rec:
            fwd(*a)
        steps = []
        for _ in range(reps):
            a = args()
            rep = _Replay(rec.out)
            gc.disable()
            try:
                t = time.perf_counter()
                with rep:
                    fwd(*a)
                steps.append((time.perf_counter() - t) * 1e6)
            finally:
                gc.enable()
            assert rep.i == len(rec.out), "the replayed step made other torch calls than the recorded one"
    per_call, eum = replay_call_us(), module_call_us()
    py = min(steps) - len(rec.out) * per_call
    _, mfwd, margs = _step(name, context, "meta")
    g = capture(mfwd, margs(), name=f"{name} decode")
    ref = load_host()
    law = (g.meta["module_calls"] * ref.python_module_call_us
           + g.meta["torch_calls"] * ref.python_torch_call_us) / ref.eager_module_us
    kernels = sum(n for op, n in aten.ops.items() if not _is_view(op))
    return {"model": name, "context": context,
            "real": {"module_calls": modules[0], "torch_calls": calls.calls, "aten_ops": sum(aten.ops.values()),
                     "aten_non_view": kernels},
            "captured": {"module_calls": g.meta["module_calls"], "torch_calls": g.meta["torch_calls"]},
            "python_us": round(py, 1), "replay_call_us": round(per_call, 3), "eager_module_us": round(eum, 3),
            "python_in_module_units": round(py / eum, 1), "law_in_module_units": round(law, 1),
            "replayed_steps_us": [round(s, 1) for s in sorted(steps)[:5]],
            "machine": "this CPU (shared: the probes are the fastest of many)"}


def _is_view(op: str) -> bool:
    """An aten view (no kernel, no bytes: gpusim's registry's views) or a host read."""
    from gpusim.graph import ops as gops
    return op in gops._VIEWS or op in ("slice", "_local_scalar_dense")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--reps", type=int, default=40)
    a = ap.parse_args(argv)
    for name in a.models.split(","):
        print(json.dumps(measure(name, a.context, a.reps)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
