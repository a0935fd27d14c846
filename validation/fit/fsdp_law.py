"""Fit FSDP2's per-unit host law on the ``fully_shard`` microbenchmark and write it into the host's profile.

``python3 -m validation.fit.fsdp_law [--write]``

Reads ``validation/results/dist/*-fsdp-hooks.jsonl`` (``validation/measure/fsdp_hooks.py`` under torchrun: 4, 16, 64
``Linear(256, 256)`` units, plain or each under ``fully_shard``, bf16 params / fp32 reduce, at 1, 2 and 4 ranks) and
predicts the same builders with gpusim on the record's GPU and host, the FSDP2 law switched off (hook calls and
per-unit syncs free). Per world, the least-squares slope over units of (wrapped - plain) step wall, measured and
predicted: what one unit adds per step. The predicted slope holds what gpusim already prices per unit (the added
copies and collectives on the GPU, from :mod:`gpusim.cost.collectives`, one eager op of host per added operation);
the residual ``R(W)`` is what it misses, ``h(W)`` the torch calls a unit's hooks make (counted at capture by
:func:`gpusim.capture.distributed.fsdp_hook_calls`). The microbenchmark has one unit shape (two parameters), so it
cannot tell a cost per unit from a cost per call (or parameter); two forms fit it equally:

- ``--form unit`` (the default): each call at the host's floor (``python_torch_call_us + eager_view_us``, what one
  torch call from Python costs at least), the rest per unit: ``fsdp_unit_us = R(1) - h(1) x floor``;
- ``--form call``: all of it per call, ``fsdp_hook_call_us = R(1) / h(1)``, no per-unit term.

Across ranks, ``U(W) = R(W) - h(W) x per call - fsdp_unit_us`` is what a unit costs per step beyond that: the c10d
calls of its three collectives (two all-gathers, one reduce-scatter) and the waits for the slowest rank, which the
GPU-side collective times (tens of µs at these sizes) do not explain: ``fsdp_unit_sync_us = U(4)``,
``fsdp_unit_sync_doubling_us = U(4) - U(2)``, linear in log2(W): two worlds, two figures, an exact fit.

Held out: the FSDP2 Llama-1B rows of every lease (``validation.score.dist_accuracy``), never fitted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from validation.records.jsonl import env_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUS = {"NVIDIA H200": ("h200", "h200-sxm-host"), "NVIDIA H100 80GB HBM3": ("h100", "h100-sxm-host")}
LAW = ("fsdp_hook_call_us", "fsdp_unit_us", "fsdp_unit_sync_us", "fsdp_unit_sync_doubling_us")


def builder(units: int, wrapped: bool):
    """validation/measure/fsdp_hooks.py's model and step, as a gpusim builder."""
    def build():
        import torch
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(units)]).cuda()
        if wrapped:
            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for layer in model:
                fully_shard(layer, mp_policy=policy)
            fully_shard(model, mp_policy=policy)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)

        def step(x):
            model(x).float().sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step, (torch.randn(32, 256, device="cuda"),)
    return build


def records() -> list[tuple[dict, dict, str]]:
    return [(env, r, path) for env, r, path in env_records(
        os.path.join(ROOT, "validation", "results", "dist", "*-fsdp-hooks.jsonl"), "fsdp_hooks", ROOT)
        if r.get("mixed_precision")]


def slope(xs, ys) -> float:
    return float(np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)[0])


