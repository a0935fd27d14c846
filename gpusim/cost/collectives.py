"""Cost: NCCL collectives, one small law each, in NCCL's own terms (its ``src/graph/tuning.cc``).

For a ring of ``n`` ranks over one link, a message of ``bytes`` (nccl-tests' size: the larger buffer; all-gather's
gathered output, reduce-scatter's full input) with protocol ``p``::

    time = base_us[c, p] + (n-1) x rank_us[c, p] + steps_c(n) x hop_us[p]   (or + factor_c(n) x share_us[p])
           + bytes x factor_c(n) / bw + (bytes / n) / shard_gbs[c, p]

- the protocol is NCCL's own choice (:func:`nccl_protocol`): its tuner's model, ``latency + bytes x factor / busBw``
  with its base and per-step latencies and its bus bandwidths (``[nccl]`` of the link file), the faster of LL and
  Simple; send/recv by NCCL's point-to-point rule (LL up to ``NCCL_P2P_LL_THRESHOLD``, 16 KiB, on one channel).
  So the size where LL gives way to Simple moves with the world size as NCCL's does (2 MiB all-reduces are LL on
  4 ranks, Simple on 2);
- ``steps`` is the chain a ring walks (all-reduce 2(n-1); all-gather, reduce-scatter and broadcast n-1; send/recv 1)
  and ``hop_us`` its latency per step (fitted where the records hold two world sizes; else NCCL's); where a regime
  has ``share_us`` instead, the latency grows as ``factor_c(n) x share_us``: the graph-replay records' device time
  (H200, 2-4 ranks, 8 KiB and below: +1.3-2.8 us from 2 to 3 ranks, +0.1-1.0 from 3 to 4, broadcast and
  send/recv flat) grows as the fraction of the buffer each rank sends, not as NCCL's tuner's steps x hwLat;
- at 2 ranks an all-reduce, all-gather or reduce-scatter (:data:`PAIRED`) whose regime has ``pair_us`` takes that
  latency in place of its own, plus NCCL's per-step latency for each step past its first (all-reduce: one): the
  broadcast's latency, fitted on the other world sizes. At 2 ranks the ring's two neighbours are one GPU and each
  step is one transfer each way, as a broadcast's hop is; from 3 ranks the chain is a cycle through distinct GPUs.
  NCCL itself has no 2-rank branch there (same Ring / LL / one channel at 2-4 ranks in its logs); the H200 graph
  records show it: at 8 KiB and below all-gather 10.3, reduce-scatter 10.9, broadcast 10.9, all-reduce 11.1 us at
  2 ranks (medians), broadcast 11.0-11.3 at 3-4 while the others rise to 12.2-14.9;
- ``factor`` is nccl-tests' bus-bandwidth factor (all-reduce 2(n-1)/n; all-gather and reduce-scatter (n-1)/n;
  broadcast and send/recv 1): the bytes each rank moves over its link, so ``bw = link_gbs`` is one figure of the
  link (one direction of one GPU's NVLink), shared by every collective and world size; an LL regime with
  ``channel_gbs`` runs on the ring channels NCCL gives the call (:func:`ll_channels`, its thread-threshold rule:
  1 channel up to 8 KiB at 2 ranks, 24 from 192 KiB) at ``channels x channel_gbs`` (NCCL's own LL rate per channel,
  :func:`ll_channel_gbs`: LL's 8 data bytes per 16-byte line), so LL's bandwidth at mid sizes moves with the world
  size as NCCL's channel choice does;
- ``bytes / n`` is the rank's own shard, paid once at a rate of the collective's own (``shard_gbs``, Simple; measured, not
  in NCCL's model: with it the link's bandwidth is one figure from 2 to 4 ranks, where nccl-tests' bus bandwidth
  climbs from 265 to 325 GB/s for all-gather on H200);
- ``rank_us`` (optional): a latency per rank past the first. The figures price a collective's DEVICE time where
  the GPU's records hold CUDA-graph replays (``validation/measure/collectives.py --graph``; H200: 1-8 KiB messages
  take 10-15 us: a base and ``share_us`` per unit of factor, no ``rank_us``); fitted on the eager loop's records
  instead (back-to-back eager c10d calls, whose small messages are
  the host's launch-bound floor, x2 from 2 to 4 ranks for every collective), LL takes a latency per participating
  rank (``base_us = rank_us``). The host's issue cost of a c10d call is the simulator's (the host profile), not
  this law's;
- a send/recv runs on the channels NCCL's p2p rule gives it (:func:`p2p_channels`: fewer per peer on more ranks),
  at ``min(link_gbs, channels x channel_gbs)``;
- figures are fitted from our own sweeps of that GPU and link (``[measured."<gpu>"]``, by
  ``validation/fit/fit_collectives.py``); a link or GPU never measured is priced from the datasheet's one-direction
  bandwidth and NCCL's Simple-protocol latencies (``source="datasheet"``: a ceiling, optimistic).

Ring only. TODO: NCCL's tree all-reduce (chosen across hosts at mid sizes) and NVLS (off on the lent machines).
Across hosts (``nnodes > 1``) a collective is a hierarchical composition (intra-host ring, inter-host ring over the
network link, intra-host ring), documented but unvalidated: no multi-host machine has been measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpusim.hw.links import LinkSpec, Regime
from gpusim.hw.schema import ALIASES
from gpusim.util.errors import UserError

BUSBW_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0, "send_recv": lambda n: 1.0}
RING_STEPS = {"all_reduce": lambda n: 2 * (n - 1), "all_gather": lambda n: n - 1,
              "reduce_scatter": lambda n: n - 1, "broadcast": lambda n: n - 1, "send_recv": lambda n: 1}
#: the steps NCCL's tuner charges its per-step latency for (tuning.cc: a broadcast on rings that share channels pays
#: one hop, whatever n)
TUNER_STEPS = {**RING_STEPS, "broadcast": lambda n: 1}
#: the ring collectives whose chain is a cycle through every rank (each waits on data its neighbour forwarded or
#: reduced in the same call); at 2 ranks both neighbours are one GPU and the chain is one transfer each way per step,
#: priced from the broadcast's latency where the regime has ``pair_us`` (:func:`law_us`)
PAIRED = ("all_reduce", "all_gather", "reduce_scatter")
#: NCCL's NCCL_P2P_LL_THRESHOLD default (src/enqueue.cc): a send/recv of up to this many bytes per channel uses LL;
#: below 64 KiB (its smallest part, p2pChunkSize / 8) it runs on one channel
P2P_LL_THRESHOLD = 16384
#: NCCL's LL protocol moves half its line in flags (tuning.cc: ring LL busBw = busBw x 0.5); used where the link
#: file lacks NCCL's printed bus bandwidths
LL_FRACTION = 0.5


@dataclass(frozen=True)
class CollectiveTime:
    """One collective's predicted time; ``algbw``/``busbw`` in nccl-tests' sense (GB/s)."""
    collective: str
    bytes: int
    world: int
    us: float
    algbw_gbs: float
    busbw_gbs: float
    algorithm: str   # "ring" or "hierarchical ring"
    protocol: str    # "ll" or "simple" (of the regime used; the inter-host leg's for hierarchical)
    source: str      # "measured", "measured on <gpu>" (same link, another GPU) or "datasheet"
    channels: int | None = None   # CTAs NCCL's kernel runs, one a channel (:func:`kernel_channels`; None: unknown)


def _gpu_key(gpu: str | None) -> str | None:
    if gpu is None:
        return None
    g = gpu.lower().removesuffix("-calibrated")
    return ALIASES.get(g, g)


def regimes(link: LinkSpec, collective: str, gpu: str | None = None) -> tuple[tuple, str]:
    """The regimes that price ``collective`` on ``link`` for ``gpu``, and their source: that GPU's measured fit;
    else the same link measured on another GPU; else one Simple regime from the datasheet."""
    key = _gpu_key(gpu)
    if key in link.measured and collective in link.measured[key].regimes:
        return link.measured[key].regimes[collective], "measured"
    for other, m in sorted(link.measured.items()):
        if collective in m.regimes:
            return m.regimes[collective], f"measured on {other}"
    return (Regime("datasheet", "simple", math.inf, link.base_us["simple"], link.unidirectional_gbs),), "datasheet"


def nccl_busbw(link: LinkSpec, protocol: str) -> float:
    """NCCL's modelled bus bandwidth of a ring on ``link`` (GB/s): its TUNING table's where the link file holds it,
    else the datasheet's one direction (Simple) and half of it (LL, NCCL's LL factor)."""
    if protocol in link.nccl_busbw:
        return link.nccl_busbw[protocol]
    return link.unidirectional_gbs * (LL_FRACTION if protocol == "ll" else 1.0)


def nccl_model_us(collective: str, nbytes: float, world: int, link: LinkSpec, protocol: str) -> float:
    """NCCL's tuner time of a ring (tuning.cc): ``baseLat + steps x hwLat + bytes x factor / busBw``."""
    return (link.base_us[protocol] + TUNER_STEPS[collective](world) * link.hop_us[protocol]
            + nbytes * BUSBW_FACTOR[collective](world) / (nccl_busbw(link, protocol) * 1e3))


