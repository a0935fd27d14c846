"""One static compiled token of a recorded ``generate()`` trace (validation/measure/generate_trace.py,
validation/results/generate/traces/), part by part, against gpusim's prediction of the same token.

The static path's decode token is one compiled forward replayed as a CUDA graph: a window from one
``TorchDynamo Cache Lookup`` to the next holds, in order on the host, Dynamo's entry (the guards),
the compiled region (the CUDA-graph tree's wrapper, the copy-in of the non-static inputs, the
``cudaGraphLaunch``), generate's tail (the logits' copy, the processors, the argmax, the stopping
criteria, ending in the ``.item()`` that reads whether to stop: the host's sync), and
``prepare_inputs_for_generation`` (the inputs' slices, the 4D mask); on the GPU the graph's
kernels, then the eager kernels of the tail and the inputs. What the host does outside any
top-level aten op is Python (generate's loop, transformers' frames) plus the profiler's own cost.

    python3 -m validation.score.token_trace TRACE.json.gz [--host HOST.toml --model hf:gemma-2b
        --batch 8 --prompt 512 --new 6]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys

DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def _events(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _top_level(ops: list[dict]) -> list[dict]:
    """The CPU ops not nested in another (the profiler's events of one thread nest by time)."""
    out, end = [], float("-inf")
    for e in sorted(ops, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= end:
            out.append(e)
            end = e["ts"] + e["dur"]
    return out


def static_tokens(path: str) -> list[dict]:
    """Each full window between two Dynamo entries of a static generate trace (the prefill and
    the last token, which have no full window, left out): times in µs.

    ``token``: the window; host parts ``dynamo`` (the cache lookup), ``call`` (the compiled
    region; ``launch`` of it the ``cudaGraphLaunch``), ``tail`` (from the call's return to the
    end of the stop check's ``.item()``), ``wait`` (of the tail, the part of that read spent
    waiting for the GPU), ``prep`` (from the read to the next entry), ``python`` (the window's
    host time outside any top-level aten op or runtime call); the GPU's ``graph_kernels``,
    ``graph_sum``, ``graph_span`` (the replay's first start to last end), ``other_kernels``,
    ``other_sum`` (the tail's and inputs' eager kernels and copies), ``gpu_idle`` (the window less
    every device event's duration) and ``bound``: "host" when the GPU had finished the graph
    before the host's read (the token is the host's), else "gpu"."""
    ev = _events(path)
    lookups = sorted((e for e in ev if e["name"] == "TorchDynamo Cache Lookup"), key=lambda e: e["ts"])
    regions = sorted((e for e in ev if e["name"].startswith("Torch-Compiled Region")), key=lambda e: e["ts"])
    launches = {e["args"]["correlation"]: e for e in ev if e["name"] == "cudaGraphLaunch"}
    syncs = sorted((e for e in ev if e["name"] == "aten::_local_scalar_dense"), key=lambda e: e["ts"])
    device = sorted((e for e in ev if e.get("cat") in DEVICE), key=lambda e: e["ts"])
    host = [e for e in ev if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver")]
    out = []
    for a, b in zip(lookups, lookups[1:]):
        lo, hi = a["ts"], b["ts"]
        region = next(r for r in regions if lo <= r["ts"] < hi)
        launch = next(e for e in launches.values() if region["ts"] <= e["ts"] < region["ts"] + region["dur"])
        ret = region["ts"] + region["dur"]
        sync = [s for s in syncs if ret <= s["ts"] < hi][-1]
        read = sync["ts"] + sync["dur"]
        graph = [k for k in device if k["args"].get("correlation") == launch["args"]["correlation"]]
        other = [k for k in device if lo <= k["ts"] < hi and k not in graph]
        g_end = max(k["ts"] + k["dur"] for k in graph)
        busy = sum(k["dur"] for k in graph) + sum(k["dur"] for k in other)
        tops = _top_level([e for e in host if lo <= e["ts"] < hi])
        out.append(dict(
            token=hi - lo, dynamo=a["dur"], call=region["dur"], launch=launch["dur"],
            tail=read - ret, wait=max(0.0, min(g_end, read) - sync["ts"]), prep=hi - read,
            python=(hi - lo) - sum(min(e["ts"] + e["dur"], hi) - e["ts"] for e in tops),
            graph_kernels=len(graph), graph_sum=sum(k["dur"] for k in graph),
            graph_span=g_end - min(k["ts"] for k in graph), other_kernels=len(other),
            other_sum=sum(k["dur"] for k in other), gpu_idle=(hi - lo) - busy,
            bound="host" if g_end <= sync["ts"] else "gpu"))
    return out


def medians(tokens: list[dict]) -> dict:
    """Each figure's median over the tokens (``bound``: the most common)."""
    out = {k: statistics.median(t[k] for t in tokens) for k in tokens[0] if k != "bound"}
    out["bound"] = statistics.mode(t["bound"] for t in tokens)
    return out


def predicted_parts(model: str, batch: int, prompt: int, new: int, host, gpu: str = "h200-sxm-calibrated") -> dict:
    """gpusim's static compiled token (the first sampled context) in the trace's parts: ``dynamo``
    (:func:`~gpusim.predict.generate.dynamo_entry_us`), ``call`` (the step's host: the replay),
    ``tail`` and ``prep`` (dispatch plus the library's Python frames), the device's graph and
    eager parts, the token (the larger of the host's sum and the device's path:
    :func:`~gpusim.predict.generate.token_us`) and ``bound``: which of the two it is."""
    from gpusim.predict.generate import dynamo_entry_us, generate, part_host_us
    g = generate(model, batch, prompt, new, gpu=gpu, cache="static", mode="compiled", host=host)
    step = g.parts["steps"][g.sample_contexts[0]]
    prep, tail = g.parts["prep"], g.parts["tail"]
    entry = part_host_us(prep) + dynamo_entry_us(step)
    on_host = entry + step.timeline.host_us + part_host_us(tail)
    on_gpu = entry + step.timeline.latency_us + tail.device_us
    return dict(bound="host" if on_host >= on_gpu else "gpu", token=g.sample_token_us[0], dynamo=dynamo_entry_us(step),
                call=step.timeline.host_us,
                tail=part_host_us(tail), prep=part_host_us(prep), graph_kernels=step.kernel_count,
                graph_sum=step.device_us, other_kernels=tail.kernel_count + prep.kernel_count,
                other_sum=tail.device_us + prep.device_us)


def table(meas: dict, pred: dict | None = None) -> str:
    rows = ["| part | trace (median over tokens) | predicted |", "|---|---|---|"]
    for k in ("token", "dynamo", "call", "launch", "tail", "wait", "prep", "python", "graph_kernels", "graph_sum",
              "graph_span", "other_kernels", "other_sum", "gpu_idle", "bound"):
        p = pred.get(k) if pred else None
        fmt = (lambda x: x) if k == "bound" else (lambda x: f"{x:.0f}")
        rows.append(f"| {k} | {fmt(meas[k])} | {'' if p is None else fmt(p)} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--host", help="a host profile: also print gpusim's prediction of the token")
    ap.add_argument("--model", default="hf:gemma-2b")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=6)
    a = ap.parse_args(argv)
    toks = static_tokens(a.trace)
    for i, t in enumerate(toks, 1):
        print(f"token {i}: " + ", ".join(f"{k} {v:.0f}" if not isinstance(v, str) else f"{k} {v}" for k, v in t.items()))
    pred = predicted_parts(a.model, a.batch, a.prompt, a.new, a.host) if a.host else None
    print(table(medians(toks), pred))
    return 0


if __name__ == "__main__":
    sys.exit(main())
