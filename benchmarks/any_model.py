"""Breadth: do models named by their library (``timm:NAME``, ``tv:NAME``) predict cleanly?

Samples names by a stable hash (the ``--timm`` / ``--tv`` names with the lowest sha1 of
their name, from ``timm.list_models()`` and ``torchvision.models.list_models()``), then
builds, captures and predicts each (eager, H100 spec, defaults: batch 1 at the input size
of its pretrained config). Prints one line per model, then the success rate (target
>= 95%; the rest must say why in one line), each failure's one-line reason, the ops
outside the cost model, and the median seconds from name to prediction (target < 2 s).

    python benchmarks/any_model.py [--timm 40] [--tv 20] [--timeout 120] [--amp fp16] [NAME ...]

``--amp fp16``/``bf16`` captures each forward under ``torch.autocast("cuda")`` (fp32 weights), as
``gpusim predict NAME --amp`` does; ``--tv 0`` where torchvision does not import (the CPU-only
torch 2.13 of the README's main install).
"""

import argparse
import collections
import hashlib
import signal
import statistics
import time

import torch


def sample(names, n: int) -> list[str]:
    """The ``n`` names with the lowest sha1: stable across runs and machines, and a new
    library version only moves the names it adds or drops."""
    return sorted(names, key=lambda s: hashlib.sha1(s.encode()).hexdigest())[:n]


def sampled_names(n_timm: int, n_tv: int) -> list[str]:
    names = []
    if n_timm:
        import timm
        names += [f"timm:{s}" for s in sample(timm.list_models(), n_timm)]
    if n_tv:
        import torchvision.models as tvm
        names += [f"tv:{s}" for s in sample(tvm.list_models(), n_tv)]
    return names


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def run_one(name: str, timeout: int, amp=None):
    """``(ok, seconds, reason, kernels, unmodelled op types)`` for one model."""
    from gpusim.models.resolve import model_graph
    from gpusim.predict.pipeline import predict
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    t0 = time.perf_counter()
    try:
        g = model_graph(name, amp=amp)
        p = predict(g, gpu="h100", mode="eager")
        unmod = [g.node(n)["op"] for n in g.unmodelled]
        return True, time.perf_counter() - t0, "", len(p.kernels), unmod
    except _Timeout:
        return False, time.perf_counter() - t0, f"over the {timeout} s limit", 0, []
    except Exception as e:  # noqa: BLE001 - every failure is a result here
        lines = str(e).strip().splitlines()
        return (False, time.perf_counter() - t0,
                f"{type(e).__name__}: {lines[0][:220] if lines else ''}", 0, [])
    finally:
        signal.alarm(0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timm", type=int, default=40)
    ap.add_argument("--tv", type=int, default=20)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--amp", choices=["fp16", "bf16"], default=None)
    ap.add_argument("names", nargs="*")
    a = ap.parse_args(argv)
    names = a.names or sampled_names(a.timm, a.tv)
    results = {}
    unmodelled = collections.Counter()
    for name in names:
        ok, s, why, nk, unmod = run_one(name, a.timeout, a.amp)
        results[name] = (ok, s, why)
        unmodelled.update(unmod)
        status = f"ok {nk} kernels" + (f", {len(unmod)} unmodelled" if unmod else "") \
            if ok else f"FAILED {why}"
        print(f"{name:48s} {s:6.2f} s  {status}", flush=True)
    good = [n for n, r in results.items() if r[0]]
    print()
    print(f"predicted {len(good)} of {len(results)} ({len(good) / len(results):.1%}; "
          "target >= 95%)")
    for n, (ok, _, why) in results.items():
        if not ok:
            print(f"  failed {n}: {why}")
    if unmodelled:
        print("ops outside the cost model (estimated as copies): "
              + ", ".join(f"{op} x{c}" for op, c in unmodelled.most_common()))
    if good:
        secs = [results[n][1] for n in good]
        print(f"name to prediction: median {statistics.median(secs):.2f} s, max "
              f"{max(secs):.2f} s (target median < 2 s; {torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
