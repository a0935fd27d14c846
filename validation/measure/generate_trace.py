"""One short Hugging Face ``generate()`` call under the profiler, kept as a Chrome trace: where
the host and the GPU are, token by token (what the per-name sums of ``generate_run`` cannot show:
which host work waits for the GPU and which the GPU waits for).

    python3 -m validation.measure.generate_trace --out DIR [--model hf:llama-3.2-1b] [--batch 1]
        [--caches dynamic,static] [--prompt 512] [--new 6]

For each cache: the model (the zoo's, random weights, bf16) warms up with two calls of
``--prompt`` + 32 new tokens at the same lengths (the static path compiles and records its CUDA
graphs there), then one call of ``--new`` tokens runs under the profiler (CPU and CUDA
activities, shapes off): ``DIR/<model>-b<batch>-<cache>.json.gz``, and one JSONL line per call in
``DIR/traces.jsonl`` (environment first) with its wall time.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import time

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="hf:llama-3.2-1b")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--caches", default="dynamic,static")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=6)
    a = ap.parse_args(argv)
    from torch.profiler import ProfilerActivity, profile

    from gpusim.models import zoo
    from validation.measure.decode_run import environment
    os.makedirs(a.out, exist_ok=True)
    module, _ = zoo.build(a.model, device="cuda", dtype=torch.bfloat16)
    module.config.use_cache = True
    ids = torch.randint(3, module.config.vocab_size, (a.batch, a.prompt), device="cuda")
    with open(os.path.join(a.out, "traces.jsonl"), "a") as log:
        log.write(json.dumps({**environment(), "transformers": __import__("transformers").__version__}) + "\n")
        for cache in a.caches.split(","):
            kw = dict(do_sample=False, attention_mask=torch.ones_like(ids), pad_token_id=0, use_cache=True,
                      cache_implementation="static" if cache == "static" else None)

            def call(n):
                return module.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)
            with torch.no_grad():
                for _ in range(2):
                    call(32)
                    call(a.new)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    t0 = time.perf_counter()
                    call(a.new)
                    torch.cuda.synchronize()
                    wall = (time.perf_counter() - t0) * 1e3
            name = f"{a.model.replace(':', '_')}-b{a.batch}-{cache}.json"
            path = os.path.join(a.out, name)
            prof.export_chrome_trace(path)
            with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.remove(path)
            log.write(json.dumps({"model": a.model, "batch": a.batch, "cache": cache, "prompt": a.prompt,
                                  "new": a.new, "profiled_wall_ms": round(wall, 2), "trace": name + ".gz"}) + "\n")
            log.flush()
            torch.compiler.reset()
    return 0


if __name__ == "__main__":
    sys.exit(main())
