"""The compiled call of a whole decoder, piece by piece, against the reduce-overhead figures of its lease's
host profile (issue 34): validation/measure/generate_parts.py's static records stamp the call that
``generate()`` makes each token (Dynamo's guards and frame, AOTAutograd's wrapper, Inductor's
the CUDA-graph tree's manager and node, the replay; ``outside``: the call less the tree manager's run). gpusim prices that call as
``cudagraph_tree_call_us`` (a one-input, one-matmul reduce-overhead call: calibrate's probe) +
``cudagraph_tree_input_us`` per further tensor input + ``cudagraph_launch_node_us`` per graph node
(:func:`gpusim.predict.generate.dynamo_entry_us` and the timeline's replay). What a decoder's call costs
beyond that (``residual``) is printed per model, with each stamped piece, and its median in units of the
host's ``cudagraph_tree_call_us`` (the probe of the same kind of call).

    python3 -m validation.fit.fit_model_call RECORDS.jsonl HOST.toml
"""

from __future__ import annotations

import statistics
import sys

from validation.records.jsonl import env_records
from validation.score.generate_accuracy import CONTENDED, GPUS, ROOT


def rows(path: str, host: str) -> list[dict]:
    from gpusim.hw.host import load_host
    from gpusim.predict.generate import generate_runs
    h = load_host(host)
    out = []
    recs = env_records(path, "generate", ROOT)
    quiet = min(p for _, r, _ in recs for p in r.get("python_us_reps") or [float("inf")])
    for env, r, _ in recs:
        if r.get("mode") != "compiled" or not r.get("parts"):
            continue
        (g,) = generate_runs(r["model"], [("static", "compiled")], r["batch"], r["prompt"], r["new"],
                             gpu=GPUS[env["gpu"]], host=host)
        step = g.parts["steps"][g.sample_contexts[0]]
        p = r["parts"]
        inputs, nodes = step.graph.meta["inputs"], step.kernel_count
        priced = ((h.cudagraph_tree_call_us or 0.0) + max(inputs - 1, 0) * (h.cudagraph_tree_input_us or 0.0)
                  + nodes * (h.cudagraph_launch_node_us or 0.0))
        out.append({"model": r["model"], "batch": r["batch"], "inputs": inputs, "nodes": nodes,
                    "tree_inputs": r.get("tree_inputs"), "copied": r.get("tree_non_static"),
                    "call": p.get("call", 0.0), "priced": priced, "residual": p.get("call", 0.0) - priced,
                    "outside": p.get("call", 0.0) - p.get("tree", 0.0), "manager": p.get("tree", 0.0) - p.get("node", 0.0), "node": p.get("node", 0.0) - p.get("replay", 0.0),
                    "replay": p.get("replay", 0.0), "replay_priced": nodes * (h.cudagraph_launch_node_us or 0.0),
                    "host_x": round(min(r.get("python_us_reps") or [quiet]) / quiet, 2)})
    return out


def main(argv=None) -> int:
    from gpusim.hw.host import load_host
    a = argv if argv is not None else sys.argv[1:]
    path, host = a[0], a[1]
    rs = rows(path, host)
    keys = ("model", "batch", "inputs", "nodes", "copied", "call", "priced", "residual", "outside",
            "manager", "node", "replay", "replay_priced", "host_x")
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rs:
        print("| " + " | ".join(f"{r[k]:.2f}" if k == "host_x" else f"{r[k]:.0f}" if isinstance(r[k], float) else str(r[k])
                                for k in keys) + " |")
    if rs:
        h = load_host(host)
        ok = [r for r in rs if r["host_x"] <= CONTENDED]
        med = statistics.median(r["residual"] for r in ok)
        print(f"\nresidual: median {med:.1f} us over the {len(ok)} of {len(rs)} calls whose probes were quiet (host_x: the "
              f"record's quietest pure-Python probe over the file's, at most {CONTENDED}) = {med / h.cudagraph_tree_call_us:.4f} "
              f"x this host's cudagraph_tree_call_us {h.cudagraph_tree_call_us:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
