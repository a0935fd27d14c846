"""Fit the collective laws (:mod:`gpusim.cost.collectives`) on our own NCCL sweeps, score them, write the figures.

``python3 -m validation.fit.fit_collectives [RECORDS.jsonl ...] [--check]`` (the figures and scores only;
``python3 -m validation.reports.collectives_page`` runs this and writes the pages too)

Reads ``validation/results/collectives/*.jsonl`` (``validation/measure/collectives.py`` under torchrun). Only clean
runs are fitted: a run whose environment set ``NCCL_DEBUG`` logged every call from the host, which slows small
messages, so it serves only as the second run for run-to-run noise above 1 MiB; so does a run with another GPU lead
than the default (``--lead-per-call-us``: the host-bound test of the small-message floor).

Per GPU, each point goes to the protocol NCCL's tuner picks for it (:func:`gpusim.cost.collectives.nccl_protocol`:
LL or Simple, by NCCL's own model, so the switch moves with the world size as NCCL's does), and each protocol is one
bounded least-squares fit in relative error over every collective and world size at once (:func:`fit_protocol`):
the link's figures (``link_gbs``; ``share_us``, or Simple's ``hop_us`` on eager records) shared, the collective's
own (latency, ``shard_gbs``) not; on graph records LL's bytes are priced on NCCL's own channels and rate, unfitted.

Writes the ``[measured."<gpu>"]`` tables of the GPU's link file (below the marker line) and
``validation/results/collectives/scores.json``; :mod:`validation.reports.collectives_page` renders them (with the
reference points of 4 GPUs from DESIGN.md and KINDS.md, scored, never fitted) into ``docs/collectives.md`` and the
collectives section of ``docs/accuracy.md``. Scores: in sample; each world size left out (fit on the others: the law's
structure must carry the figures across world sizes); alternate sizes left out (fit on 1 KiB x 4^k); and, where two
GPU kinds share a link, one GPU left out. Prints the table. ``--check`` writes nothing and fails if a written file
would change.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import os
import statistics
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import lsq_linear

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpusim.cost.collectives import (  # noqa: E402
    BUSBW_FACTOR, PAIRED, RING_STEPS, ll_channel_gbs, ll_channels, nccl_protocol, p2p_channels, ring)
from gpusim.hw.links import COLLECTIVES, Measured, Regime, links_dir, parse_link  # noqa: E402
from validation.fit import collectives_records as CM  # noqa: E402
from validation.fit.collectives_block import measured_block  # noqa: E402
from validation.fit.collectives_records import (  # noqa: E402  (the records' helpers, here as before)
    load_runs, noise, overlap_figures, points, small_by_run)

SCORES = ROOT / "validation" / "results" / "collectives" / "scores.json"
GRAPH_NOTE = " of method graph (k calls replayed in one CUDA graph: the collective's device time)"

MARKER = "# --- measured: written by validation/fit/fit_collectives.py; do not edit below this line ---"
#: which link and GPU spec a record's GPU measured (NV18 on every lent H100/H200 machine: `nvidia-smi topo -m`)
GPUS = {"NVIDIA H200": ("nvlink4", "h200-sxm"), "NVIDIA H100 80GB HBM3": ("nvlink4", "h100-sxm")}
#: bus bandwidth at 1 GiB measured by earlier sessions, never fitted: (gpu, link, world, collective, GB/s, where)
REFERENCE = (
    ("h200-sxm", "nvlink4", 4, "all_reduce", 353.0, "DESIGN.md 'Measured across GPUs' (4x H200 NV18, NCCL 2.28)"),
    ("h200-sxm", "nvlink4", 4, "all_gather", 322.0, "DESIGN.md 'Measured across GPUs' (4x H200 NV18, NCCL 2.28)"),
    ("h200-sxm", "nvlink4", 4, "reduce_scatter", 318.0, "DESIGN.md 'Measured across GPUs' (4x H200 NV18, NCCL 2.28)"),
    ("h200-sxm", "nvlink4", 2, "all_gather", 267.0, "DESIGN.md 'Measured across GPUs' (2x H200 NV18, NCCL 2.28)"),
    ("h100-sxm", "nvlink4", 4, "all_reduce", 355.0, "device KINDS.md, nvidia-h100-x4 seen working 2026-11-13"),
    ("h100-sxm", "nvlink4", 8, "all_reduce", 361.0, "device KINDS.md, nvidia-h100-x8 seen working 2026-11-13"),
)


def pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(p * len(xs)) - 1))]


def score_row(fit_on: str, scored: str, coll: str, errs: list, big: list) -> dict:
    """One row of the stored scores: medians and p90s over a sweep (every size; sizes above 1 MiB)."""
    return {"fit": fit_on, "scored": scored, "collective": coll, "points": len(errs),
            "median": statistics.median(errs), "p90": q(errs, 0.9),
            "median_above_1mib": statistics.median(big) if big else None, "p90_above_1mib": q(big, 0.9) if big else None}


# ---------------------------------------------------------------- fit

#: the collectives that pay for the rank's own shard (bytes / n) at a rate of their own
SHARDED = ("all_reduce", "all_gather", "reduce_scatter")
PROTOS = ("ll", "simple")
#: the latency's form by the records' method: the eager loop's small-message floor is the host's, and grew with
#: every rank on one lease (x2 from 2 to 4 ranks, broadcast and send/recv included): LL "per_rank"; the graph
#: records' device time (H200: +1.3-2.8 us from 2 to 3 ranks, +0.1-1.0 from 3 to 4; broadcast and send/recv flat)
#: grows as the busBw factor, the fraction of the buffer each rank sends ((n-1)/n, 2(n-1)/n, 1), not as the ring's
#: steps: "share", a latency per unit of factor, with LL's bytes on NCCL's own channels (:func:`ll_channels`) at
#: NCCL's own LL rate per channel (:func:`ll_channel_gbs`), nothing of LL's bandwidth fitted
LL_FORM = {"eager": "per_rank", "graph": "share"}
#: messages this large are bandwidth-bound on NVLink (the latency is < 10% of their time in the records)
BANDWIDTH_BOUND = 8 << 20


def _cols(colls, proto, free_hop, share=False, ll_nccl=False):
    """The fit's columns: a latency per collective; the link's rate and each sharded collective's shard rate (none
    where LL's bytes are priced on NCCL's channels, ``ll_nccl``, but a send/recv's own link rate); ``hop`` (per
    step) or ``share`` (per unit of factor)."""
    lat = [("lat", c) for c in colls]
    bw = ([("link", "send_recv")] if "send_recv" in colls else []) if ll_nccl else (
        [("link", None)] + [("shard", c) for c in colls if c in SHARDED])
    return lat + bw + ([("hop", None)] if free_hop else []) + ([("share", None)] if share else [])


def _x(col, coll, n, nbytes, per_rank):
    k, c = col
    if k == "lat":   # a latency per participating rank (x n; the eager records' LL) or a base
        return float(c == coll) * (n if per_rank else 1.0)
    if k == "link":
        return nbytes * BUSBW_FACTOR[coll](n) / 1e3 if c in (None, coll) else 0.0
    if k == "shard":
        return nbytes / n / 1e3 if c == coll else 0.0
    if k == "share":
        return float(BUSBW_FACTOR[coll](n))
    return float(RING_STEPS[coll](n))


def _solve(pts, proto, link, cols, free_hop, channel=math.inf, link_gbs=math.inf, per_rank=False, pair=False):
    """Bounded least squares in relative error; a send/recv on channels slower than ``link_gbs`` pays its bytes at
    ``channels x channel`` (fixed) instead of the link's rate; with ``pair``, a :data:`PAIRED` collective at 2 ranks
    pays the broadcast's latency (the broadcast's columns) and NCCL's per-step latency past its first step, as
    :func:`gpusim.cost.collectives.law_us` prices it with ``pair_us``. Returns (solution by column, loss)."""
    t = np.array([p[3] for p in pts])
    share = ("share", None) in cols
    fixed_hop = 0.0 if free_hop or share else link.hop_us[proto]
    X, y = [], []
    for c, b, n, tt in pts:
        paired = pair and n == 2 and c in PAIRED
        row = [_x(col, "broadcast" if paired and col[0] in ("lat", "share") else c, n, b, per_rank) for col in cols]
        extra = (RING_STEPS[c](2) - 1) * link.hop_us[proto] if paired else RING_STEPS[c](n) * fixed_hop
        if ("link", None) not in cols and c != "send_recv":   # LL on NCCL's channels at NCCL's rate per channel
            extra += b * BUSBW_FACTOR[c](n) / (ll_channels(b, n, link) * ll_channel_gbs(link) * 1e3)
        nch = p2p_channels(b, n, link) if c == "send_recv" and math.isfinite(channel) else None
        if nch is not None and nch * channel < link_gbs:
            row[cols.index(("link", None))] = 0.0
            extra += b / (nch * channel * 1e3)
        X.append(row)
        y.append(tt - extra)
    X, y = np.array(X) / t[:, None], np.array(y) / t
    lo = [1.0 / link.unidirectional_gbs if k == "link" else 0.0 for k, _ in cols]
    r = lsq_linear(X, y, bounds=(lo, [np.inf] * len(cols)))
    return dict(zip(cols, r.x)), float(np.sum(r.fun ** 2))


def _lat(sol, coll, n, link, proto) -> float:
    """The fitted latency of ``coll`` at ``n`` ranks under a solution of :func:`_solve`."""
    if ("share", None) in sol:
        return sol[("lat", coll)] + BUSBW_FACTOR[coll](n) * sol[("share", None)]
    return sol[("lat", coll)] + RING_STEPS[coll](n) * sol.get(("hop", None), link.hop_us[proto])


def _channel(pts, proto, link, cols, free_hop, sol, loss):
    """Send/recv's per-channel rate: where its largest message on the fewest NCCL channels (of those of
    ``BANDWIDTH_BOUND`` bytes or more, the records' world sizes; :func:`p2p_channels`) ran more than 10% below the
    link's fitted rate, that message's bandwidth per channel (its time less the fitted latency), kept if the refit
    (those points then channel-bound) fits the send/recvs of ``BANDWIDTH_BOUND`` bytes or more better; else inf (no
    channel limit)."""
    best = (loss, math.inf, sol)
    sr = [p for p in pts if p[0] == "send_recv" and p[1] >= BANDWIDTH_BOUND]
    if proto != "simple" or not link.nccl_p2p or not sr:
        return best
    fewest = min(p2p_channels(b, n, link) for _, b, n, _ in sr)
    _, b, n, t = max((p for p in sr if p2p_channels(p[1], p[2], link) == fewest), key=lambda p: p[1])
    lk = 1.0 / sol[("link", None)]
    lat = _lat(sol, "send_recv", n, link, proto)
    if b / t / 1e3 < 0.9 * lk and t > lat:
        ch = b / (t - lat) / 1e3 / fewest
        s, l = _solve(pts, proto, link, cols, free_hop, ch, lk)
        if _sr_error(sr, s, link, ch) < _sr_error(sr, sol, link, math.inf):
            best = (l, float(ch), s)
    return best


def _sr_error(sr, sol, link, ch) -> float:
    """Squared relative error of the send/recv points ``sr`` under a solution of :func:`_solve`."""
    lk = 1.0 / sol[("link", None)]
    out = 0.0
    for _, b, n, t in sr:
        bw = min(lk, p2p_channels(b, n, link) * ch)
        out += ((_lat(sol, "send_recv", n, link, "simple") + b / bw / 1e3 - t) / t) ** 2
    return out


def fit_protocol(pts, proto, link, ll_form="per_rank") -> dict:
    """One protocol, every collective at once: bounded least squares in relative error over (coll, bytes, n, t) of

    - ``ll_form`` "share" (the graph records, the device time), both protocols:
      ``t = base[c] + factor(n) x share + bytes x factor(n) x s_link + bytes / n x s_shard[c]``, LL's bytes instead
      at NCCL's own rate on NCCL's own channels, ``bytes x factor(n) / (ll_channels(bytes, n) x ll_channel_gbs)``
      (nothing of LL's bandwidth fitted);
    - LL, ``ll_form`` "per_rank" (the eager records: a host-bound floor that grows with every rank):
      ``t = lat[c] x n + steps(n) x hop_NCCL + bytes x factor(n) x s_link + bytes / n x s_shard[c]``;
    - Simple otherwise: ``t = base[c] + steps(n) x hop + bytes x factor(n) x s_link + bytes / n x s_shard[c]``,
      ``hop`` fitted where the points hold two world sizes or more, else NCCL's (the link's ``[nccl]``).

    With "share" on LL, an all-reduce, all-gather or reduce-scatter at 2 ranks pays the broadcast's latency
    (``base[broadcast] + share``; all-reduce NCCL's per-step latency on top) where the points hold broadcasts and
    two world sizes above 2 (``pair_us``: :func:`gpusim.cost.collectives.law_us`).
    A send/recv on fewer NCCL p2p channels than the link needs pays ``bytes / (channels x channel_gbs)`` instead
    (:func:`_channel`). ``s_link`` is never below the datasheet's one direction (a faster link is one the points do
    not resolve: a latency-bound protocol); the other figures are >= 0. Returns {"link_gbs", "hop_us" (None:
    NCCL's), "share_us" (None: none), "pair_us" (None: none), "channel_gbs", "ll_nccl", "per_rank", coll: (lat_us,
    shard_gbs)}."""
    colls = [c for c in COLLECTIVES if any(p[0] == c for p in pts)]
    share = ll_form == "share"
    ll_nccl = share and proto == "ll" and bool(link.nccl_coll)
    per_rank = proto == "ll" and ll_form == "per_rank"
    free_hop = not per_rank and not share and len({p[2] for p in pts}) > 1
    cols = _cols(colls, proto, free_hop, share, ll_nccl)
    # LL at 2 ranks: the broadcast's latency (:data:`PAIRED`), where the points hold broadcasts and two world sizes
    # above 2 (else the latency's growth with the ranks, share_us, would rest on one world size alone)
    pair = ll_nccl and "broadcast" in colls and len({p[2] for p in pts if p[2] > 2}) > 1
    sol0, loss0 = _solve(pts, proto, link, cols, free_hop, per_rank=per_rank, pair=pair)
    _, channel, sol = (loss0, math.inf, sol0) if ll_nccl else _channel(pts, proto, link, cols, free_hop, sol0, loss0)
    ll_ch = ll_channel_gbs(link)
    out = {"link_gbs": float(ll_ch * link.nccl_coll["coll_channels"]) if ll_nccl else float(1.0 / sol[("link", None)]),
           "hop_us": float(sol[("hop", None)]) if free_hop else None,
           "share_us": float(sol[("share", None)]) if share else None,
           "channel_gbs": ll_ch if ll_nccl else channel, "ll_nccl": ll_nccl, "per_rank": per_rank,
           "sr_link_gbs": float(1.0 / sol[("link", "send_recv")]) if ("link", "send_recv") in sol else None,
           "pair_us": float(sol[("lat", "broadcast")] + sol[("share", None)]) if pair else None}
    for c in colls:
        k = float(sol.get(("shard", c), 0.0))
        out[c] = (max(float(sol[("lat", c)]), 0.01), 1.0 / k if k > 1e-5 else math.inf)  # > 100 TB/s: none
    return out


def fit(data: dict, link, worlds, sizes=None, ll_form="per_rank") -> dict:
    """collective -> (LL regime, Simple regime) fitted on the world sizes ``worlds`` (and only ``sizes``, if given);
    each point goes to the protocol NCCL picks for it (:func:`gpusim.cost.collectives.nccl_protocol`); ``ll_form``:
    :func:`fit_protocol`'s (:data:`LL_FORM` by the records' method)."""
    pts = [(c, b, n, t) for (c, n), d in data.items() if n in worlds for b, t in d.items()
           if sizes is None or b in sizes]
    out = defaultdict(list)
    for proto in PROTOS:
        sel = [p for p in pts if nccl_protocol(p[0], p[1], p[2], link) == proto]
        if not sel:
            continue
        f = fit_protocol(sel, proto, link, ll_form)
        for c in COLLECTIVES:
            if c in f:
                lat, shard = f[c]
                rank = lat if f["per_rank"] else None   # base = rank: the latency per participating rank
                # a send/recv's p2p channels (Simple); an LL collective's ring channels (a send/recv's LL: one)
                ch = f["channel_gbs"] if (c == "send_recv") != f["ll_nccl"] else math.inf
                link_gbs = f["sr_link_gbs"] if c == "send_recv" and f["ll_nccl"] else f["link_gbs"]
                out[c].append(Regime(proto, proto, math.inf, lat, link_gbs, rank, shard, f["hop_us"], ch,
                                     f["share_us"], f["pair_us"] if c in PAIRED else None))
    return {c: tuple(r) for c, r in out.items()}


def base_link(name: str):
    """The link file above the marker line (datasheet and NCCL's figures): what a fit starts from, whatever the
    tables below the marker hold (a refit never depends on the figures it replaces)."""
    path = links_dir() / f"{name}.toml"
    return parse_link(tomllib.loads(path.read_text().split(MARKER)[0]), str(path))


def with_fit(link, gpu, regimes, overlap=None, record="fit"):
    return dataclasses.replace(link, measured={gpu: Measured(gpu, record, regimes, overlap or {})})


def errors(link, gpu, data, worlds, sizes=None) -> dict:
    """collective -> [|pred - meas| / meas] over the points of ``worlds`` (and ``sizes``)."""
    out = defaultdict(list)
    for (coll, n), d in data.items():
        if n not in worlds:
            continue
        for b, t in d.items():
            if sizes is None or b in sizes:
                out[coll].append(abs(ring(coll, b, n, link, gpu).us - t) / t)
    return out


# ---------------------------------------------------------------- writing

def provenance(runs, gpu_name, method="eager") -> str:
    run = next(r for r in runs if r["clean"] and r["env"]["gpu_name"] == gpu_name)
    e = run["env"]
    worlds = sorted({r["env"]["world_size"] for r in runs if r["clean"] and r["env"]["gpu_name"] == gpu_name})
    paths = sorted({r["path"] for r in runs if r["clean"] and r["env"]["gpu_name"] == gpu_name})
    return (f"{', '.join(paths)} ({e['gpu_name']}, world sizes {worlds}, {e['utc'][:10]}, NCCL {e['nccl']}, "
            f"torch {e['torch']}, NCCL_NVLS_ENABLE=0; `NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run "
            f"--nproc-per-node N validation/measure/collectives.py {'--graph ' if method == 'graph' else ''}--out "
            f"FILE`), clean runs only{GRAPH_NOTE if method == 'graph' else ''}, fitted by "
            "validation/fit/fit_collectives.py")


def link_text(path: Path, blocks: list[str]) -> str:
    head = path.read_text().split(MARKER)[0].rstrip("\n")
    return head + "\n\n" + MARKER + "\n" + "\n".join(blocks)


def scored(link, gpu, data, worlds, sizes=None) -> tuple[dict, dict]:
    """Errors over ``sizes`` (all if None), and over those above 1 MiB."""
    sizes = sizes if sizes is not None else {b for d in data.values() for b in d}
    return (errors(link, gpu, data, worlds, sizes),
            errors(link, gpu, data, worlds, {b for b in sizes if b > (1 << 20)}))


def _rows(fit_on, where, errs, big) -> list[dict]:
    return [score_row(fit_on, where, c, errs[c], big.get(c, [])) for c in COLLECTIVES if errs.get(c)]


def score_gpu(data, base, gpu, ll_form="per_rank") -> list[dict]:
    """In sample; each world size left out (fit on the others); alternate sizes left out (fit on 1 KiB x 4^k)."""
    worlds = sorted({n for _, n in data})
    full = with_fit(base, gpu, fit(data, base, worlds, ll_form=ll_form))
    rows = _rows(f"n={worlds}", f"n={worlds} (in sample)", *scored(full, gpu, data, worlds))
    for w in worlds if len(worlds) > 1 else []:
        rest = [x for x in worlds if x != w]
        rows += _rows(f"n={rest}", f"n={w} (left out)", *scored(with_fit(base, gpu, fit(data, base, rest, ll_form=ll_form)), gpu,
                                                                  data, [w]))
    sizes = {b for d in data.values() for b in d}
    even = {b for b in sizes if round(math.log(b / 1024, 4), 6).is_integer()}
    alt = with_fit(base, gpu, fit(data, base, worlds, even, ll_form))
    return rows + _rows("1 KiB x 4^k", "sizes between (left out)", *scored(alt, gpu, data, worlds, sizes - even))


def leave_one_gpu_out(results) -> list[dict]:
    """Fit on one GPU's records (every world size), score another GPU's on the same link."""
    rows = []
    for a, ra in results.items():
        for b, rb in results.items():
            if a != b and ra["link"] == rb["link"]:
                link = with_fit(ra["base"], b, ra["regimes"])
                rows += _rows(a, b, *scored(link, b, rb["data"], sorted({n for _, n in rb["data"]})))
    return rows


def _summary(results, logo) -> dict:
    def one(r):
        return {"gpu_name": r["gpu_name"], "link": r["link"], "worlds": r["worlds"], "rows": r["rows"],
                "method": r["method"], "noise": {c: statistics.median([e for k, e in r["noise"]["clean"] if k == c])
                                                 for c in COLLECTIVES if any(k == c for k, _ in r["noise"]["clean"])}}
    return {"gpus": {g: {**one(r), **({"eager": one(r["eager"])} if "eager" in r else {})}
                     for g, r in results.items()}, "leave_one_gpu_out": logo}


def fit_gpu(runs, gpu_name, method=None) -> tuple[dict, str]:
    """One GPU's fit and scores on its runs of one method (graph where recorded: :func:`CM.fit_data`; overlap from
    every run): the results entry and its link-file block."""
    link_name, gpu = GPUS[gpu_name]
    base = base_link(link_name)
    method, sel, data, filled = CM.fit_data(runs, gpu_name, method)
    ref = provenance(sel, gpu_name, method) + "".join(f"; {c} from the eager records (no graph record)"
                                                      for c in filled)
    regimes = fit(data, base, sorted({n for _, n in data}), ll_form=LL_FORM[method])
    ov = overlap_figures(runs, gpu_name)
    full = with_fit(base, gpu, regimes, ov)
    reference = [(g, n, c, bw, ring(c, 1 << 30, n, full, g).busbw_gbs, ring(c, 1 << 30, n, full, g).source, w)
                 for g, lk, n, c, bw, w in REFERENCE if lk == link_name]
    busbw = {(c, n): max(d) * BUSBW_FACTOR[c](n) / (d[max(d)] * 1e3) for (c, n), d in data.items()}
    worlds, rows = sorted({n for _, n in data}), score_gpu(data, base, gpu, LL_FORM[method])
    eager = points(CM.select(runs, gpu_name, "eager")[1], gpu_name) if method == "graph" else {}
    for w in sorted({n for _, n in eager} - set(worlds)):   # above 1 MiB the eager loop is not host-bound
        big = {b for d in eager.values() for b in d if b > 1 << 20}
        rows += _rows(f"n={worlds} (graph)", f"eager records n={w}, > 1 MiB (left out)",
                      *scored(full, gpu, eager, [w], big))
    res = {"gpu_name": gpu_name, "link": link_name, "ref": ref, "data": data, "regimes": regimes, "method": method,
           "rows": rows, "worlds": worlds, "base": base,
           "noise": noise(sel, gpu_name), "overlap": ov, "reference": reference, "busbw": busbw,
           "small": small_by_run(sel, gpu_name)}
    return res, measured_block(gpu, gpu_name, regimes, ov, ref, base.unidirectional_gbs)


def run(paths, check=False) -> dict:
    runs = load_runs(paths)
    results, blocks = {}, defaultdict(list)
    for gpu_name in sorted({r["env"]["gpu_name"] for r in runs if r["clean"]}):
        if gpu_name not in GPUS:
            print(f"skipping {gpu_name}: add it to GPUS (its link and spec name)", file=sys.stderr)
            continue
        res, block = fit_gpu(runs, gpu_name)   # graph replay (device time) where recorded
        eager = CM.select(runs, gpu_name, "eager")[1]
        if res["method"] == "graph" and any(r["clean"] for r in eager):  # what back-to-back eager calls pay
            res["eager"] = fit_gpu(runs, gpu_name, "eager")[0]
        res["compare"] = CM.compare(runs, gpu_name)
        res["alignment"] = CM.alignment(runs, gpu_name)
        results[GPUS[gpu_name][1]] = res
        blocks[GPUS[gpu_name][0]].append(block)
    summary = _summary(results, leave_one_gpu_out(results))
    outputs = {links_dir() / f"{ln}.toml": link_text(links_dir() / f"{ln}.toml", bl) for ln, bl in blocks.items()}
    outputs[SCORES] = json.dumps(summary, indent=1, sort_keys=True) + "\n"
    stale = write(outputs, check)
    return {"results": results, "stale": stale, "summary": summary}


def write(outputs: dict, check: bool) -> list:
    """Write ``{path: text}`` (or, with ``check``, write nothing and say which would change); the stale paths."""
    stale = [p for p, text in outputs.items() if not p.exists() or p.read_text() != text]
    for p in stale if check else outputs:
        if check:
            print(f"stale: {os.path.relpath(p, ROOT)} (run python3 -m validation.reports.collectives_page)")
        else:
            p.write_text(outputs[p])
            print(f"wrote {os.path.relpath(p, ROOT)}")
    return stale


def table(summary) -> str:
    """The leave-one-world-out table as printed: per GPU and collective, the median over each scored sweep."""
    lines = []
    for gpu, g in summary["gpus"].items():
        for r in g["rows"]:
            lines.append(f"{gpu:10s} fit {r['fit']:14s} -> {r['scored']:26s} {r['collective']:15s} median "
                         f"{pct(r['median']):>6s}  (> 1 MiB {pct(r['median_above_1mib']):>6s})")
    for r in summary["leave_one_gpu_out"]:
        lines.append(f"fit {r['fit']} -> {r['scored']} {r['collective']:15s} median {pct(r['median']):>6s}  "
                     f"(> 1 MiB {pct(r['median_above_1mib']):>6s})")
    return "\n".join(lines)


def default_records() -> list[str]:
    return sorted(glob.glob(str(ROOT / "validation/results/collectives/*.jsonl")))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="*", help="JSONL records (default: validation/results/collectives/*.jsonl)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a written file would change")
    args = ap.parse_args(argv)
    out = run(args.records or default_records(), check=args.check)
    print(table(out["summary"]))
    return 1 if args.check and out["stale"] else 0


if __name__ == "__main__":
    sys.exit(main())
