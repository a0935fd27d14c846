"""An eager generate() token read off a recorded profiler trace (validation.measure.generate_trace): the host's
top-level aten ops by name (count and CPU µs per token) and the token split at its decoder layers (from the tail's
argmax to the embedding, the embedding to layer 0's attention, each layer's attention to the next one's, the last
attention to the argmax), the first and last tokens left out. Under the profiler every op is slower (~2x a token);
what the split shows is where a token's host time goes, relative. docs/eager_token.md.

    python3 -m validation.score.eager_layers validation/results/generate/traces/hf_llama-3.2-1b-b1-dynamic.json.gz
"""

from __future__ import annotations

import collections
import gzip
import json
import statistics
import sys


def top_level_ops(path: str) -> list[dict]:
    """The trace's top-level ``cpu_op`` events (no other op around them) of its busiest thread, in time order."""
    ev = json.load(gzip.open(path) if path.endswith(".gz") else open(path))["traceEvents"]
    ops = sorted((e for e in ev if e.get("cat") == "cpu_op"), key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    top, end = [], {}
    for e in ops:
        if e["ts"] >= end.get(e["tid"], -1):
            top.append(e)
            end[e["tid"]] = e["ts"] + e["dur"]
    main = collections.Counter(e["tid"] for e in top).most_common(1)[0][0]
    return [e for e in top if e["tid"] == main]


def split(top: list[dict]) -> dict:
    """Per full token (µs, medians): ``before`` (argmax to embedding: generate's tail after the argmax and
    prepare_inputs), ``head`` (embedding to layer 0's attention), ``layer`` (attention to attention),
    ``end`` (the last attention to the argmax), and the ops by name (count, µs per token)."""
    idx = lambda name: [i for i, e in enumerate(top) if e["name"] == name]  # noqa: E731
    emb, att, arg = idx("aten::embedding"), idx("aten::scaled_dot_product_attention"), idx("aten::argmax")
    layers = len([i for i in att if emb[1] < i < [a for a in arg if a > emb[1]][0]])
    parts = collections.defaultdict(list)
    for e0 in emb[1:-1]:
        a = [i for i in att if i > e0][:layers]
        am = [i for i in arg if i > e0][0]
        prev = [i for i in arg if i < e0][-1]
        ts = lambda i: top[i]["ts"]  # noqa: E731
        parts["before"].append(ts(e0) - ts(prev))
        parts["head"].append(ts(a[0]) - ts(e0))
        parts["layer"] += [ts(b) - ts(x) for x, b in zip(a, a[1:])]
        parts["end"].append(ts(am) - ts(a[-1]))
        parts["token"].append(ts([i for i in arg if i > am][0]) - ts(am) if am != arg[-1] else None)
    by = collections.defaultdict(lambda: [0, 0.0])
    lo, hi = arg[1] + 1, arg[-1] + 1
    for e in top[lo:hi]:
        by[e["name"]][0] += 1
        by[e["name"]][1] += e["dur"]
    n = len(arg) - 2
    out = {k: statistics.median([x for x in v if x is not None]) for k, v in parts.items()}
    out["layers"] = layers
    out["ops"] = {k: (c / n, t / n) for k, (c, t) in sorted(by.items(), key=lambda kv: -kv[1][1])}
    return out


def main(argv=None) -> int:
    for path in (argv if argv is not None else sys.argv[1:]):
        s = split(top_level_ops(path))
        print(f"{path}: token {s['token']:.0f} µs (profiled), {s['layers']} layers; before {s['before']:.0f}, "
              f"head {s['head']:.0f}, layer {s['layer']:.0f} each, end {s['end']:.0f}")
        print("| op | per token | µs per token | µs per call |\n|---|---|---|---|")
        for k, (c, t) in list(s["ops"].items())[:20]:
            print(f"| {k} | {c:.0f} | {t:.0f} | {t / c:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
