"""Whole ``generate()`` calls predicted against the records of validation/measure/generate_run.py
(validation/results/generate/*.jsonl): time to first token, time per output token (eager dynamic
cache and static cache compiled), the speed-up of the static compiled path, total, peak memory and
KV-cache bytes; the prefill records (kernels, device time, wall) and the decode-host records (one
eager step's wall against its predicted host). Each record is predicted on its GPU's calibrated spec
and the host profile of the machine kind that measured it. Rewrites the generated block in docs/llm.md and
stores the per-record figures in validation/results/generate/predictions.json (docs/accuracy.md's LLM section).

    python3 -m validation.score.generate_accuracy [--no-doc] [--part decode|prefill]"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys

from validation.records.jsonl import env_records
from validation.score.decode_accuracy import GPUS, HOSTS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDS = os.path.join(ROOT, "validation", "results", "generate")
DOC = os.path.join(ROOT, "docs", "llm.md")
BEGIN, END = "<!-- generated: python3 -m validation.score.generate_accuracy -->", "<!-- end generated: generate -->"


#: record file -> the host profile its own lease measured (``gpusim calibrate --host-only`` before the runs)
LEASE_HOSTS = os.path.join(RECORDS, "lease_hosts.json")

#: what docs/accuracy.md's LLM section reads (validation/reports/llm_page.py), written with docs/llm.md
STORED = os.path.join(RECORDS, "predictions.json")

#: per record / case, filled by the tables as they are built: "generate", "prefill", "decode_step"
_STORE: dict = {"generate": [], "prefill": [], "decode_step": []}

#: a call ran in one of the shared host's contention episodes when the pure-Python probe right before it
#: (``python_us_reps``) took more than this many times its lease's quietest probe: the probe's quiet samples span
#: 1,300-1,450 us (1.0-1.12x) and the episodes 1,900-2,800 us (1.5-2.0x) (validation/results/host_drift/README.md)
CONTENDED = 1.4


def records(kind: str) -> list[tuple[dict, dict]]:
    """``(environment, record)`` of every line of ``kind``; the environment carries ``_host``: the
    host profile the record is scored on (its lease's own where one was measured, else the
    machine kind's) and ``_lease``: whether that is the lease's own."""
    import json
    leases = json.load(open(LEASE_HOSTS)) if os.path.exists(LEASE_HOSTS) else {}
    out, envs = [], {}
    for env, r, path in env_records(os.path.join(RECORDS, "*.jsonl"), kind, ROOT):
        own = leases.get(os.path.basename(path))
        if id(env) not in envs:      # one dict per environment line (cold() tells runs apart by it)
            envs[id(env)] = {**env, "_host": os.path.join(ROOT, own) if own else HOSTS[env["gpu"]],
                             "_lease": bool(own)}
        out.append((envs[id(env)], r))
    return out


def _key(env: dict, r: dict, cache: str, mode: str, host=None) -> tuple:
    return (env["gpu"], r["model"], r["batch"], r["prompt"], r["new"], cache, mode,
            host if host is not None else env["_host"])


def held_bytes(r: dict, g) -> int:
    """Bytes the harness held besides the measured call's own while it ran, by the rule of the
    harness that wrote ``r``: generate_run.py before ``holds_previous_output`` was recorded kept the
    previous timed call's result (``w, out = call(...)`` rebinds ``out`` only when the call
    returns): the sequences and the whole cache, ``g.output_bytes`` (the same call's). Nothing with
    one timed call, or in records that say ``holds_previous_output: false``. The CPU replay of that
    loop, validation/measure/cpu_liveness.py, shows the held bytes are exactly these."""
    calls = r["wall_ms"].get("n", 1) if isinstance(r.get("wall_ms"), dict) else 1
    return g.output_bytes if r.get("holds_previous_output", True) and calls > 1 else 0


def pct(p: float, m: float) -> str:
    return f"{(p / m - 1) * 100:+.0f}%" if m else "-"


def pct1(p: float, m: float) -> str:
    return f"{(p / m - 1) * 100:+.1f}%" if m else "-"


def _ms(x: float) -> str:
    return f"{x / 1e3:.2f}"


def _mode(r: dict) -> tuple[str, str]:
    return r["cache"], ("compiled" if r["mode"] == "compiled" else "eager")


def predictions(hosts: dict | None = None) -> dict:
    """``(gpu, model, batch, prompt, new, cache, mode) -> GenerateResult`` for every generate
    record, the two paths of one (gpu, model, batch) predicted together; ``hosts``: GPU name ->
    host profile (default the machine kind's, HOSTS)."""
    from gpusim.predict.generate import generate_runs
    groups: dict = {}
    for env, r in records("generate"):
        host = hosts[env["gpu"]] if hosts else env["_host"]
        key = (env["gpu"], r["model"], r.get("dtype", "bfloat16"), r["batch"], r["prompt"], r["new"], host)
        groups.setdefault(key, set()).add(_mode(r))
    out = {}
    for (gpu, model, dtype, batch, prompt, new, host), runs in sorted(groups.items(), key=str):
        res = generate_runs(model, sorted(runs), batch, prompt, new, gpu=GPUS[gpu], host=host, dtype=dtype)
        for g in res:
            out[(gpu, model, batch, prompt, new, g.cache, g.mode, host)] = g
    return out


def generate_table(preds: dict) -> tuple[str, dict, dict]:
    """The generate records on their own hosts; ``errs``: |error| of the time per output token
    by host kind (``"lease"``: the lease's own profile, ``"kind"``: the machine kind's), and of
    the peak allocated bytes (``"peak"``: the prediction plus :func:`held_bytes`)."""
    rows = ["| GPU | host profile | model | batch | cache, mode | TTFT ms (pred / meas) | time per output token ms (pred / meas) "
            "| total ms (pred / meas) | peak GB (pred + held / meas) | KV bytes (pred / meas) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    errs: dict = {"lease": [], "kind": [], "peak": [], "fastest eager": [], "fastest compiled": []}
    tpot = {}
    recs = records("generate")
    quiet = quiet_probes(recs)
    for env, r in recs:
        cache, mode = _mode(r)
        g = preds[_key(env, r, cache, mode)]
        lease = "lease" if env["_lease"] else "kind"
        ttft, total, m_tpot = measured(r)
        hname = os.path.relpath(env["_host"], RECORDS) if env["_lease"] else f"{env['_host']} (machine kind)"
        fastest = env["_lease"] and r.get("statistic") == "fastest rep"
        slow = contention(r, quiet.get(_run(env)))
        tpot[(env["gpu"], hname, r["model"], r["batch"], cache, mode)] = (g.tpot_us, m_tpot, fastest,
                                                                           bool(slow and slow > CONTENDED))
        errs[lease].append(abs(g.tpot_us / m_tpot - 1) * 100)
        if fastest:
            errs[f"fastest {mode}"].append(abs(g.tpot_us / m_tpot - 1) * 100)
        peak, kv = r.get("peak_allocated_bytes"), r.get("kv_cache_bytes")
        p_peak = g.peak_bytes + held_bytes(r, g)
        if peak:
            errs["peak"].append(abs(p_peak / peak - 1) * 100)
        mark = f" (host x{slow:.2f})" if slow and slow > CONTENDED else ""
        _STORE["generate"].append(dict(
            gpu=env["gpu"], host=hname, lease_profile=bool(env["_lease"]), model=r["model"], batch=r["batch"],
            prompt=r["prompt"], new=r["new"], cache=cache, mode=mode, fastest_rep=bool(fastest),
            contended=bool(slow and slow > CONTENDED), pred_ttft_us=g.ttft_us, meas_ttft_us=ttft,
            pred_tpot_us=g.tpot_us, meas_tpot_us=m_tpot, pred_total_us=g.total_us, meas_total_us=total,
            pred_peak_bytes=p_peak, meas_peak_bytes=peak, pred_kv_bytes=g.kv_cache_bytes, meas_kv_bytes=kv))
        rows.append(f"| {env['gpu']} | {hname} | {r['model']} | {r['batch']} | {cache}, {mode}{mark} "
                    f"| {_ms(g.ttft_us)} / {_ms(ttft)} ({pct(g.ttft_us, ttft)}) "
                    f"| {_ms(g.tpot_us)} / {_ms(m_tpot)} ({pct(g.tpot_us, m_tpot)}) "
                    f"| {_ms(g.total_us)} / {_ms(total)} ({pct(g.total_us, total)}) "
                    f"| {p_peak / 1e9:.3f} / {f'{peak / 1e9:.3f}' if peak else '-'} ({pct1(p_peak, peak or 0)}) "
                    f"| {g.kv_cache_bytes} / {kv} ({'exact' if kv == g.kv_cache_bytes else pct(g.kv_cache_bytes, kv or 0)}) |")
    return "\n".join(rows), errs, tpot


def measured(r: dict) -> tuple[float, float, float]:
    """A record's time to first token, total and time per output token (us). Records that
    timed each repetition apart (``statistic: fastest rep``) give the fastest repetition's (its
    time per token the mean over its tokens), as the lease's host profile (``gpusim calibrate
    --host-only``, the fastest of its rounds) describes the host without the contention episodes of
    shared VMs (validation/results/host_drift/); earlier records give the median over repetitions."""
    if r.get("statistic") == "fastest rep" and r.get("token_ms_reps"):
        tpot = statistics.mean(r["token_ms_reps"][fastest_rep(r)]) * 1e3
        return r["ttft_ms"]["min"] * 1e3, r["wall_ms"]["min"] * 1e3, tpot
    toks = [t * 1e3 for t in r.get("token_ms") or []]
    return (_med(r["ttft_ms"]) * 1e3, _med(r["wall_ms"]) * 1e3,
            statistics.mean(toks) if toks else float("nan"))


def fastest_rep(r: dict) -> int:
    """The index of a ``fastest rep`` record's fastest call: the least mean time per token."""
    reps = r["token_ms_reps"]
    return min(range(len(reps)), key=lambda i: statistics.mean(reps[i]))


def _run(env: dict):
    """The machine a record's host probe describes: its lease (one machine, its processes one after
    another) where it has its own profile, else its run (environment line)."""
    return env["_host"] if env.get("_lease") else id(env)


def quiet_probes(recs: list[tuple[dict, dict]]) -> dict:
    """:func:`_run` of each record -> the quietest ``python_us_reps`` probe there."""
    out: dict = {}
    for env, r in recs:
        for p in r.get("python_us_reps") or []:
            out[_run(env)] = min(out.get(_run(env), p), p)
    return out


def contention(r: dict, quiet: float | None) -> float | None:
    """The probe before a ``fastest rep`` record's fastest call over the quietest probe of its lease
    (:func:`quiet_probes`): the host's slowdown while that call ran (:data:`CONTENDED`); None
    without probes."""
    reps, probes = r.get("token_ms_reps"), r.get("python_us_reps")
    if r.get("statistic") != "fastest rep" or not reps or not probes or not quiet:
        return None
    return probes[fastest_rep(r)] / quiet


def lease_summary(tpot: dict) -> str:
    """Per lease profiled call by call (the ``fastest rep`` records on their lease's own profile), and
    all of them together: the median |error| of the time per output token, eager and static
    compiled, and of the static path's speed-up; then the same without the records whose fastest
    call ran in a contention episode (:func:`contention` over :data:`CONTENDED`)."""
    by: dict = {}
    for (gpu, host, model, batch, cache, mode), (p, m, fastest, slow) in tpot.items():
        if fastest:
            for lease in (host, "all leases profiled call by call"):
                by.setdefault(lease, {}).setdefault((host, gpu, model, batch), {})[mode] = (p, m, slow)
    rows = ["| lease | calls | TPOT eager | TPOT static compiled | speed-up | the same without contended calls |",
            "|---|---|---|---|---|---|"]

    def medians(cases: dict, keep) -> str:
        e = {mode: [abs(v[mode][0] / v[mode][1] - 1) * 100 for v in cases.values() if mode in v and keep(v[mode])]
             for mode in ("eager", "compiled")}
        sp = [abs((v["eager"][0] / v["compiled"][0]) / (v["eager"][1] / v["compiled"][1]) - 1) * 100
              for v in cases.values() if len(v) == 2 and keep(v["eager"]) and keep(v["compiled"])]
        return " | ".join(f"{statistics.median(x):.1f}% ({len(x)})" if x else "-" for x in (e["eager"], e["compiled"], sp))
    for lease, cases in sorted(by.items(), key=lambda kv: (kv[0].startswith("all"), kv[0])):
        n = sum(len(v) for v in cases.values())
        slow = sum(v[2] for c in cases.values() for v in c.values())
        quiet = medians(cases, lambda v: not v[2]).replace(" | ", "; ")
        rows.append(f"| {lease} | {n} ({slow} contended) | {medians(cases, lambda v: True)} | {quiet} |")
    return "\n".join(rows)


def speedup_table(tpot: dict) -> str:
    rows = ["| GPU | host profile | model | batch | static compiled over eager dynamic, per output token (pred / meas) |",
            "|---|---|---|---|---|"]
    errs, fastest = [], []
    for (gpu, host, model, batch, cache, mode), (p_dyn, m_dyn, f_dyn, _) in sorted(tpot.items()):
        if (cache, mode) != ("dynamic", "eager") or (gpu, host, model, batch, "static", "compiled") not in tpot:
            continue
        p_st, m_st, f_st, _ = tpot[(gpu, host, model, batch, "static", "compiled")]
        ps, ms = p_dyn / p_st, m_dyn / m_st
        errs.append(abs(ps / ms - 1) * 100)
        if f_dyn and f_st:
            fastest.append(errs[-1])
        rows.append(f"| {gpu} | {host} | {model} | {batch} | {ps:.2f}x / {ms:.2f}x ({pct(ps, ms)}) |")
    if errs:
        rows += ["", f"Speed-up: median error {statistics.median(errs):.0f}% over {len(errs)} pairs"
                 + (f"; {statistics.median(fastest):.0f}% over the {len(fastest)} pairs timed call by call on a lease "
                    "profiled the same way (the fastest call, the fastest calibration round)." if fastest else ".")]
    return "\n".join(rows)


def call_table(preds: dict) -> str:
    """The static compiled path split at the compiled call (records with ``forward_host_ms``: the
    host time inside each compiled forward call): the call (predicted: Dynamo's entry, the CUDA
    graph tree's call and the replay's launch, :func:`gpusim.predict.generate.dynamo_entry_us`
    plus the step's host) and the token less the call (generate's own host work around it and
    the wait for the GPU), means over the tokens."""
    from gpusim.predict.generate import dynamo_entry_us
    rows = ["| GPU | host profile | model | batch | compiled call µs (pred / meas) | token less the call µs (pred / meas) |",
            "|---|---|---|---|---|---|"]
    e_call, e_rest = [], []
    for env, r in records("generate"):
        if _mode(r) != ("static", "compiled") or not r.get("forward_host_ms") or not r.get("token_ms"):
            continue
        g = preds[_key(env, r, "static", "compiled")]
        step = g.parts["steps"][g.sample_contexts[0]]
        p_call = dynamo_entry_us(step) + step.timeline.host_us
        m_call = statistics.mean(r["forward_host_ms"]) * 1e3
        m_rest = statistics.mean(r["token_ms"]) * 1e3 - m_call
        p_rest = g.tpot_us - p_call
        e_call.append(abs(p_call / m_call - 1) * 100)
        e_rest.append(abs(p_rest / m_rest - 1) * 100)
        hname = os.path.relpath(env["_host"], RECORDS) if env["_lease"] else f"{env['_host']} (machine kind)"
        rows.append(f"| {env['gpu']} | {hname} | {r['model']} | {r['batch']} | {p_call:.0f} / {m_call:.0f} "
                    f"({pct(p_call, m_call)}) | {p_rest:.0f} / {m_rest:.0f} ({pct(p_rest, m_rest)}) |")
    if e_call:
        rows += ["", f"Compiled call: median error {statistics.median(e_call):.0f}%; the token less the call: "
                 f"{statistics.median(e_rest):.0f}% ({len(e_call)} calls)."]
    return "\n".join(rows)


def _med(x) -> float:
    return x["median"] if isinstance(x, dict) else x


@functools.lru_cache(maxsize=None)
def _lm(model: str):
    import torch
    from gpusim.predict import decode
    return decode.load_lm(model, torch.bfloat16)[0]


def _on(env, fn, args):
    from gpusim.capture.tracing import capture
    from gpusim.predict.pipeline import as_spec, lower, predict_lowering
    spec = as_spec(GPUS[env["gpu"]])
    g = capture(fn, args)
    return predict_lowering(lower(g, "eager", spec=spec), spec, host=env["_host"])


def prefill_table() -> str:
    """The measured call: ``model(ids, past_key_values=DynamicCache(...), use_cache=True,
    logits_to_keep=1)`` (no mask, no positions), on the record's host profile."""
    import torch
    from transformers import DynamicCache
    rows = ["| GPU | model | batch | prompt | kernels (pred / meas) | device µs (pred / meas) | wall µs (pred / meas) |",
            "|---|---|---|---|---|---|---|"]
    for env, r in records("prefill"):
        m = _lm(r["model"])
        ids = torch.zeros(r["batch"], r["prompt"], dtype=torch.long, device="meta")
        p = _on(env, lambda ids, cache: m(ids, past_key_values=cache, use_cache=True, logits_to_keep=1),
                (ids, DynamicCache(config=m.config)))
        dev, wall = r["kernel_sum_us"], _med(r["wall_us"])
        _STORE["prefill"].append(dict(gpu=env["gpu"], model=r["model"], batch=r["batch"], prompt=r["prompt"],
                                      pred_device_us=p.device_us, meas_device_us=dev))
        rows.append(f"| {env['gpu']} | {r['model']} | {r['batch']} | {r['prompt']} | {p.kernel_count} / {r['kernel_count']} "
                    f"| {p.device_us:.0f} / {dev:.0f} ({pct(p.device_us, dev)}) "
                    f"| {p.end_to_end_us:.0f} / {wall:.0f} ({pct(p.end_to_end_us, wall)}) |")
    return "\n".join(rows)


def host_step(env, r):
    """The measured eager step: the next token's forward with the DynamicCache (and, variant
    "generate", the attention mask, cache position and position ids generate passes, built
    on the device), the argmax of the last logits, the host's read of the token."""
    import torch
    from gpusim.predict import decode
    m, b, c = _lm(r["model"]), r["batch"], r["context"]
    gen = r.get("variant", "bare") == "generate"

    def step(ids, cache):
        extra = {}
        if gen:
            extra = dict(attention_mask=torch.ones(b, c + 1, dtype=torch.long, device=ids.device),
                         cache_position=torch.arange(c, c + 1, device=ids.device),
                         position_ids=torch.full((b, 1), c, dtype=torch.long, device=ids.device))
        nxt = m(ids, past_key_values=cache, use_cache=True, **extra).logits[:, -1:].argmax(-1)
        # nxt.cpu(): the host waits for the token, a device-to-host memcpy and no kernel (a compare
        # on the device, ``if nxt[0, 0] >= 0``, would add one the step does not run)
        nxt[0, 0].item()
        return nxt
    cache = decode.make_cache(m, "dynamic", b, c, c + 1, torch.bfloat16)
    return _on(env, step, (torch.zeros(b, 1, dtype=torch.long, device="meta"), cache))


def cold(seen: set, env: dict, r: dict) -> bool:
    """Whether the step's attention shapes are new to the process: the case's steps grow the
    cache one token at a time from ``context``, so they are, unless an earlier case of the
    same run (environment line) ran the same model, batch and context, or every layer's
    cache is at its sliding window (the key length stops growing)."""
    from gpusim.predict import decode
    key = (id(env), r["model"], r["batch"], r["context"])
    windows = decode.sliding_layers(_lm(r["model"]).config)
    capped = all(w is not None and r["context"] >= w for w in windows)
    new = key not in seen and not capped
    seen.add(key)
    return new


def decode_host_table() -> str:
    from gpusim.predict.generate import plan_build_us
    rows = ["| GPU | model | variant | batch | context | kernels (pred / meas) | module calls (capture / hook) "
            "| device µs (pred / meas) | wall µs (pred / meas) | model's Python µs (pred / meas estimate) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    seen: set = set()
    dev_err: dict = {}
    for env, r in records("decode_host"):
        p = host_step(env, r)
        dev_err.setdefault(env["gpu"], []).append(abs(p.device_us / r["kernel_sum_us"] - 1) * 100)
        _STORE["decode_step"].append(dict(gpu=env["gpu"], model=r["model"], variant=r.get("variant", "bare"),
                                          batch=r["batch"], context=r["context"], pred_device_us=p.device_us,
                                          meas_device_us=r["kernel_sum_us"]))
        wall = _med(r["wall_us"])
        c = cold(seen, env, r)
        pw = p.end_to_end_us + (plan_build_us(p) if c else 0.0)
        rows.append(f"| {env['gpu']} | {r['model']} | {r.get('variant', 'bare')}, {'cold' if c else 'warm'} | {r['batch']} | {r['context']} "
                    f"| {p.kernel_count} / {r['kernel_count']} | {p.graph.meta.get('module_calls')} / {r.get('module_calls')} "
                    f"| {p.device_us:.0f} / {r['kernel_sum_us']:.0f} ({pct(p.device_us, r['kernel_sum_us'])}) "
                    f"| {pw:.0f} / {wall:.0f} ({pct(pw, wall)}) "
                    f"| {p.timeline.python_us:.0f} / {r.get('python_us_estimate', 0):.0f} |")
    rows += ["", "Device time of the step: median |error| " + "; ".join(
        f"{gpu} {statistics.median(e):.1f}% ({len(e)} steps)" for gpu, e in sorted(dev_err.items())) + "."]
    return "\n".join(rows)


def report() -> str:
    preds = predictions()
    gen, errs, tpot = generate_table(preds)
    parts = ["Whole generate() calls (greedy, `max_new_tokens = min_new_tokens = new`), each on its record's host "
             "profile: its lease's own (`gpusim calibrate --host-only` run on the lease before the generate runs: "
             "`lease_hosts.json`) where one was measured, else the machine kind's:", "", gen, ""]
    for kind, what in (("lease", "on the lease's own host profile"), ("kind", "on the machine kind's profile")):
        if errs[kind]:
            parts.append(f"- Time per output token {what}: median error {statistics.median(errs[kind]):.0f}% "
                         f"over {len(errs[kind])} calls.")
    for mode in ("eager", "compiled"):
        if errs[f"fastest {mode}"]:
            e = errs[f"fastest {mode}"]
            parts.append(f"- The same, {mode}, on the records timed call by call (`statistic: fastest rep`) on their lease's "
                         f"profile (the fastest of its calibration rounds): median error {statistics.median(e):.0f}% over "
                         f"{len(e)} calls (the host's contention episodes out of both sides: validation/results/host_drift/).")
    if errs["peak"]:
        pk = errs["peak"]
        parts.append(f"- Peak allocated (predicted peak plus what the harness held: records without `holds_previous_output` "
                     f"kept the previous call's result, its sequences and whole cache, `held_bytes`): "
                     f"within 2% in {sum(e <= 2 for e in pk)} of {len(pk)} calls, median error "
                     f"{statistics.median(pk):.1f}%.")
    parts += ["", speedup_table(tpot)]
    parts += ["", "By lease, the records timed call by call on their lease's own profile (median |error|, cases in "
              "brackets); a call is contended when the pure-Python probe before it took more than "
              f"{CONTENDED}x its lease's quietest (`python_us_reps`; its slowdown marked in the table above as host xN):",
              "", lease_summary(tpot)]
    calls = call_table(preds)
    if calls.count("\n") > 1:
        parts += ["", "The static compiled token split at the compiled call (`forward_host_ms`: the host time inside "
                  "each compiled forward call, measured without the profiler):", "", calls]
    if records("prefill"):
        parts += ["", "Prefill (one forward over the prompt filling a DynamicCache, `logits_to_keep=1`):", "",
                  prefill_table()]
    if records("decode_host"):
        parts += ["", "One eager decode step (DynamicCache) under the profiler with CPU activity (cold: the step's key "
                  "lengths are new to the process, so each cuDNN attention call builds its plan):", "", decode_host_table()]
    return "\n".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-doc", action="store_true", help="print only; leave docs/llm.md")
    ap.add_argument("--part", choices=("all", "decode", "prefill"), default="all",
                    help="decode / prefill: print only that table (minutes, not the whole report's ~13); implies --no-doc")
    a = ap.parse_args(argv)
    if a.part != "all":
        print(decode_host_table() if a.part == "decode" else prefill_table())
        return 0
    for v in _STORE.values():
        v.clear()
    text = report()
    print(text)
    with open(STORED, "w") as f:        # always: the accuracy page's LLM section reads it
        json.dump({"command": "python3 -m validation.score.generate_accuracy", **_STORE}, f, indent=1, sort_keys=True, default=float)
        f.write("\n")
    if not a.no_doc:
        doc = open(DOC).read()
        block = BEGIN + "\n\n" + text + "\n\n" + END
        if BEGIN in doc:
            i, j = doc.index(BEGIN), doc.index(END) + len(END)
            doc = doc[:i] + block + doc[j:]
        else:
            doc = doc.rstrip("\n") + "\n\n## Measured: whole generate() calls\n\n" + block + "\n"
        with open(DOC, "w") as f:
            f.write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
