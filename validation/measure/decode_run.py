"""Eager decode steps of a Hugging Face decoder on a GPU, with a DynamicCache: the wall per token,
the kernels per token and their device time, at several batches and contexts; one JSONL line a
case, the environment first. What gpusim's decode-step prediction (a step with the cache as an
argument, docs/llm.md) is scored against.

    python3 -m validation.measure.decode_run --out OUT.jsonl [--model hf:llama-3.2-1b]
        [--batches 1,8] [--contexts 512,2048] [--steps 20]

Each case: the zoo's model (random weights, bf16, eval) on cuda; a prompt of `context` tokens is
prefilled (one forward with use_cache=True); then `steps` decode steps, each the next token's
forward with the cache and the argmax of its logits (a host read, as generate's loop syncs per
token), timed wall per step after 3 warm-up steps (median, min, max). One more step under the
profiler gives its kernels (count, device-time sum, the 12 longest kernel names)."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch


def environment() -> dict:
    def run(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    return {"kind": "environment", "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
            "driver": run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()[:1],
            "python": sys.version.split()[0], "command": " ".join(sys.argv)}


def decode_case(model, batch: int, context: int, steps: int, vocab: int) -> dict:
    from transformers import DynamicCache
    dev = "cuda"
    ids = torch.randint(3, vocab, (batch, context), device=dev)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        out = model(ids, past_key_values=cache, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        walls = []
        for i in range(steps + 3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model(nxt, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
            nxt.cpu()                       # the host reads the token, as generate's loop does
            if i >= 3:
                walls.append((time.perf_counter() - t0) * 1e6)
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out = model(nxt, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
            nxt.cpu()
            torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    top = sorted(kernels, key=lambda e: -e.device_time)[:12]
    return {"kind": "decode", "batch": batch, "context": context, "cache_len_after": cache.get_seq_length(),
            "wall_us": {"median": round(statistics.median(walls), 1), "min": round(min(walls), 1),
                        "max": round(max(walls), 1), "n": len(walls)},
            "kernel_count": len(kernels), "kernel_sum_us": round(sum(e.device_time for e in kernels), 1),
            "top_kernels": [[e.name[:120], round(e.device_time, 2)] for e in top]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="hf:llama-3.2-1b")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--contexts", default="512,2048")
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args(argv)
    from gpusim.models import zoo
    module, _ = zoo.build(a.model, device="cuda", dtype=torch.bfloat16)
    module.config.use_cache = True
    vocab = module.config.vocab_size
    with open(a.out, "a") as f:
        f.write(json.dumps({**environment(), "model": a.model, "dtype": "bfloat16"}) + "\n")
        for b in (int(x) for x in a.batches.split(",")):
            for c in (int(x) for x in a.contexts.split(",")):
                row = {"model": a.model, "dtype": "bfloat16", **decode_case(module, b, c, a.steps, vocab)}
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(f"{a.model} batch {b} context {c}: wall {row['wall_us']['median']:.0f} us, "
                      f"{row['kernel_count']} kernels, {row['kernel_sum_us']:.0f} us of kernels", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