def fit(progress: bool = False, form: str = "unit") -> dict:
    from gpusim.hw.host import load_host
    from gpusim.hw.spec import spec_for
    from gpusim.predict.distributed import predict_distributed
    recs = records()
    if not recs:
        raise SystemExit("no validation/results/dist/*-fsdp-hooks.jsonl records")
    gpu, host_name = GPUS[recs[0][0]["gpu"]]
    host = load_host(host_name)
    off = host.replace(fsdp_hook_call_us=0.0, fsdp_unit_us=0.0, fsdp_unit_sync_us=0.0, fsdp_unit_sync_doubling_us=0.0)
    meas, pred, calls = {}, {}, {}
    for env, r, _ in recs:
        w, u = r["world"], r["units"]
        meas.setdefault(w, {}).setdefault(u, {})[r["wrapped"]] = r["rank0_step_ms"]["median"] * 1e3
        if progress:
            print(f"predicting world {w} units {u} wrapped {r['wrapped']}", file=sys.stderr, flush=True)
        p = predict_distributed(builder(u, r["wrapped"]), spec_for(gpu), w, 1, host=off, world1=False)
        pred.setdefault(w, {}).setdefault(u, {})[r["wrapped"]] = p.synced_step_us     # the harness syncs each step
        if r["wrapped"]:
            calls.setdefault(w, {})[u] = sum(p.plan.host_calls.values())
    per = {}
    for w in sorted(meas):
        us = sorted(u for u in meas[w] if len(meas[w][u]) == 2)
        m = slope(us, [meas[w][u][True] - meas[w][u][False] for u in us])
        p = slope(us, [pred[w][u][True] - pred[w][u][False] for u in us])
        per[w] = {"units": us, "measured_us": m, "predicted_us": p, "residual_us": m - p,
                  "hook_calls": slope(us, [calls[w][u] for u in us])}
    if 2 not in per or 4 not in per or 1 not in per:
        raise SystemExit("the law needs records at 1, 2 and 4 ranks")
    floor = (host.python_torch_call_us or 0.0) + host.eager_view_us
    c = floor if form == "unit" else per[1]["residual_us"] / per[1]["hook_calls"]
    unit = per[1]["residual_us"] - c * per[1]["hook_calls"]
    for w, x in per.items():
        x["sync_us"] = x["residual_us"] - c * x["hook_calls"] - unit
    law = {"fsdp_hook_call_us": None if form == "unit" else c, "fsdp_unit_us": unit if form == "unit" else None,
           "fsdp_unit_sync_us": per[4]["sync_us"], "fsdp_unit_sync_doubling_us": per[4]["sync_us"] - per[2]["sync_us"]}
    return {"gpu": gpu, "host": host_name, "form": form, "floor_us": floor, "env": recs[0][0], "records": sorted({p for _, _, p in recs}),
            "per_world": per, "law": law}


def write(res: dict) -> None:
    from gpusim.hw.host import dump_host, hosts_dir, load_host
    host = load_host(res["host"])
    env, per = res["env"], res["per_world"]
    src = (f"{', '.join(res['records'])} ({env['gpu']} x{env.get('gpus_on_host', '?')} lease host, torch "
           f"{env['torch']}, NCCL {env['nccl']}, {env['utc'][:10]}; torchrun -m validation.measure.fsdp_hooks at "
           "1/2/4 ranks), fitted by python3 -m validation.fit.fsdp_law --write")
    hc = f"{per[1]['hook_calls']:.0f} hook calls a unit at 1 rank, {per[4]['hook_calls']:.0f} at 2 and 4"
    refs = {"fsdp_hook_call_us": f"form call: per-unit step wall slope at 1 rank, measured {per[1]['measured_us']:.0f} "
                                 f"us minus gpusim's {per[1]['predicted_us']:.0f} us, over {hc}; {src}",
            "fsdp_unit_us": f"form unit: per-unit step wall slope at 1 rank, measured {per[1]['measured_us']:.0f} us "
                            f"minus gpusim's {per[1]['predicted_us']:.0f} us minus {hc} x the host's floor "
                            f"{res['floor_us']:.2f} us (python_torch_call_us + eager_view_us); {src}",
            "fsdp_unit_sync_us": f"per unit per step at 4 ranks beyond the 1-rank cost: measured slope "
                                 f"{per[4]['measured_us']:.0f} us minus gpusim's {per[4]['predicted_us']:.0f} us "
                                 f"minus the 1-rank law's calls and unit term ({res['form']} form); {src}",
            "fsdp_unit_sync_doubling_us": f"that at 4 ranks minus the same at 2 ranks ({per[2]['sync_us']:.0f} us): "
                                          f"added per doubling of the ranks (two worlds, exact); {src}"}
    prov = dict(host.provenance)
    for k, v in res["law"].items():
        prov.pop(k, None)
        if v is not None:
            prov[k] = ("derived", refs[k])
    from types import MappingProxyType
    new = host.replace(provenance=MappingProxyType(prov),
                       **{k: None if v is None else round(v, 3) for k, v in res["law"].items()})
    dump_host(new, hosts_dir() / f"{res['host']}.toml")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the law into the record's host profile")
    ap.add_argument("--form", choices=("unit", "call"), default="unit", help="per unit above a per-call floor "
                    "(default), or all per hook call")
    a = ap.parse_args(argv)
    res = fit(progress=True, form=a.form)
    for w, x in sorted(res["per_world"].items()):
        print(f"world {w}: per unit measured {x['measured_us']:.0f} us, gpusim without the law "
              f"{x['predicted_us']:.0f} us, residual {x['residual_us']:.0f} us, hook calls {x['hook_calls']:.1f}, "
              f"sync {x['sync_us']:.0f} us")
    print(json.dumps({k: None if v is None else round(v, 3) for k, v in res["law"].items()}))
    if a.write:
        write(res)
        print(f"wrote hosts/{res['host']}.toml", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
