"""Live tensor bytes of a real Hugging Face ``generate()`` on the CPU, op by op: where its peak is.

CPU liveness is CUDA liveness (the same aten ops free the same tensors at the same moments) minus
the CUDA caching allocator's rounding and the attention backend's own buffers, so a CPU run of a
narrow config of a zoo decoder (its architecture, batch, prompt and new tokens; narrower widths and
fewer layers, so that it runs in seconds) shows which tensors a generate call holds at its peak.
:class:`StorageTracker` (a ``TorchDispatchMode``) counts every storage an aten op creates and a
``weakref.finalize`` on the storage takes it off when the last tensor on it dies.

Two loops, both as ``validation/measure/generate_run.py``'s ``generate_case`` runs them (two warm-up
pairs ``call(new)``, ``call(1)``, then ``reps`` timed pairs ``call(1)``, ``out = call(new)``), the peak
read over the last ``call(new)``:

* ``as_recorded``: the loop as written: ``out`` of the previous timed call is still bound while the
  next one runs (``w, out = call(new)`` rebinds it only when the call returns);
* ``clean``: ``out`` dropped before every call.

Per loop: the tracked bytes live when the measured call starts (``held_bytes``), its peak
(``peak_bytes``, absolute and above the start), the op that reaches it and the phase (``prefill``,
``decode``: inside the model's forward, else ``generate``); and gpusim's prediction of the same
call (``gpusim.generate`` on the same config, on meta): activation peak = ``peak_bytes`` less
weights, the BLAS workspace and the allocator's blocks of the resident tensors (the prefill's
``resident_overhead_bytes``), and the unrounded live-tensor peak of its parts.

    python3 -m validation.measure.cpu_liveness --model hf:llama-3.2-1b [--batch 8 --prompt 512 --new 128]
"""

from __future__ import annotations

import argparse
import json
import sys
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

#: the narrow config the CPU runs: the zoo model's architecture at these widths
NARROW = {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 4,
          "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 2048}


class StorageTracker(TorchDispatchMode):
    """Bytes of the storages aten ops created that are alive now, their peak, and the op and
    phase at the peak. An op's output on a storage one of its inputs has (a view, an in-place
    op) is not new: the weights, made before the tracker, are never counted. ``phase`` is set
    by the caller (forward hooks)."""

    def __init__(self):
        super().__init__()
        self.seen: set = set()
        self.now = 0
        self.phase = "generate"
        self.reset()

    def reset(self) -> None:
        self.peak, self.at = self.now, ("start", self.phase)

    def _free(self, key, n) -> None:
        self.seen.discard(key)
        self.now -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
                 if isinstance(t, torch.Tensor) and t.device.type == "cpu"}
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                continue
            s = t.untyped_storage()
            key, n = (s.data_ptr(), id(s)), s.nbytes()
            if n == 0 or key in self.seen or key[0] in given:     # a view or in-place: not new
                continue
            self.seen.add(key)
            self.now += n
            weakref.finalize(s, self._free, key, n)
        if self.now > self.peak:
            self.peak, self.at = self.now, (str(func), self.phase)
        return out


def narrow_model(name: str, dtype=torch.bfloat16):
    """The zoo model's config at :data:`NARROW`'s widths: (CPU module with random weights, the
    same on meta for gpusim)."""
    from transformers import AutoModelForCausalLM

    from gpusim.models import zoo
    cfg = zoo.build(name, device="meta", dtype=dtype)[0].config
    for k, v in NARROW.items():
        if hasattr(cfg, k):
            setattr(cfg, k, v)
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[:cfg.num_hidden_layers]
    cfg.use_cache = True
    torch.manual_seed(0)
    cpu = AutoModelForCausalLM.from_config(cfg).to(dtype).eval()
    with torch.device("meta"):
        meta = AutoModelForCausalLM.from_config(cfg).to(dtype).eval()
    cpu.generation_config.use_cache = meta.generation_config.use_cache = True
    return cpu, meta


