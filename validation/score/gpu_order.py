"""Does gpusim keep the order the datasheets imply? For every zoo model at its default and
large size, eager device time on the datasheet specs should fall from V100 to A100 to
H100 to H200 (each later GPU has more bandwidth and more FLOP/s in every unit a model
uses, except that the H100 and H200 share their compute peaks). A row out of order is
either a rule that is wrong or a real exception; this lists them with the figures.

    python3 -m validation.score.gpu_order [--models tv:resnet50,hf:bert-base]
"""

from __future__ import annotations

import argparse
import sys

ORDER = ("v100", "a100", "h100", "h200")
#: the H100 and H200 differ only in memory: a compute-bound model may tie
TIE = 0.005


def check(model: str, sizes: dict, dtype: str, gpus=ORDER) -> dict:
    """``{"model", "sizes", "dtype", "us": {gpu: device us}, "out_of_order": [(a, b)]}``."""
    from gpusim.models.resolve import model_graph
    from gpusim.predict.pipeline import predict
    g = model_graph(model, dtype, sizes)
    us = {gpu: predict(g, gpu=gpu, mode="eager").device_us for gpu in gpus}
    bad = [(a, b) for a, b in zip(gpus, gpus[1:]) if us[b] > us[a] * (1 + TIE)]
    return {"model": model, "sizes": sizes, "dtype": dtype, "us": us, "out_of_order": bad}


def main(argv=None) -> int:
    from gpusim.models import zoo
    ap = argparse.ArgumentParser(prog="python3 -m validation.score.gpu_order")
    ap.add_argument("--models", default=None, help="comma-separated zoo names (default: all)")
    a = ap.parse_args(argv)
    names = a.models.split(",") if a.models else list(zoo.ZOO)
    bad = 0
    for name in names:
        e = zoo.get(name)
        for sizes in (e.defaults, e.large):
            dtype = "bfloat16" if "bfloat16" in e.dtypes else e.dtypes[0]
            r = check(name, dict(sizes), dtype)
            us = "  ".join(f"{g} {r['us'][g]:.0f}" for g in ORDER)
            flag = "  OUT OF ORDER: " + ", ".join(f"{x}<{y}" for x, y in r["out_of_order"]) \
                if r["out_of_order"] else ""
            bad += bool(r["out_of_order"])
            print(f"{name} {sizes} {dtype}: {us}{flag}")
    print(f"{bad} rows out of order", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
