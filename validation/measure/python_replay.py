"""The model's own Python clocked offline by replay (``validation.measure.pyclock``, a lab instrument), for every zoo case.

    python validation/measure/python_replay.py OUT.jsonl [MODEL ...]

One JSON line per zoo model and size (bf16, default and large sizes, as
``validation/measure/host_breakdown.py``): the replayed forward's Python on meta tensors in
module-call equivalents (``module_calls``), in µs at this machine's speed, this
machine's module-call time, torch calls per forward. Run on the device host in the same
lease as ``host_breakdown.py``, it gave the clock's scale on one machine (the
measured ``python_us`` over ``module_calls`` x the case's ``module_us`` probe), with no
second machine's Python speed in between. Needs no GPU.
"""

from __future__ import annotations

import json
import sys

import torch

from gpusim.models import zoo
from validation.measure import pyclock
from validation.measure.timing import host_info


def main(argv):
    out = argv[0]
    names = argv[1:] or sorted(zoo.ZOO)
    machine = host_info().get("summary")
    with open(out, "a") as f:
        for name in names:
            e = zoo.get(name)
            for label, sizes in (("default", e.defaults), ("large", e.large)):
                try:
                    m, args = zoo.build(name, device="meta", dtype=torch.bfloat16, **sizes)
                    rec = dict(model=name, size=label, sizes=dict(sizes), machine=machine,
                               python=sys.version.split()[0], torch=torch.__version__,
                               **pyclock.python_us(m, args))
                except Exception as ex:  # noqa: BLE001 - record and go on
                    rec = {"model": name, "size": label, "error": f"{type(ex).__name__}: {ex}"[:300]}
                f.write(json.dumps(rec) + "\n")
                f.flush()
                print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
