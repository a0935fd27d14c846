"""``eager_library_forward_factor`` for a host profile calibrate wrote before it fitted the figure: the same fit
(:func:`validation.measure.reference_forwards.library_forward_factor`) on the reference forwards' walls its calibration
timed (``<profile>.raw.json``: the fastest round's ``reference_walls``), written into the profile with its provenance.

    python3 -m validation.fit.fit_library_factor --gpu h200 validation/results/generate/lease-m/host.toml [...]

``--gpu``: the spec the calibration priced the reference forwards on (its ``fit.reference_forwards`` prices are
reproduced first, within 0.5%, or the profile is left as it is). ``--dry-run``: print, write nothing.
"""

from __future__ import annotations

import argparse
import json
import sys

from gpusim.hw.host import dump_host, load_host
from gpusim.predict.pipeline import as_spec
from validation.measure.reference_forwards import library_forward_factor, reference_predictions


def fit(path: str, gpu: str, dry_run: bool = False) -> float | None:
    raw = json.load(open(path + ".raw.json"))
    walls = raw["host"].get("reference_walls") or {}
    before = (raw.get("fit") or {}).get("reference_forwards") or {}
    host, spec = load_host(path), as_spec(gpu)
    priced = reference_predictions(spec, host)
    for name, d in before.items():
        if abs(priced[name][0] / d["predicted_us"] - 1) > 0.005:
            print(f"{path}: {name} priced {priced[name][0]:.0f} us on {gpu}, the calibration's {d['predicted_us']:.0f}: "
                  "not the spec it was fitted on; left as it is", file=sys.stderr)
            return None
    f, diag = library_forward_factor(walls, spec, host)
    parts = "; ".join(f"{k} wall {v['wall_us']:.0f} us, priced {v['predicted_us']:.0f} of which library calls "
                      f"{v['library_calls_us']:.0f}" for k, v in diag.items())
    ref = (f"the reference forwards' eager walls of this profile's calibration ({path}.raw.json, the fastest round) "
           f"less gpusim's price of all but their library calls' own dispatch, over that dispatch's price on {gpu} "
           f"at this profile's tight-loop figures ({parts}): python3 -m validation.fit.fit_library_factor --gpu {gpu} "
           f"{path}")
    print(f"{path}: eager_library_forward_factor {f:.4f} (eager_forward_factor {host.eager_forward_factor})")
    if not dry_run:
        prov = dict(host.provenance)
        prov["eager_library_forward_factor"] = ("derived", ref)
        dump_host(host.replace(eager_library_forward_factor=f, provenance=prov), path)
    return f


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", nargs="+")
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    bad = [p for p in a.profiles if fit(p, a.gpu, a.dry_run) is None]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