def nccl_protocol(collective: str, nbytes: float, world: int, link: LinkSpec) -> str:
    """The protocol NCCL picks: the faster of LL and Simple in its tuner's model; send/recv: LL up to 16 KiB."""
    if collective == "send_recv":
        return "ll" if nbytes <= P2P_LL_THRESHOLD else "simple"
    return min(("ll", "simple"), key=lambda p: (nccl_model_us(collective, nbytes, world, link, p), p))


def switch_bytes(collective: str, world: int, link: LinkSpec) -> float:
    """The largest message NCCL still sends with LL (0: none): where its tuner's two lines cross."""
    if collective == "send_recv":
        return P2P_LL_THRESHOLD
    dlat = nccl_model_us(collective, 0, world, link, "simple") - nccl_model_us(collective, 0, world, link, "ll")
    dslope = (nccl_model_us(collective, 1e9, world, link, "ll") - nccl_model_us(collective, 0, world, link, "ll")
              - nccl_model_us(collective, 1e9, world, link, "simple")
              + nccl_model_us(collective, 0, world, link, "simple")) / 1e9
    return max(0.0, dlat / dslope) if dslope > 0 else (math.inf if dlat > 0 else 0.0)


def p2p_channels(nbytes: float, world: int, link: LinkSpec) -> int | None:
    """The channels NCCL gives one send/recv of ``nbytes`` in a communicator of ``world`` ranks (src/enqueue.cc:
    the per-peer channels, halved while they times the world exceed the p2p channels; one per 1/8 chunk up to that;
    doubled while a part exceeds 32 chunks); None where the link file lacks NCCL's p2p set-up."""
    p = link.nccl_p2p
    if not p:
        return None
    lo = p["p2p_channels_per_peer"]
    while lo * world > p["p2p_channels"] and lo > 1:
        lo //= 2
    nch = max(1, min(lo, math.ceil(nbytes / (p["p2p_chunk_bytes"] / 8))))
    while math.ceil(nbytes / nch) > 32 * p["p2p_chunk_bytes"] and nch <= p["p2p_channels_per_peer"] // 2:
        nch *= 2
    return nch