def run_loop(model, batch, prompt, new, reps: int, keep_out: bool, warmups: int = 2) -> dict:
    """generate_case's loop on the CPU under the tracker (``warmups`` warm-up pairs); the last
    ``call(new)``'s figures."""
    tr = StorageTracker()
    def enter(m, a, kw):
        ids = kw.get("input_ids", a[0] if a else None)
        tr.phase = "prefill" if ids is not None and ids.shape[1] > 1 else "decode"
    hooks = [model.model.register_forward_pre_hook(enter, with_kwargs=True),
             model.model.register_forward_hook(lambda m, a, o: setattr(tr, "phase", "generate"))]
    kw = dict(do_sample=False, pad_token_id=0, use_cache=True)
    res = {}
    try:
        with torch.no_grad(), tr:
            ids = torch.randint(3, model.config.vocab_size, (batch, prompt))
            mask = torch.ones_like(ids)

            def call(n):
                return model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                      return_dict_in_generate=True, **kw)
            for _ in range(warmups):
                call(new)
                call(1)
            out = None
            for _ in range(reps):
                call(1)
                if not keep_out:
                    out = None
                held = tr.now
                tr.reset()
                out = call(new)
            res = {"held_bytes": held, "peak_bytes": tr.peak, "peak_above_start_bytes": tr.peak - held,
                   "peak_op": tr.at[0], "peak_phase": tr.at[1], "after_bytes": tr.now,
                   "returned_cache_bytes": sum(t.numel() * t.element_size() for layer in out.past_key_values.layers
                                               for t in (layer.keys, layer.values)),
                   "returned_sequences_bytes": out.sequences.numel() * out.sequences.element_size()}
    finally:
        for h in hooks:
            h.remove()
    return res


def predicted(meta, batch, prompt, new, gpu: str) -> dict:
    from gpusim.predict.generate import generate
    r = generate(meta, batch=batch, prompt=prompt, new=new, gpu=gpu)
    pre, tail = r.parts["prefill"], r.parts["tail"]
    step = list(r.parts["steps"].values())[-1]
    ws, over = pre.memory.workspace_bytes, pre.memory.resident_overhead_bytes
    return {"peak_bytes": r.peak_bytes, "weights_bytes": r.weights_bytes, "workspace_bytes": ws,
            "activation_peak_bytes": r.peak_bytes - r.weights_bytes - ws - over, "kv_cache_bytes": r.kv_cache_bytes,
            "prefill_inputs_plus_peak": pre.memory.inputs_bytes + pre.memory.peak_bytes,
            "prefill_inputs_plus_live": pre.memory.inputs_bytes + pre.memory.live_bytes,
            "prefill_peak_ops": list(pre.memory.peak_ops),
            "last_step_inputs_plus_peak": step.memory.inputs_bytes + step.memory.peak_bytes,
            "last_step_inputs_plus_live": step.memory.inputs_bytes + step.memory.live_bytes,
            "last_step_peak_ops": list(step.memory.peak_ops),
            "tail_peak": tail.memory.peak_bytes, "tail_live": tail.memory.live_bytes}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="hf:llama-3.2-1b")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--out", help="append the JSON line here")
    a = ap.parse_args(argv)
    torch.set_num_threads(2)
    cpu, meta = narrow_model(a.model)
    line = {"model": a.model, "narrow": NARROW, "batch": a.batch, "prompt": a.prompt, "new": a.new,
            "reps": a.reps, "torch": torch.__version__,
            "command": "python3 -m validation.measure.cpu_liveness " + " ".join(argv or sys.argv[1:])}
    for keep in (True, False):
        line["as_recorded" if keep else "clean"] = run_loop(cpu, a.batch, a.prompt, a.new, a.reps, keep)
    line["gpusim"] = predicted(meta, a.batch, a.prompt, a.new, a.gpu)
    text = json.dumps(line)
    print(json.dumps(line, indent=1))
    if a.out:
        with open(a.out, "a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
