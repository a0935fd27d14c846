"""Hardware: the links between GPUs (``hwspecs/links/*.toml``) as frozen, validated data.

A link file gives, each figure as ``{ value = ..., source = ..., ref = ... }``:

- ``[datasheet]``: the bandwidth per GPU as the datasheet states it (both directions together), one direction's
  share, and the link count;
- ``[nccl]``: NCCL's own ring latencies for the link's class (``src/graph/tuning.cc``: a base latency and a latency
  per ring step, for the LL and Simple protocols); optionally its modelled bus bandwidths (``busbw_ll``,
  ``busbw_simple``: with the latencies, the protocol NCCL picks) and its point-to-point set-up (``p2p_channels``,
  ``p2p_channels_per_peer``, ``p2p_chunk_bytes``: how many channels a send/recv gets), as NCCL logged them; and its
  ring channels and LL's per-call rule (``coll_channels``, ``ll_max_threads``, ``ll_thread_threshold``: how many
  channels an LL collective runs on), optionally the same rule's figures for Simple (``simple_max_threads``,
  ``simple_thread_threshold``: how many channels, one CTA each, a Simple collective holds);
- ``[measured."<gpu>"]``, written by ``validation/fit/fit_collectives.py`` from our own sweeps: per collective, one
  regime per protocol (``protocol``, optionally ``max_bytes``, ``base_us``, ``link_gbs``, and optionally
  ``rank_us``, ``hop_us``, ``share_us``, ``pair_us``, ``shard_gbs``, ``channel_gbs``), and ``overlap`` (how much concurrent compute slows
  while NCCL runs).

:func:`link_spec` finds a link by name, alias (``"nvlink4"``, ``"h100-sxm"``, ``"ib"``) or path; a bad file raises
:class:`LinkError`, one line naming the file and field. The laws that read these live in
:mod:`gpusim.cost.collectives`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from gpusim.hw.schema import builtin_dir, read_toml
from gpusim.hw.spec import split_figure
from gpusim.util.errors import GpusimError

SOURCES = ("datasheet", "measured", "derived")
SCOPES = ("intra-host", "inter-host")
NCCL_CLASSES = ("nvlink", "pci", "net")
PROTOCOLS = ("ll", "simple")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv")
OVERLAP = ("gemm_slowdown", "copy_slowdown", "comm_slowdown")
_TOP = {"name", "display_name", "aliases", "scope", "nccl_class", "datasheet", "nccl", "measured"}
_DATASHEET = {"bandwidth_gbs": False, "unidirectional_gbs": False, "links": True}
_NCCL = ("base_us_ll", "base_us_simple", "hop_us_ll", "hop_us_simple")
_NCCL_BUSBW = ("busbw_ll", "busbw_simple")   # optional: NCCL's own modelled bus bandwidths (its TUNING table)
_NCCL_P2P = ("p2p_channels", "p2p_channels_per_peer", "p2p_chunk_bytes")   # optional: NCCL's p2p set-up (its log)
#: optional: NCCL's channels of a ring collective and its per-call rule for LL (its log, TUNING table and device.h)
_NCCL_COLL = ("coll_channels", "ll_max_threads", "ll_thread_threshold")
#: optional beside them: the same rule's figures for Simple (how many channels, so SMs, a large collective holds)
_NCCL_SIMPLE = ("simple_max_threads", "simple_thread_threshold")
_REGIME = {"base_us": True, "link_gbs": True, "rank_us": False, "shard_gbs": False, "hop_us": False,
           "channel_gbs": False, "share_us": False, "pair_us": False}  # figure -> required


class LinkError(GpusimError):
    """A link spec that cannot be found or is malformed; one line naming file and field."""


@dataclass(frozen=True)
class Regime:
    """One regime of one collective (a protocol; optionally only up to ``max_bytes``):
    ``base_us + (n-1) x rank_us + steps(n) x hop_us + bytes x factor(n) / link_gbs + (bytes / n) / shard_gbs``;
    with ``share_us``, ``factor(n) x share_us`` replaces ``steps(n) x hop_us``.

    ``link_gbs`` is one direction of one GPU's link (the ring moves ``bytes x factor(n)`` over it); ``rank_us`` is the
    latency each rank past the first adds (None: none); ``hop_us`` the latency of one step of the ring's chain (None:
    NCCL's own figure for the protocol, ``[nccl]``); ``shard_gbs`` (inf: none) prices the rank's own shard,
    ``bytes / n``; ``share_us`` (None: none) a latency per unit of the bus-bandwidth factor (the fraction of the
    buffer each rank sends); ``channel_gbs`` (inf: none) the rate of one NCCL channel (a send/recv's p2p channels; an
    LL collective's ring channels, as many as NCCL's per-call rule gives it); ``pair_us`` (None: none) the latency
    of one transfer between the two GPUs of a 2-rank ring, which a ring collective at 2 ranks pays (plus NCCL's
    per-step latency for each step past the first) in place of its own latency (see
    :func:`gpusim.cost.collectives.law_us`)."""
    name: str
    protocol: str
    max_bytes: float
    base_us: float
    link_gbs: float
    rank_us: float | None = None
    shard_gbs: float = math.inf
    hop_us: float | None = None
    channel_gbs: float = math.inf
    share_us: float | None = None
    pair_us: float | None = None


@dataclass(frozen=True)
class Measured:
    """What our sweeps on one GPU kind fitted for this link: regimes per collective, and overlap factors."""
    gpu: str
    record: str
    regimes: dict = field(hash=False)   # collective -> tuple[Regime, ...] by max_bytes
    overlap: dict = field(hash=False)   # name in OVERLAP -> factor (>= 1)


@dataclass(frozen=True)
class LinkSpec:
    name: str
    display_name: str
    aliases: tuple
    scope: str
    nccl_class: str
    bandwidth_gbs: float
    unidirectional_gbs: float
    links: int | None
    base_us: dict = field(hash=False)   # protocol -> NCCL base latency (us)
    hop_us: dict = field(hash=False)    # protocol -> NCCL latency per ring step (us)
    measured: dict = field(hash=False)  # gpu name -> Measured
    provenance: dict = field(hash=False, repr=False)  # figure key -> (source, ref)
    nccl_busbw: dict = field(default_factory=dict, hash=False)  # protocol -> NCCL's modelled bus bandwidth (GB/s)
    nccl_p2p: dict = field(default_factory=dict, hash=False)    # _NCCL_P2P name -> NCCL's p2p set-up (integers)
    nccl_coll: dict = field(default_factory=dict, hash=False)   # _NCCL_COLL name -> NCCL's ring channels, LL rule

    def __hash__(self):
        return hash(self.name)


def links_dir() -> Path:
    return builtin_dir() / "links"


def _figure(path, where, raw, prov, key, integer=False):
    if not isinstance(raw, dict):
        raise LinkError(f"{path}: field {where} must be {{ value = ..., source = ..., ref = ... }}, got {raw!r}")
    v, src, ref = split_figure(raw, f"{path}: field {where}", SOURCES, LinkError)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise LinkError(f"{path}: field {where} must be a positive number, got {v!r}")
    if integer and int(v) != v:
        raise LinkError(f"{path}: field {where} must be a whole number, got {v!r}")
    prov[key] = (src, ref)
    return int(v) if integer else float(v)


def _table(path, data, key) -> dict:
    t = data.get(key)
    if not isinstance(t, dict):
        raise LinkError(f"{path}: section [{key}] is missing; add it (see hwspecs/links/nvlink4.toml)")
    return t


def _regimes(path, gpu, coll, t, prov) -> tuple:
    out = []
    for rname, r in t.items():
        where = f"[measured.\"{gpu}\".{coll}.{rname}]"
        if not isinstance(r, dict) or set(r) - {"protocol", "max_bytes", *_REGIME}:
            raise LinkError(f"{path}: {where} must hold protocol, max_bytes, base_us, link_gbs (and optionally "
                            "rank_us, shard_gbs, hop_us, channel_gbs, share_us, pair_us)")
        if r.get("protocol") not in PROTOCOLS:
            raise LinkError(f"{path}: {where}.protocol must be one of {', '.join(PROTOCOLS)}, got {r.get('protocol')!r}")
        mb = r.get("max_bytes", math.inf)
        if isinstance(mb, bool) or not isinstance(mb, (int, float)) or mb <= 0:
            raise LinkError(f"{path}: {where}.max_bytes must be a positive number, got {mb!r}")
        k = f"measured.{gpu}.{coll}.{rname}"
        fig = {f: _figure(path, f"{where}.{f}", r.get(f), prov, f"{k}.{f}") for f in _REGIME
               if f in r or _REGIME[f]}
        out.append(Regime(rname, r["protocol"], float(mb), fig["base_us"], fig["link_gbs"], fig.get("rank_us"),
                          fig.get("shard_gbs", math.inf), fig.get("hop_us"), fig.get("channel_gbs", math.inf),
                          fig.get("share_us"), fig.get("pair_us")))
    if not out:
        raise LinkError(f"{path}: [measured.\"{gpu}\".{coll}] has no regimes")
    return tuple(sorted(out, key=lambda r: r.max_bytes))


def _measured(path, data, prov) -> dict:
    out = {}
    for gpu, m in (data.get("measured") or {}).items():
        if not isinstance(m, dict) or not isinstance(m.get("record"), str) or not isinstance(m.get("gpu"), str):
            raise LinkError(f"{path}: [measured.\"{gpu}\"] must name its gpu and record (strings)")
        bad = set(m) - {"gpu", "record", "overlap", *COLLECTIVES}
        if bad:
            raise LinkError(f"{path}: [measured.\"{gpu}\"] has unknown keys {sorted(bad)}; "
                            f"known: gpu, record, overlap, {', '.join(COLLECTIVES)}")
        regimes = {c: _regimes(path, gpu, c, m[c], prov) for c in COLLECTIVES if c in m}
        ov = m.get("overlap", {})
        if set(ov) - set(OVERLAP):
            raise LinkError(f"{path}: [measured.\"{gpu}\".overlap] keys must be among {', '.join(OVERLAP)}")
        overlap = {k: _figure(path, f"[measured.\"{gpu}\".overlap].{k}", v, prov, f"measured.{gpu}.overlap.{k}")
                   for k, v in ov.items()}
        out[gpu] = Measured(m["gpu"], m["record"], regimes, overlap)
    return out


def parse_link(data: dict, path: str) -> LinkSpec:
    """A link file's TOML document -> :class:`LinkSpec` (every figure checked, with its provenance)."""
    bad = set(data) - _TOP
    if bad:
        raise LinkError(f"{path}: unknown top-level keys {sorted(bad)}; known: {', '.join(sorted(_TOP))}")
    for k in ("name", "display_name"):
        if not isinstance(data.get(k), str) or not data[k]:
            raise LinkError(f"{path}: field {k} must be a non-empty string")
    if data.get("scope") not in SCOPES:
        raise LinkError(f"{path}: field scope must be one of {', '.join(SCOPES)}, got {data.get('scope')!r}")
    if data.get("nccl_class") not in NCCL_CLASSES:
        raise LinkError(f"{path}: field nccl_class must be one of {', '.join(NCCL_CLASSES)}, "
                        f"got {data.get('nccl_class')!r}")
    aliases = data.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise LinkError(f"{path}: field aliases must be a list of strings")
    prov: dict = {}
    ds, nc = _table(path, data, "datasheet"), _table(path, data, "nccl")
    for k in set(ds) - set(_DATASHEET):
        raise LinkError(f"{path}: unknown field [datasheet].{k}; known: {', '.join(_DATASHEET)}")
    fig = {k: _figure(path, f"[datasheet].{k}", ds[k], prov, k, integer) for k, integer in _DATASHEET.items()
           if k != "links" or k in ds}
    for k in ("bandwidth_gbs", "unidirectional_gbs"):
        if k not in ds:
            raise LinkError(f"{path}: field [datasheet].{k} is missing")
    lat = {}
    for k in _NCCL:
        if k not in nc:
            raise LinkError(f"{path}: field [nccl].{k} is missing")
        lat[k] = _figure(path, f"[nccl].{k}", nc[k], prov, k)
    known = _NCCL + _NCCL_BUSBW + _NCCL_P2P + _NCCL_COLL + _NCCL_SIMPLE
    for k in set(nc) - set(known):
        raise LinkError(f"{path}: unknown field [nccl].{k}; known: {', '.join(known)}")
    busbw = {k.removeprefix("busbw_"): _figure(path, f"[nccl].{k}", nc[k], prov, k) for k in _NCCL_BUSBW if k in nc}
    p2p = {k: _figure(path, f"[nccl].{k}", nc[k], prov, k, True) for k in _NCCL_P2P if k in nc}
    if p2p and len(p2p) != len(_NCCL_P2P):
        raise LinkError(f"{path}: [nccl] must give all of {', '.join(_NCCL_P2P)} or none")
    coll = {k: _figure(path, f"[nccl].{k}", nc[k], prov, k, True) for k in _NCCL_COLL if k in nc}
    if coll and len(coll) != len(_NCCL_COLL):
        raise LinkError(f"{path}: [nccl] must give all of {', '.join(_NCCL_COLL)} or none")
    simple = {k: _figure(path, f"[nccl].{k}", nc[k], prov, k, True) for k in _NCCL_SIMPLE if k in nc}
    if simple and (len(simple) != len(_NCCL_SIMPLE) or not coll):
        raise LinkError(f"{path}: [nccl] must give all of {', '.join(_NCCL_SIMPLE)} with {', '.join(_NCCL_COLL)}, "
                        "or none of them")
    coll.update(simple)
    return LinkSpec(data["name"], data["display_name"], tuple(aliases), data["scope"], data["nccl_class"],
                    fig["bandwidth_gbs"], fig["unidirectional_gbs"], fig.get("links"),
                    {"ll": lat["base_us_ll"], "simple": lat["base_us_simple"]},
                    {"ll": lat["hop_us_ll"], "simple": lat["hop_us_simple"]},
                    _measured(path, data, prov), prov, busbw, p2p, coll)


def read_link(path) -> LinkSpec:
    path = Path(path)
    return parse_link(read_toml(path, LinkError), str(path))


def known_links() -> list[str]:
    return sorted(p.stem for p in links_dir().glob("*.toml"))


def _index() -> dict:
    idx = {}
    for p in sorted(links_dir().glob("*.toml")):
        spec = read_link(p)
        for key in (spec.name, *spec.aliases):
            idx.setdefault(key.lower(), p)
    return idx


def link_spec(name_or_path) -> LinkSpec:
    """A link by name (``nvlink4``), alias (``nvlink-4``, ``h100-sxm``, ``ib``) or path to a ``.toml`` file."""
    s = str(name_or_path)
    if s.endswith(".toml") or Path(s).is_file():
        if not Path(s).is_file():
            raise LinkError(f"{s}: no such link spec file")
        return read_link(s)
    p = _index().get(s.lower().removesuffix("-calibrated"))
    if p is None:
        raise LinkError(f"unknown link {s!r}; known: {', '.join(known_links())} (or a path to a .toml file)")
    return read_link(p)
