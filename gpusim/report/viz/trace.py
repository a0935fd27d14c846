"""The simulated first call in Chrome's trace event format (``--trace F.json``).

Perfetto (ui.perfetto.dev) and chrome://tracing open it: a host lane (the dispatch of
each kernel), a GPU-stream lane (each kernel, with its ops, bytes, FLOPs and bound as
arguments), a lane marking when the GPU sits idle waiting on the host, and flow arrows
from each launch to its kernel. A search shows the unfused and the fused run as two
processes on one time axis. Measured kernels from a validation record can be laid beside
the predicted ones (``measured_kernels=``).
"""

from __future__ import annotations

import itertools
import json
import math

from gpusim.util.fmt import fmt_bytes, fmt_shape
from gpusim.report.viz.common import check_target, runs_of, write_atomic

# trace lanes (thread ids inside each process)
TID_HOST, TID_GPU, TID_IDLE, TID_MEASURED, TID_PHASE = 1, 2, 3, 4, 5


def record_kernels(record: dict, run: str = "eager") -> list[dict]:
    """Measured kernels ``[{"name", "us"}]`` of one run of a validation record, in launch
    order, without the harness's own ``gpusim:`` profiler ranges."""
    ks = record["runs"][run]["profile"]["kernels"]
    return [{"name": k["name"], "us": float(k["us"])} for k in ks
            if not str(k["name"]).startswith("gpusim:")]


def _kernel_args(k, index: int) -> dict:
    return {"kernel": index, "ops": list(k.ops), "op_types": list(k.op_types),
            "kind": k.kind, "shape": fmt_shape(k.shape), "unit": k.unit, "bound": k.bound,
            "flops": k.flops, "bytes_read": k.bytes_read, "bytes_read_l2": k.bytes_read_l2,
            "bytes_written": k.bytes_written, "bytes": k.bytes,
            "flop_per_byte": None if math.isinf(k.intensity) else k.intensity,
            "mem_us": k.mem_us, "compute_us": k.compute_us, "predicted_us": k.us,
            "bytes_human": fmt_bytes(k.bytes)}


def _phase_spans(pid: int, events: list[dict]) -> list[dict]:
    """A training step's phases on a lane of their own: one slice per run of GPU kernels of
    the same phase, from its first kernel's start to its last kernel's end."""
    spans: list[dict] = []
    for e in events:
        ph = e.get("args", {}).get("phase") if e.get("tid") == TID_GPU else None
        if ph is None:
            continue
        end = e["ts"] + e["dur"]
        if spans and spans[-1]["name"] == ph:
            spans[-1]["dur"] = end - spans[-1]["ts"]
        else:
            spans.append({"name": ph, "cat": "phase", "ph": "X", "ts": e["ts"], "dur": e["dur"],
                          "pid": pid, "tid": TID_PHASE, "args": {}})
    if not spans:
        return []
    return [_meta(pid, TID_PHASE, "thread_name", "training phase"),
            _meta(pid, TID_PHASE, "thread_sort_index", TID_PHASE)] + spans


def _meta(pid: int, tid: int | None, what: str, value) -> dict:
    e = {"ph": "M", "pid": pid, "name": what, "args": {}}
    if tid is not None:
        e["tid"] = tid
    e["args"]["name" if what.endswith("_name") else "sort_index"] = value
    return e


