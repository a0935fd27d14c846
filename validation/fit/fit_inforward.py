"""The in-forward class figures (``inforward_*_us``) of a host profile whose calibration ran the decode host probe
(``<profile>.raw.json``: ``host.decode_host``, each timing the fastest round's): the figures calibrate computes and
keeps in its raw timings but does not write (:func:`validation.measure.decode_host_probe.inforward_figures`: each
stack's clocked figures scaled by its unclocked wall less the model's Python at the profile's own law), written into
the profile, so that a host is priced by class (gpusim.sim.host_class; not adopted, docs/eager_token.md §6).

    python3 -m validation.fit.fit_inforward validation/results/generate/lease-p/host.toml [--dry-run]

``--dry-run``: print the figures and each round's, write nothing. Nothing here reads a generate record.
"""

from __future__ import annotations

import argparse
import json

from gpusim.hw.host import dump_host, load_host
from validation.measure.decode_host_probe import COMMENTS, inforward_figures, probe_figures


def fit(path: str, dry_run: bool = False) -> dict:
    raw = json.load(open(path + ".raw.json"))
    host = load_host(path)
    figs = inforward_figures(raw["host"], host)
    law = (host.python_module_call_us or 0.0, host.python_torch_call_us)
    rounds = [r["decode_host"] for r in raw.get("host_rounds", []) if r.get("decode_host", {}).get("stacks")]
    spread = probe_figures(rounds, law) if rounds else {}
    for k, v in figs.items():
        each = [f"{r.get(k[len('inforward_'):-3], float('nan')):.1f}" for r in spread.get("rounds", [])]
        print(f"{path}: {k} {v:.2f} (rounds {', '.join(each)})")
    for sc in spread.get("scales", []):
        print(f"  clock scale by stack: {', '.join(f'{k} {v:.3f}' for k, v in sc.items())}")
    if figs and not dry_run:
        prov = dict(host.provenance)
        machine = (host.provenance.get("eager_op_us") or ("", "this lease"))[1].split(", gpusim calibrate")[0]
        for k in figs:
            prov[k] = ("measured", f"{machine}, gpusim calibrate --host-only: {COMMENTS[k]}; the scaling applied to "
                                   f"the calibration's raw timings ({path}.raw.json) by python3 -m "
                                   f"validation.fit.fit_inforward {path}")
        dump_host(host.replace(**figs, provenance=prov), path)
    return figs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", nargs="+")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    bad = [p for p in a.profiles if not fit(p, a.dry_run)]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