def ll_channels(nbytes: float, world: int, link: LinkSpec) -> int | None:
    """The ring channels NCCL runs an LL collective of ``nbytes`` on (src/enqueue.cc topoGetAlgoInfo: one channel
    fewer while ``bytes < channels x threads x threshold``, the threshold being NCCL_LL_THREAD_THRESHOLD x the ranks
    for a ring), between 1 and the link's ring channels; None where the link file lacks NCCL's ring set-up. As in
    NCCL, a message just below a step runs on one channel fewer than one at the step, and may take longer."""
    p = link.nccl_coll
    if not p:
        return None
    return _enqueue_channels(nbytes, p["ll_max_threads"] * p["ll_thread_threshold"] * world, p)


def _enqueue_channels(nbytes: float, per_channel: float, p: dict) -> int:
    """src/enqueue.cc's rule: one channel fewer while ``bytes < channels x per_channel``, between 1 and the
    link's ring channels (``per_channel``: the protocol's threads x its per-thread threshold)."""
    return max(1, min(p["coll_channels"], int(nbytes // per_channel)))


def ll_channel_gbs(link: LinkSpec) -> float:
    """NCCL's own rate of one ring channel with LL (tuning.cc: ring LL busBw = 0.5 x channels x bwIntra, LL's 8 data
    bytes per 16-byte line; bwIntra the Simple bus bandwidth per channel); inf without NCCL's ring set-up."""
    if not link.nccl_coll:
        return math.inf
    return LL_FRACTION * nccl_busbw(link, "simple") / link.nccl_coll["coll_channels"]


def kernel_channels(collective: str, nbytes: float, world: int, link: LinkSpec) -> int | None:
    """The channels NCCL runs one call on, one CTA (on one SM) each: a send/recv by the p2p rule
    (:func:`p2p_channels`); a ring collective with LL by :func:`ll_channels`; with Simple by the same rule of
    src/enqueue.cc (one channel fewer while ``bytes < channels x threads x threshold``) on Simple's threads and
    threshold (512 x 64 B: all 24 ring channels from 768 KiB on NVLink 4), else all ring channels. None where the link
    file lacks NCCL's set-up."""
    if collective == "send_recv":
        return p2p_channels(nbytes, 2, link)
    if nccl_protocol(collective, nbytes, world, link) == "ll":
        return ll_channels(nbytes, world, link)
    p = link.nccl_coll
    if not p:
        return None
    if "simple_max_threads" not in p:
        return p["coll_channels"]
    return _enqueue_channels(nbytes, p["simple_max_threads"] * p["simple_thread_threshold"], p)


def sm_share_factor(channels: int | None, sm_count: int) -> float:
    """How much slower a compute-bound kernel runs while an NCCL kernel of ``channels`` CTAs is resident beside it:
    NCCL's CTAs hold ``channels`` SMs (one each, whether moving data or waiting for a peer) and the kernel's waves run
    on the rest: ``sm_count / (sm_count - channels)`` (H200, 24 channels: 132 / 108 = 1.222), the many-waves limit. A
    grid of about one wave slows more (two waves on the SMs left), one of fewer CTAs than the SMs left less: on 2
    H200s beside a waiting 24-channel all-reduce, bf16 GEMMs and convolutions 1.02-1.86x, median 1.21x
    (``validation/results/dist/h200-x2-2026-11-28-run8-sm_share.jsonl``); a streaming memory-bound kernel does not
    miss the SMs (fp32 adds 1.00x; it shares bandwidth with NCCL's transfer instead). 1.0 with no channels known."""
    if not channels or channels <= 0:
        return 1.0
    return sm_count / max(1, sm_count - channels)


def law_us(collective: str, nbytes: float, world: int, regime: Regime, link: LinkSpec) -> float:
    """One regime's law: ``base + (n-1) x rank + steps(n) x hop + bytes x factor(n) / bw + (bytes / n) /
    shard_gbs`` (us), or with ``share_us`` ``base + factor(n) x share_us + ...``; ``bw`` is ``link_gbs``, lower for
    a send/recv on few p2p channels (:func:`p2p_channels`) and for an LL collective on few ring channels
    (:func:`ll_channels`): ``channels x channel_gbs``; no ``hop_us``: NCCL's per-step latency of the protocol."""
    hop = link.hop_us[regime.protocol] if regime.hop_us is None else regime.hop_us
    bw = regime.link_gbs
    if math.isfinite(regime.channel_gbs):
        if collective == "send_recv":
            nch = p2p_channels(nbytes, world, link)
        else:
            nch = ll_channels(nbytes, world, link) if regime.protocol == "ll" else None
        bw = bw if nch is None else min(bw, nch * regime.channel_gbs)
    if world == 2 and regime.pair_us is not None and collective in PAIRED:   # one transfer each way, per step
        lat = regime.pair_us + (RING_STEPS[collective](2) - 1) * link.hop_us[regime.protocol]
    else:
        lat = regime.base_us + (world - 1) * (regime.rank_us or 0.0) + (
            BUSBW_FACTOR[collective](world) * regime.share_us if regime.share_us is not None
            else RING_STEPS[collective](world) * hop)
    return (lat + nbytes * BUSBW_FACTOR[collective](world) / (bw * 1e3)
            + nbytes / world / (regime.shard_gbs * 1e3))


def _pick(rs: tuple, protocol: str, nbytes: float) -> Regime:
    own = [r for r in rs if r.protocol == protocol] or list(rs)
    return next((r for r in own if nbytes <= r.max_bytes), own[-1])


def ring(collective: str, nbytes: float, world: int, link: LinkSpec, gpu: str | None = None) -> CollectiveTime:
    """:func:`law_us` of the regime of the protocol NCCL picks (:func:`nccl_protocol`), over one ring of ``world``
    ranks.

    A message is never priced below the largest one of the other protocol (monotone in bytes across NCCL's switch,
    whatever the fitted figures). One rank (or no bytes) costs nothing."""
    if collective not in BUSBW_FACTOR:
        raise UserError(f"unknown collective {collective!r}; known: {', '.join(BUSBW_FACTOR)}")
    if world < 1 or nbytes < 0:
        raise UserError(f"{collective}: world size must be >= 1 and bytes >= 0, got {world} and {nbytes}")
    if world == 1 or nbytes == 0:
        return CollectiveTime(collective, int(nbytes), world, 0.0, math.inf, math.inf, "ring", "none", "trivial")
    rs, source = regimes(link, collective, gpu)
    proto = nccl_protocol(collective, nbytes, world, link)
    r = _pick(rs, proto, nbytes)
    floors = [law_us(collective, g.max_bytes, world, g, link) for g in rs
              if g.protocol == r.protocol and g.max_bytes < nbytes]
    if proto == "simple" and any(g.protocol == "ll" for g in rs):
        edge = min(switch_bytes(collective, world, link), nbytes)
        floors.append(law_us(collective, edge, world, _pick(rs, "ll", edge), link))
    us = max([law_us(collective, nbytes, world, r, link)] + floors)
    algbw = nbytes / us / 1e3
    return CollectiveTime(collective, int(nbytes), world, us, algbw, algbw * BUSBW_FACTOR[collective](world), "ring",
                          r.protocol, source, kernel_channels(collective, nbytes, world, link))


def all_reduce(nbytes, world, link, gpu=None) -> CollectiveTime:
    """Ring all-reduce: ``base + (n-1) x rank + 2(n-1) x hop + bytes x 2(n-1)/n / link + bytes/n / shard`` (see
    :func:`ring`)."""
    return ring("all_reduce", nbytes, world, link, gpu)


def all_gather(nbytes, world, link, gpu=None) -> CollectiveTime:
    """Ring all-gather of ``bytes`` gathered in all: ``base + (n-1) x rank + bytes x (n-1)/n / link
    + bytes/n / shard``."""
    return ring("all_gather", nbytes, world, link, gpu)


def reduce_scatter(nbytes, world, link, gpu=None) -> CollectiveTime:
    """Ring reduce-scatter of ``bytes`` input in all: ``base + (n-1) x rank + bytes x (n-1)/n / link
    + bytes/n / shard``."""
    return ring("reduce_scatter", nbytes, world, link, gpu)


def broadcast(nbytes, world, link, gpu=None) -> CollectiveTime:
    """Pipelined ring broadcast: ``base + (n-1) x rank + bytes / link`` (see :func:`ring`)."""
    return ring("broadcast", nbytes, world, link, gpu)


def send_recv(nbytes, link, gpu=None) -> CollectiveTime:
    """One point-to-point transfer: ``base + (n-1) x rank + bytes / link`` (n: the communicator's size) (see :func:`ring`)."""
    return ring("send_recv", nbytes, 2, link, gpu)


def hierarchical(collective: str, nbytes: float, nproc_per_node: int, nnodes: int, intra: LinkSpec,
                 inter: LinkSpec, gpu: str | None = None) -> CollectiveTime:
    """Across hosts, as a composition of rings (UNVALIDATED: no multi-host machine measured):

    - all-reduce: reduce-scatter inside the host (bytes), all-reduce of bytes/g between hosts (one ring per local
      rank, each on its own NIC), all-gather inside the host (bytes);
    - all-gather / reduce-scatter: the inter-host ring on bytes/g, then (before, for reduce-scatter) the intra-host
      ring on bytes;
    - broadcast: between hosts (bytes), then inside each host (bytes); send/recv: the inter-host link alone.
    Reads both links' figures as :func:`ring` does."""
    g, m = nproc_per_node, nnodes
    if m == 1:
        return ring(collective, nbytes, g, intra, gpu)
    parts = {"all_reduce": [("reduce_scatter", nbytes, g, intra), ("all_reduce", nbytes / g, m, inter),
                            ("all_gather", nbytes, g, intra)],
             "all_gather": [("all_gather", nbytes / g, m, inter), ("all_gather", nbytes, g, intra)],
             "reduce_scatter": [("reduce_scatter", nbytes, g, intra), ("reduce_scatter", nbytes / g, m, inter)],
             "broadcast": [("broadcast", nbytes, m, inter), ("broadcast", nbytes, g, intra)],
             "send_recv": [("send_recv", nbytes, 2, inter)]}[collective]
    legs = [ring(c, b, n, lk, gpu) for c, b, n, lk in parts]
    us = sum(leg.us for leg in legs)
    n = g * m
    algbw = nbytes / us / 1e3 if us else math.inf
    net = next(leg for leg, part in zip(legs, parts) if part[3] is inter)
    return CollectiveTime(collective, int(nbytes), n, us, algbw, algbw * BUSBW_FACTOR[collective](n),
                          "hierarchical ring", net.protocol, "unvalidated: " + ", ".join(sorted({x.source for x in legs})))


def concurrent_compute_slowdown(link: LinkSpec, gpu: str | None = None, bound: str = "compute") -> tuple[float, str]:
    """How much a kernel slows while NCCL runs beside it (NCCL's kernels take SMs and memory bandwidth):
    ``[measured."<gpu>".overlap].gemm_slowdown`` for compute-bound kernels, ``copy_slowdown`` for memory-bound
    ones; 1.0 (``"unmeasured"``) where no sweep measured it."""
    key = {"compute": "gemm_slowdown", "memory": "copy_slowdown"}.get(bound)
    if key is None:
        raise UserError(f"bound must be 'compute' or 'memory', got {bound!r}")
    g = _gpu_key(gpu)
    order = ([g] if g in link.measured else []) + sorted(k for k in link.measured if k != g)
    for k in order:
        if key in link.measured[k].overlap:
            return link.measured[k].overlap[key], ("measured" if k == g else f"measured on {k}")
    return 1.0, "unmeasured"


def copy_us(nbytes: float, spec) -> float:
    """A memory-bound copy kernel a wrapper adds (a bucket copy, FSDP's copy-in/out, a division): ``nbytes`` read
    plus written at the GPU's streaming efficiency, never below the spec's minimum kernel time."""
    if nbytes <= 0:
        return spec.kernel_min_us
    return max(spec.kernel_min_us, spec.kernel_fixed_us + nbytes / (spec.mem_efficiency * spec.bandwidth) * 1e6)


def link_for(spec, link=None) -> LinkSpec:
    """The link a GPU's ranks talk over inside a host: ``link`` (a name, alias or path; a LinkSpec as is), else
    the link whose aliases name the GPU spec (``h100-sxm`` -> NVLink 4). Raises :class:`UserError` (one line) when
    none does."""
    from gpusim.hw.links import link_spec
    if isinstance(link, LinkSpec):
        return link
    if link is not None:
        return link_spec(link)
    key = _gpu_key(spec.name)
    try:
        return link_spec(key)
    except Exception:  # noqa: BLE001 - one clear line below
        raise UserError(f"no link spec names the GPU {spec.name!r} (hwspecs/links/*.toml aliases); say how its "
                        "GPUs are connected: --link / link= (e.g. nvlink4, pcie5-x16)") from None