def _run_trace(pid: int, label: str, p, flow_ids) -> list[dict]:
    """Events of one simulated call: host lane, GPU lane, idle lane, launch flows."""
    title = f"{label}: {p.graph.name} on {p.spec.display_name}"
    ev = [_meta(pid, None, "process_name", title), _meta(pid, None, "process_sort_index", pid),
          _meta(pid, TID_HOST, "thread_name", "host (dispatch)"),
          _meta(pid, TID_HOST, "thread_sort_index", TID_HOST),
          _meta(pid, TID_GPU, "thread_name", "GPU stream"),
          _meta(pid, TID_GPU, "thread_sort_index", TID_GPU),
          _meta(pid, TID_IDLE, "thread_name", "GPU idle"),
          _meta(pid, TID_IDLE, "thread_sort_index", TID_IDLE)]
    gpu_start = {}
    for e in p.timeline.events:
        if e.lane == "gpu":
            k = p.kernels[e.kernel]
            gpu_start[e.kernel] = e
            args = _kernel_args(k, e.kernel)
            phase = p.graph.g.nodes[k.ops[0]].get("phase") if k.ops and k.ops[0] in p.graph.g else None
            if phase:           # a training step: forward, backward or optimizer
                args["phase"] = phase
            ev.append({"name": e.name, "cat": "kernel", "ph": "X", "ts": e.start_us,
                       "dur": e.dur_us, "pid": pid, "tid": TID_GPU, "args": args})
        else:
            args = {"host_us": e.dur_us}
            if e.kernel is not None:
                args["kernel"] = p.kernels[e.kernel].name
            ev.append({"name": e.name, "cat": "host", "ph": "X", "ts": e.start_us,
                       "dur": e.dur_us, "pid": pid, "tid": TID_HOST, "args": args})
    ev += _phase_spans(pid, ev)
    # a launch arrow binds to the slices enclosing its two ends: use mid-points
    for e in p.timeline.events:
        if e.lane != "host":
            continue
        target = gpu_start.get(e.kernel if e.kernel is not None else 0)
        if target is None or (e.kernel is None and p.mode != "cudagraph"):
            continue
        fid = next(flow_ids)
        ev.append({"name": "launch", "cat": "launch", "ph": "s", "id": fid, "pid": pid,
                   "tid": TID_HOST, "ts": e.start_us + e.dur_us / 2})
        ev.append({"name": "launch", "cat": "launch", "ph": "f", "bp": "e", "id": fid,
                   "pid": pid, "tid": TID_GPU, "ts": target.start_us + target.dur_us / 2})
    first = min((e.start_us for e in p.timeline.events if e.lane == "gpu"), default=None)
    if first:
        ev.append({"name": "idle: first launch", "cat": "idle", "ph": "X", "ts": 0.0,
                   "dur": first, "pid": pid, "tid": TID_IDLE,
                   "args": {"idle_us": first, "why": "host dispatch and launch latency "
                                                    "before the first kernel"}})
    for a, b in p.timeline.gaps:
        ev.append({"name": "idle", "cat": "idle", "ph": "X", "ts": a, "dur": b - a, "pid": pid,
                   "tid": TID_IDLE, "args": {"idle_us": b - a,
                                             "why": "waiting for the host to launch the next kernel"}})
    return ev + memory_counter(pid, p)


def memory_counter(pid: int, p) -> list[dict]:
    """A counter track: activation bytes allocated and reserved (above weights and inputs)
    while each kernel runs, stepped at the kernel's start (:mod:`gpusim.sim.memory`)."""
    m = p.memory
    starts = {e.kernel: e.start_us for e in p.timeline.events if e.lane == "gpu"}
    ev = []
    for i, (alloc, res) in enumerate(zip(m.timeline, m.reserved_timeline)):
        if i in starts:
            ev.append({"name": "memory (MiB above weights+inputs)", "cat": "memory", "ph": "C",
                       "ts": starts[i], "pid": pid,
                       "args": {"allocated": alloc / 2**20, "reserved": res / 2**20}})
    return ev


def _measured_trace(pid: int, p, measured: list[dict]) -> list[dict]:
    """Measured kernels laid back to back from the first predicted kernel's start (the
    profiler gives durations, not the host's timing)."""
    ev = [_meta(pid, TID_MEASURED, "thread_name", "measured GPU (back to back)"),
          _meta(pid, TID_MEASURED, "thread_sort_index", TID_MEASURED)]
    t = min((e.start_us for e in p.timeline.events if e.lane == "gpu"), default=0.0)
    matched = len(measured) == len(p.kernels)
    for i, m in enumerate(measured):
        us = float(m["us"])
        args = {"measured_us": us}
        if matched:
            pk = p.kernels[i]
            args.update(predicted_kernel=pk.name, predicted_us=pk.us,
                        error_pct=(pk.us - us) / us * 100 if us else None)
        ev.append({"name": str(m["name"]), "cat": "measured", "ph": "X", "ts": t, "dur": us,
                   "pid": pid, "tid": TID_MEASURED, "args": args})
        t += us
    return ev


def trace_document(pred=None, result=None, measured_kernels: list[dict] | None = None) -> dict:
    """The Chrome trace (a JSON-able dict) of a prediction or of a search's two runs.

    ``measured_kernels`` (``[{"name", "us"}]``, e.g. from :func:`record_kernels`) adds a
    "measured GPU" lane to the first run (the prediction, or a search's unfused run).
    """
    runs = runs_of(pred, result)
    flow_ids = itertools.count(1)
    events: list[dict] = []
    for pid, (label, p) in enumerate(runs, start=1):
        events += _run_trace(pid, label, p, flow_ids)
        if measured_kernels is not None and pid == 1:
            events += _measured_trace(pid, p, measured_kernels)
    p0 = runs[-1][1]
    other = {"generator": "gpusim", "graph": p0.graph.name, "gpu": p0.spec.display_name,
             "spec": p0.gpu, "time_unit": "us"}
    for label, p in runs:
        other[label] = {"mode": p.mode, "kernels": len(p.kernels), "device_us": p.device_us,
                        "end_to_end_us": p.end_to_end_us, "host_us": p.timeline.host_us,
                        "idle_us": p.idle_us}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def trace_output(pred=None, result=None, path: str = "trace.json"):
    """Write :func:`trace_document` to ``path``; returns the path."""
    check_target(path)
    doc = trace_document(pred, result)
    write_atomic(path, json.dumps(doc, separators=(",", ":"), allow_nan=False))
    return path
