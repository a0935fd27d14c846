"""Where the collective law still misses, by protocol regime and world size (diagnostics; fits and writes nothing).

``python3 -m validation.reports.collectives_residuals [--collectives all_gather,send_recv] [--gpu h200-sxm]``

Prints, as markdown, from the graph-replay records the law is fitted on (:func:`validation.fit.collectives_records
.fit_data`):

- the small-message floor (8 KiB and below) of send/recv and broadcast in each run;
- the signed error per size of each collective, in sample and with its world size left out (fitted on the others,
  as ``validation/fit/fit_collectives.py`` scores it), with NCCL's protocol and channels for the call;
- LL's time per byte on all of NCCL's ring channels (the sizes that run on every channel), as a multiple of
  ``bytes / (channels x NCCL's LL rate per channel)``, beside the law's busBw factor and the calls the ring's CTA
  makes per chunk over n (``src/device/*.h`` runRing: all-gather and reduce-scatter n, all-reduce 2n-1; a broadcast's
  rank one): which of the two the records' slope follows;
- send/recv's Simple sizes (above NCCL's LL threshold) under forms of its bandwidth term, each fitted on some world
  sizes (relative least squares) and scored on the rest: the law's ``min(link, channels x channel)``, and the sum
  ``bytes / link + (bytes / channels) / channel`` (the link's time plus one p2p part's per-channel time) with the
  link shared with the other collectives (its joint fit) or its own.

docs/collectives_residuals.md quotes its output and says what was tried.
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np
from scipy.optimize import least_squares

from gpusim.cost.collectives import (BUSBW_FACTOR, ll_channel_gbs, ll_channels, nccl_protocol, p2p_channels, ring)
from validation.fit import collectives_records as CM
from validation.fit import fit_collectives as F

#: the calls one ring channel's CTA makes per chunk of the rank's shard (NCCL src/device/all_gather.h,
#: reduce_scatter.h, all_reduce.h runRing; broadcast.h: one call per rank, the chain pipelined across ranks)
RING_CALLS = {"all_gather": lambda n: n, "reduce_scatter": lambda n: n, "all_reduce": lambda n: 2 * n - 1,
              "broadcast": lambda n: 1}


def graph_data(gpu_name: str = "NVIDIA H200"):
    """(base link, gpu spec name, {(collective, n): {bytes: us}}, the clean runs of that method) of the records the
    law is fitted on."""
    runs = CM.load_runs(F.default_records())
    link_name, gpu = F.GPUS[gpu_name]
    _, sel, data, _ = CM.fit_data(runs, gpu_name, None)
    return F.base_link(link_name), gpu, data, [r for r in sel if r["clean"]]


def small_by_run(sel, gpu_name, collectives=("send_recv", "broadcast")) -> list[tuple]:
    """(run, collective, median us of its messages of 8 KiB and below) per clean run: the small-message floor of
    each run, whose spread between runs of one world size says how much of a difference between world sizes a
    latency law can own."""
    small = CM.small_by_run(sel, gpu_name)
    return sorted((label, c, us) for (label, c), us in small.items() if c in collectives)


def signed_rows(data, base, gpu, collective: str) -> list[tuple]:
    """(n, bytes, measured us, protocol, channels, in-sample signed error, left-out signed error) per point; a
    send/recv's channels those of NCCL's p2p rule in a communicator of n ranks (what the law prices)."""
    worlds = sorted({n for _, n in data})
    form = F.LL_FORM["graph"]
    full = F.with_fit(base, gpu, F.fit(data, base, worlds, ll_form=form))
    out = []
    for n in worlds:
        if (collective, n) not in data:
            continue
        rest = F.with_fit(base, gpu, F.fit(data, base, [w for w in worlds if w != n], ll_form=form))
        for b, t in sorted(data[(collective, n)].items()):
            p = ring(collective, b, n, full, gpu)
            ch = p2p_channels(b, n, base) if collective == "send_recv" and p.protocol == "simple" else p.channels
            out.append((n, b, t, p.protocol, ch, (p.us - t) / t, (ring(collective, b, n, rest, gpu).us - t) / t))
    return out


def ll_slopes(data, base) -> list[tuple]:
    """(collective, n, sizes, slope / (bytes per all-channel LL rate), busBw factor, calls / n) over the LL sizes that
    run on all of NCCL's ring channels (two or more such sizes)."""
    nch = base.nccl_coll["coll_channels"]
    rate = ll_channel_gbs(base) * nch * 1e3   # bytes per us
    out = []
    for c in RING_CALLS:
        for n in sorted({n for cc, n in data if cc == c}):
            pts = sorted((b, t) for b, t in data[(c, n)].items()
                         if nccl_protocol(c, b, n, base) == "ll" and ll_channels(b, n, base) == nch)
            if len(pts) < 2:
                continue
            k = np.polyfit([b for b, _ in pts], [t for _, t in pts], 1)[0]
            calls = RING_CALLS[c](n) / (n if c != "broadcast" else 1)
            out.append((c, n, [b for b, _ in pts], float(k * rate), BUSBW_FACTOR[c](n), calls))
    return out


