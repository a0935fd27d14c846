"""A ``generate()`` token piece by piece: the records of validation/measure/generate_parts.py (every
piece of generate's loop stamped in the same calls, the compiled call split at Dynamo's side, the CUDA-
graph tree and the replay, the replayed graph's device span by CUDA events) against gpusim's prediction
of the same token in the same pieces, on the record's host profile (its lease's own: lease_hosts.json).

    python3 -m validation.score.token_parts [RECORDS.jsonl ...]

Measured groups (µs, medians over the tokens of the fastest stamped call): ``prep``
(``prepare_inputs_for_generation``), ``call`` (the compiled call, or ``__call__`` eager) and inside it
``outside`` (the call less the CUDA-graph tree manager's run: Dynamo's guards and frame, AOTAutograd's
and Inductor's wrappers, the output), ``tree`` (the tree manager's and node's Python, the static-input
check, the copy-in and the output reconstruction: its run less the replay), ``replay``
(``cudaGraphLaunch``; Inductor's ``CompiledFxGraph.__call__``, also stamped, does not enclose the tree's
run in torch 2.11 and is not used); ``tail`` (generate's
own host work after the call: ``update`` + ``procs`` + ``crit`` + ``loop``), ``stop`` (the stop check,
its wait for the GPU included), and ``graph`` (the replayed graph's device span)."""

from __future__ import annotations

import json
import os
import sys

from validation.score.generate_accuracy import GPUS, RECORDS, ROOT, pct

DEFAULT = os.path.join(RECORDS, "h200-2026-11-28n-parts.jsonl")


def measured_parts(r: dict) -> dict:
    """A record's ``parts`` grouped as the prediction's (see the module docstring); absent pieces 0."""
    p = r.get("parts") or {}
    g = lambda k: p.get(k, 0.0)
    out = {"token": g("token"), "prep": g("prep"), "call": g("call"),
           "tail": g("update") + g("procs") + g("crit") + g("loop"), "stop": g("stop")}
    if "tree" in p:
        out["outside"] = g("call") - g("tree")
        out["tree"] = g("tree") - g("replay")
        out["replay"] = g("replay")
    if r.get("graph_device_us") is not None:
        out["graph"] = r["graph_device_us"]
    return out


def predicted_parts(g) -> dict:
    """The same groups of a :class:`~gpusim.predict.generate.GenerateResult`'s first decode token."""
    from gpusim.predict.generate import dynamo_entry_us, part_host_us
    step = g.parts["steps"][g.sample_contexts[0]]
    prep, tail = g.parts["prep"], g.parts["tail"]
    out = {"token": g.sample_token_us[0], "prep": part_host_us(prep),
           "call": dynamo_entry_us(step) + step.timeline.host_us, "tail": part_host_us(tail),
           "graph": step.timeline.span_us}      # the replay's span: its kernels and the gaps between them
    return out


def table(paths: list[str]) -> str:
    from gpusim.predict.generate import generate_runs
    from validation.records.jsonl import env_records
    leases = json.load(open(os.path.join(RECORDS, "lease_hosts.json")))
    rows = ["| model | batch | cache, mode | " + " | ".join(f"{k} µs (pred / meas)" for k in
                                                         ("token", "prep", "call", "tail", "graph")) + " | inside the call (meas: outside the tree, tree, replay) | stop (meas) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for path in paths:
        host = os.path.join(ROOT, leases.get(os.path.basename(path), "")) if os.path.basename(path) in leases else None
        for env, r, _ in env_records(path, "generate", ROOT):
            if not r.get("parts"):
                continue
            mode = "compiled" if r["mode"] == "compiled" else "eager"
            (g,) = generate_runs(r["model"], [(r["cache"], mode)], r["batch"], r["prompt"], r["new"],
                                 gpu=GPUS[env["gpu"]], host=host or "h200-sxm-host")
            m, p = measured_parts(r), predicted_parts(g)
            cells = [f"{p[k]:.0f} / {m[k]:.0f} ({pct(p[k], m[k])})" if k in m else f"{p[k]:.0f} / -"
                     for k in ("token", "prep", "call", "tail", "graph")]
            inner = ", ".join(f"{m[k]:.0f}" for k in ("outside", "tree", "replay") if k in m) or "-"
            rows.append(f"| {r['model']} | {r['batch']} | {r['cache']}, {mode} | " + " | ".join(cells)
                        + f" | {inner} | {m['stop']:.0f} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    paths = (argv if argv is not None else sys.argv[1:]) or [DEFAULT]
    print(table(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
