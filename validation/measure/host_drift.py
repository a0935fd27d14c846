"""Does the host's eager speed drift within a lease, and does a generate's time per token follow it?

Samples, in one process, every few seconds for ``--seconds``:
- the host's own speed: a fixed pure-Python workload (no torch), the wall of one eager ``torch.add``
  on the GPU in a tight loop, and gpusim's two reference forwards (the figures ``eager_forward_factor``
  is fitted from: :mod:`validation.measure.reference_forwards`);
- the workload people score: an eager (dynamic cache) greedy ``generate`` of the zoo's Llama-3.2-1B,
  its median interval between tokens; after ``--compile-after`` seconds also the static-cache compiled
  path (compiled once, then sampled like the rest);
- the machine: CPU time by state from /proc/stat over the interval (user, system, idle, steal), the
  load average, the mean reported MHz, the process's RSS and the garbage collector's counts.

Each sample is one JSONL record, written as it is measured; the environment is the first line.

    python3 -m validation.measure.host_drift --out OUT.jsonl --seconds 150 --compile-after 70
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time

import torch

from validation.measure.decode_run import environment


def _proc_stat() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def _cpu_share(a: list[int], b: list[int]) -> dict:
    d = [y - x for x, y in zip(a, b)]
    tot = max(sum(d), 1)
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    return {n: round(d[i] / tot, 4) for i, n in enumerate(names) if i < len(d)}


def _mhz() -> float | None:
    try:
        v = [float(l.split(":")[1]) for l in open("/proc/cpuinfo") if l.startswith("cpu MHz")]
        return round(statistics.mean(v), 1) if v else None
    except OSError:
        return None


def _rss_mb() -> float | None:
    for l in open("/proc/self/status"):
        if l.startswith("VmRSS"):
            return int(l.split()[1]) / 1024
    return None


def python_us(n: int = 20000) -> float:
    """A fixed pure-Python workload: n calls of a small function, best of 3 (us)."""
    def f(a, b):
        return a * b + 1
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        s = 0
        for i in range(n):
            s += f(i, 3)
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def add_us(loop: int = 200) -> float:
    x = torch.ones(8, device="cuda")
    for _ in range(20):
        x.add(1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(loop):
        x.add(1)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / loop * 1e6


def token_stamp():
    """A logits processor that reads the host's clock once a token (generate calls it every step):
    its ``t`` holds the stamps; consecutive stamps are the time per output token."""
    from transformers import LogitsProcessor

    class Stamp(LogitsProcessor):
        def __init__(self):
            self.t = []

        def __call__(self, input_ids, scores):
            self.t.append(time.perf_counter())
            return scores
    return Stamp()


def token_ms(model, ids, new: int, static: bool) -> float:
    from transformers import LogitsProcessorList
    st = token_stamp()
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                       do_sample=False, pad_token_id=0, use_cache=True,
                       cache_implementation="static" if static else None,
                       logits_processor=LogitsProcessorList([st]))
    torch.cuda.synchronize()
    return statistics.median((b - a) * 1e3 for a, b in zip(st.t, st.t[1:]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=150)
    ap.add_argument("--compile-after", type=float, default=70)
    ap.add_argument("--model", default="hf:llama-3.2-1b")
    ap.add_argument("--new", type=int, default=32)
    a = ap.parse_args(argv)
    from gpusim.models import zoo
    from validation.measure.reference_forwards import reference_walls
    module, _ = zoo.build(a.model, device="cuda", dtype=torch.bfloat16)
    module.config.use_cache = True
    ids = torch.randint(3, module.config.vocab_size, (1, 128), device="cuda")
    token_ms(module, ids, a.new, False)
    start = time.perf_counter()
    compiled = False
    with open(a.out, "a") as f:
        f.write(json.dumps({**environment(), "what": "host_drift", "model": a.model,
                            "transformers": __import__("transformers").__version__}) + "\n")
        s0 = _proc_stat()
        while time.perf_counter() - start < a.seconds:
            if not compiled and time.perf_counter() - start >= a.compile_after:
                t0 = time.perf_counter()
                token_ms(module, ids, a.new, True)
                token_ms(module, ids, a.new, True)
                compiled = True
                f.write(json.dumps({"event": "compiled static path", "t_s": round(t0 - start, 2),
                                    "compile_s": round(time.perf_counter() - t0, 2)}) + "\n")
            row = {"t_s": round(time.perf_counter() - start, 2), "python_us": round(python_us(), 1),
                   "add_us": round(add_us(), 2)}
            row.update({f"ref_{k}_us": round(v, 1) for k, v in reference_walls().items()})
            row["eager_token_ms"] = round(token_ms(module, ids, a.new, False), 3)
            if compiled:
                row["static_token_ms"] = round(token_ms(module, ids, a.new, True), 3)
            s1 = _proc_stat()
            row.update({"cpu": _cpu_share(s0, s1), "loadavg": open("/proc/loadavg").read().split()[:3],
                        "mhz": _mhz(), "rss_mb": _rss_mb(), "gc_count": list(gc.get_count())})
            s0 = s1
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