def _forms(link_gbs: float):
    return {"law: min(link, channels x channel)": (lambda p, b, nch: p[0] + b / min(link_gbs, nch * p[1]) / 1e3, 2),
            "sum, shared link": (lambda p, b, nch: p[0] + b / link_gbs / 1e3 + b / nch / p[1] / 1e3, 2),
            "sum, own link": (lambda p, b, nch: p[0] + b / p[2] / 1e3 + b / nch / p[1] / 1e3, 3)}


def p2p_forms(data, base, link_gbs: float) -> list[tuple]:
    """(form, fitted on, figures, median, p90, max |error| on the held-out worlds (all worlds if none held out)) of
    send/recv's Simple sizes; ``link_gbs`` the shared Simple link of the joint fit."""
    pts = [(b, n, t) for (c, n), d in data.items() if c == "send_recv" for b, t in d.items()
           if nccl_protocol(c, b, n, base) == "simple"]
    worlds = sorted({n for _, n, _ in pts})
    out = []
    for name, (f, k) in _forms(link_gbs).items():
        for train in [worlds] + [[w for w in worlds if w != x] for x in worlds]:
            tr = [p for p in pts if p[1] in train]

            def res(p, tr=tr, f=f):
                return [(f(p, b, p2p_channels(b, n, base)) - t) / t for b, n, t in tr]
            s = least_squares(res, [13.0, 30.0, 360.0][:k], bounds=([0, 1, 50][:k], [50, 1000, 2000][:k])).x
            test = [p for p in pts if p[1] not in train] or pts
            e = sorted(abs((f(s, b, p2p_channels(b, n, base)) - t) / t) for b, n, t in test)
            out.append((name, train, [float(x) for x in s], float(np.median(e)),
                        e[min(len(e) - 1, max(0, math.ceil(0.9 * len(e)) - 1))], e[-1]))
    return out


def _size(b: int) -> str:
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def markdown(data, base, gpu, collectives, runs=(), gpu_name="NVIDIA H200") -> str:
    lines = []
    if runs:
        lines += ["#### Small messages (8 KiB and below), median per run", "", "| run | collective | us |",
                  "| --- | --- | --- |"]
        lines += [f"| {label} | {c} | {us:.1f} |" for label, c, us in small_by_run(runs, gpu_name)]
        lines.append("")
    for c in collectives:
        lines += [f"#### {c}: signed error per size (+: predicted slower)", "",
                  "| world | size | measured (us) | protocol | channels | in sample | world left out |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {n} | {_size(b)} | {t:.1f} | {p} | {ch} | {100 * e:+.1f}% | {100 * lo:+.1f}% |"
                  for n, b, t, p, ch, e, lo in signed_rows(data, base, gpu, c)]
        lines.append("")
    lines += ["#### LL on all ring channels: time per byte / (bytes per channels x NCCL's LL rate)", "",
              "| collective | world | sizes | measured slope | busBw factor (the law) | CTA calls per chunk / n |",
              "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {c} | {n} | {_size(s[0])} - {_size(s[-1])} | {k:.2f} | {f:.2f} | {cl:.2f} |"
              for c, n, s, k, f, cl in ll_slopes(data, base)]
    full = F.fit(data, base, sorted({n for _, n in data}), ll_form=F.LL_FORM["graph"])
    link = next(r.link_gbs for r in full["send_recv"] if r.protocol == "simple")
    lines += ["", f"#### send/recv, Simple sizes: forms of the bandwidth term (shared link {link:.1f} GB/s)", "",
              "| form | fitted on | latency, channel (, link) | median | p90 | max |", "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {name} | n={tr} | {', '.join(f'{x:.1f}' for x in s)} | {100 * m:.1f}% | {100 * p:.1f}% | "
              f"{100 * mx:.1f}% |" for name, tr, s, m, p, mx in p2p_forms(data, base, link)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collectives", default="all_gather,send_recv")
    ap.add_argument("--gpu", default="NVIDIA H200", help="the records' GPU name (validation/fit/fit_collectives GPUS)")
    args = ap.parse_args(argv)
    base, gpu, data, runs = graph_data(args.gpu)
    sys.stdout.write(markdown(data, base, gpu, args.collectives.split(","), runs, args.gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
