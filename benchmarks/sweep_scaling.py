"""Sweep throughput on Dask: 50 zoo models x 6 GPUs x 4 batch sizes x 2 modes (2,400 rows).

Target (issue 25): the 2,400 rows in under 20 minutes on the 2-core development machine,
and 2 workers at least 1.6x the rows per second of 1. For each worker count it starts a
LocalCluster, warms its workers (imports torch, gpusim and the zoo's libraries: what any
first task pays once), then runs the whole sweep into a fresh parquet file and prints

    workers  startup s  sweep s  wall s  rows  errors  rows/s

and the speed-up of the last worker count over the first. Rows/s is over the sweep alone;
the wall includes starting and warming the cluster. The workers' CPU seconds (their
process time during the sweep) say how much work there was, apart from how many cores
the machine lent: equal rows per CPU-second at 1 and 2 workers means the work divides
without overhead, and wall-clock scaling is then the cores' to give (the 1-minute load
average before each run says how busy the machine already was). The main process's CPU
seconds (Dask's scheduler and client, writing the rows) come out of the same cores.

    python benchmarks/sweep_scaling.py [--workers 1,2] [--models 50]
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gpusim  # noqa: E402
from gpusim.models import zoo  # noqa: E402

#: timm models beyond the zoo's catalogue (any timm.list_models() name is a zoo model)
TIMM = ["resnet34", "resnet26", "mobilenetv3_small_100", "mobilenetv3_large_100",
        "efficientnet_b1", "efficientnet_lite0", "mnasnet_100", "ghostnet_100", "regnetx_002",
        "regnety_004", "convnext_atto", "convnext_nano", "vgg11", "dla34", "rexnet_100",
        "lcnet_050", "seresnet50", "vit_tiny_patch16_224", "deit_tiny_patch16_224",
        "mixer_b16_224", "resmlp_12_224", "cspresnet50"]
GPUS = ["h100", "a100", "l4", "t4", "rtx4090", "v100"]
BATCHES = [1, 8, 32, 128]
MODES = ["eager", "compiled"]


def models(n: int) -> list[str]:
    return (list(zoo.ZOO) + [f"timm:{m}" for m in TIMM])[:n]


def _warm():
    """What a worker's first task imports anyway: torch, gpusim's pipeline, the zoo."""
    import gpusim.models.resolve  # noqa: F401
    import gpusim.predict.pipeline  # noqa: F401
    from gpusim.models import zoo as z
    z._tv(), z._timm(), z._hf()
    return os.getpid()


def run(workers: int, names: list[str]) -> dict:
    import logging
    from dask.distributed import Client, LocalCluster
    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           dashboard_address=":0", silence_logs=logging.CRITICAL)
    client = Client(cluster)
    client.run(_warm)
    cpu0 = client.run(time.process_time)
    load = os.getloadavg()[0]
    main0 = time.process_time()
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        df = gpusim.sweep(names, GPUS, {"batch": BATCHES}, modes=MODES,
                          out=os.path.join(d, "sweep.parquet"), dask=client)
        t2 = time.perf_counter()
    main_cpu = time.process_time() - main0
    cpu = sum(client.run(time.process_time).values()) - sum(cpu0.values())
    client.close()
    cluster.close()
    errors = int((df["error"] != "").sum())
    return {"workers": workers, "startup": t1 - t0, "sweep": t2 - t1, "wall": t2 - t0,
            "rows": len(df), "errors": errors, "rate": len(df) / (t2 - t1), "cpu": cpu,
            "load": load, "main_cpu": main_cpu,
            "first_error": df.loc[df["error"] != "", "error"].head(1).tolist()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
    ap.add_argument("--models", type=int, default=50, help="how many models (at most 50)")
    a = ap.parse_args(argv)
    names = models(a.models)
    print(f"{len(names)} models x {len(GPUS)} GPUs ({', '.join(GPUS)}) x batch "
          f"{','.join(map(str, BATCHES))} x modes {','.join(MODES)}; {os.cpu_count()} CPUs",
          flush=True)
    print("workers  startup s  sweep s  wall s  rows  errors  rows/s  worker CPU s  "
          "rows/CPU-s  main CPU s  load before", flush=True)
    results = []
    for w in (int(x) for x in a.workers.split(",")):
        r = run(w, names)
        results.append(r)
        print(f"{r['workers']:7d}  {r['startup']:9.1f}  {r['sweep']:7.1f}  {r['wall']:6.1f}  "
              f"{r['rows']:4d}  {r['errors']:6d}  {r['rate']:6.2f}  {r['cpu']:12.1f}  "
              f"{r['rows'] / r['cpu']:10.2f}  {r['main_cpu']:10.1f}  {r['load']:11.1f}", flush=True)
        if r["first_error"]:
            print(f"         first error: {r['first_error'][0]}", flush=True)
    if len(results) > 1:
        print(f"speed-up {results[-1]['workers']} over {results[0]['workers']} worker(s): "
              f"{results[-1]['rate'] / results[0]['rate']:.2f}x rows/s (target >= 1.6x for 2 over 1)")
    print(f"wall of the {results[-1]['rows']}-row sweep on {results[-1]['workers']} worker(s): "
          f"{results[-1]['wall']:.0f} s (target < 1200 s)")


if __name__ == "__main__":
    main()
