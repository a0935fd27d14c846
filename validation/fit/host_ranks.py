"""The host's time factors with N ranks on it, from ``validation/measure/host_ranks.py``'s records, into a host profile.

``python3 -m validation.fit.host_ranks RECORDS.jsonl [--host h200-sxm-host --write]``

From the records of one host at 1 rank and at N ranks (the largest N recorded), state ``nccl_live`` (NCCL's
communicator alive in every rank, as in a DDP/FSDP step), the slowest rank's median (the slowest rank sets a step's
wall):

- ``ranks_host_factor`` = eager-op loop at N ranks / at 1 rank (torch's dispatch, calibrate's ``eager_op_us``);
- ``ranks_python_factor`` = pure-Python probe at N ranks / at 1 rank (the model's own Python).

Printed per world and state; ``--write`` puts both, with their provenance, into ``hosts/<host>.toml``
(:func:`gpusim.hw.host.at_ranks` applies them from 2 ranks).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

STATE = "nccl_live"


def load(paths: list[str]) -> list[dict]:
    out = []
    for p in paths:
        with open(p) as f:
            out += [dict(json.loads(line), _path=p) for line in f if line.strip()]
    return [r for r in out if r.get("kind") == "host_ranks"]


def fit(recs: list[dict], state: str = STATE) -> dict:
    """The two factors (None where the records lack 1 rank or 2+ ranks in ``state``) and what they came from."""
    by_world = {r["world"]: r for r in recs if r.get("state") == state}
    many = max((w for w in by_world if w >= 2), default=None)
    if 1 not in by_world or many is None:
        return {"ranks_host_factor": None, "ranks_python_factor": None, "world": many, "records": []}
    one, n = by_world[1]["slowest"], by_world[many]["slowest"]
    return {"ranks_host_factor": n["eager_op_us"] / one["eager_op_us"],
            "ranks_python_factor": n["python_us"] / one["python_us"], "world": many,
            "one": one, "many": n, "env": by_world[many],
            "records": sorted({by_world[1]["_path"], by_world[many]["_path"]})}


def write(res: dict, host_name: str) -> None:
    from types import MappingProxyType

    from gpusim.hw.host import dump_host, hosts_dir, load_host
    host = load_host(host_name)
    env = res["env"]
    src = (f"{', '.join(os.path.relpath(p) for p in res['records'])} ({env.get('device')}, {env.get('cpus')} CPUs, "
           f"torch {env.get('torch')}, {env.get('utc', '')[:10]}; torchrun --nproc-per-node N -m "
           f"validation.measure.host_ranks, N = 1 and {res['world']}), fitted by python3 -m validation.fit.host_ranks")
    refs = {"ranks_host_factor": (f"eager torch.add loop, slowest rank with NCCL live: {res['many']['eager_op_us']:.2f} "
                                  f"us at {res['world']} ranks / {res['one']['eager_op_us']:.2f} at 1; {src}"),
            "ranks_python_factor": (f"pure-Python probe, slowest rank with NCCL live: {res['many']['python_us']:.0f} "
                                    f"us at {res['world']} ranks / {res['one']['python_us']:.0f} at 1; {src}")}
    prov = dict(host.provenance)
    vals = {}
    for k, ref in refs.items():
        prov[k] = ("measured", ref)
        vals[k] = round(res[k], 3)
    dump_host(host.replace(provenance=MappingProxyType(prov), **vals), hosts_dir() / f"{host_name}.toml")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+")
    ap.add_argument("--host", default="h200-sxm-host", help="the host profile --write updates")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    recs = load(a.records)
    for r in sorted(recs, key=lambda r: (r["state"], r["world"])):
        print(f"world {r['world']} {r['state']:9s} slowest {r['slowest']}  median {r['median']}")
    res = fit(recs)
    if res["ranks_host_factor"] is None:
        print(f"no {STATE} records at 1 rank and at 2+ ranks: nothing to fit", file=sys.stderr)
        return 1
    print(f"ranks_host_factor {res['ranks_host_factor']:.3f}, ranks_python_factor {res['ranks_python_factor']:.3f} "
          f"(1 vs {res['world']} ranks)")
    if a.write:
        write(res, a.host)
        print(f"wrote hosts/{a.host}.toml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
