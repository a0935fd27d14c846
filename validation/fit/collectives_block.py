"""The ``[measured."<gpu>"]`` block of a link file (``hwspecs/links/*.toml``) that
:mod:`validation.fit.fit_collectives` writes: each fitted figure of each regime with its provenance line
(:func:`gpusim.hw.spec_io.figure_line`), and the overlap factors."""

from __future__ import annotations

import math

from gpusim.hw.spec_io import figure_line


def measured_block(gpu, gpu_name, regimes, overlap, ref, ceiling=math.inf) -> str:
    lines = [f'[measured."{gpu}"]', f'gpu = "{gpu_name}"', f'record = "{ref.split(" (")[0]}"']
    for coll, regs in regimes.items():
        for r in regs:
            lines += ["", f'[measured."{gpu}".{coll}.{r.name}]', f'protocol = "{r.protocol}"']
            if math.isfinite(r.max_bytes):
                lines.append(f"max_bytes = {int(r.max_bytes)}")
            if r.rank_us is not None:
                what = (f"latency of {coll} per participating rank with NCCL's LL protocol (the law's base_us + "
                        "(n-1) x rank_us: latency proportional to the world size; joint fit of the protocol)")
                lines.append(figure_line("base_us", round(r.base_us, 2), "measured", f"{what}; {ref}"))
                lines.append(figure_line("rank_us", round(r.base_us, 2), "measured", f"{what}; {ref}"))
            else:
                lines.append(figure_line("base_us", round(r.base_us, 2), "measured",
                                         f"base latency of {coll} with NCCL's {r.protocol} protocol (joint fit of the "
                                         f"protocol); {ref}"))
            ll_ring = r.protocol == "ll" and math.isfinite(r.channel_gbs) and coll != "send_recv"
            if ll_ring:   # LL on NCCL's channels: their rate binds, never the link's
                lines.append(figure_line("link_gbs", round(r.link_gbs, 1), "derived",
                                         "NCCL's ring channels x its LL rate per channel (coll_channels x "
                                         "channel_gbs), so the channels NCCL gives a call bind; nothing fitted"))
            elif r.share_us is not None and coll == "send_recv" and r.protocol == "ll":
                lines.append(figure_line("link_gbs", round(r.link_gbs, 1), "measured",
                                         f"rate of send/recv's LL messages (fitted on its own points; joint fit of the "
                                         f"protocol); {ref}"))
            elif r.link_gbs >= ceiling * (1 - 1e-9):   # fit_protocol's bound: the points are latency-bound
                lines.append(figure_line("link_gbs", round(r.link_gbs, 1), "derived",
                                         f"not resolved by the points of the {r.name} protocol (latency-bound): the "
                                         f"datasheet's one-direction figure; {ref}"))
            else:
                lines.append(figure_line("link_gbs", round(r.link_gbs, 1), "measured",
                                         f"one direction of one GPU's link with the {r.name} protocol, shared by every "
                                         f"collective and world size (joint fit of the protocol); {ref}"))
            if r.hop_us is not None:
                lines.append(figure_line("hop_us", round(r.hop_us, 3), "measured",
                                         f"latency of one step of the ring's chain with the {r.name} protocol, shared "
                                         f"by every collective (joint fit over world sizes); {ref}"))
            if r.share_us is not None:
                lines.append(figure_line("share_us", round(r.share_us, 3), "measured",
                                         f"latency per unit of the bus-bandwidth factor (the fraction of the buffer "
                                         f"each rank sends) with the {r.name} protocol, shared by every collective "
                                         f"(joint fit over world sizes); {ref}"))
            if r.pair_us is not None:
                lines.append(figure_line("pair_us", round(r.pair_us, 3), "measured",
                                         f"latency of {coll} at 2 ranks with the {r.name} protocol before NCCL's "
                                         "per-step latency past its first step: the broadcast's (its base_us + "
                                         "share_us; at 2 ranks the ring's two neighbours are one GPU, one transfer "
                                         f"each way; joint fit of the protocol over world sizes); {ref}"))
            if ll_ring:
                lines.append(figure_line("channel_gbs", round(r.channel_gbs, 2), "derived",
                                         "NCCL's own rate of one ring channel with LL (src/graph/tuning.cc: ring LL "
                                         "busBw = 0.5 x channels x bwIntra; [nccl] busbw_simple / coll_channels x 0.5), "
                                         "on the channels NCCL's per-call rule gives (gpusim.cost.collectives."
                                         "ll_channels)"))
            elif math.isfinite(r.channel_gbs):
                lines.append(figure_line("channel_gbs", round(r.channel_gbs, 2), "measured",
                                         f"rate of one NCCL p2p channel of {coll} with the {r.name} protocol: from the "
                                         "bandwidth of its largest message on the fewest channels, per channel, "
                                         "refined by the joint fit (channels by NCCL's rule, gpusim.cost.collectives."
                                         f"p2p_channels); {ref}"))
            if math.isfinite(r.shard_gbs):
                lines.append(figure_line("shard_gbs", round(r.shard_gbs, 1), "measured",
                                         f"rate of the rank's own shard (bytes / n) of {coll} with the {r.name} "
                                         f"protocol (joint fit of the protocol); {ref}"))
    if overlap:
        what = {"gemm_slowdown": "a bf16 8192^3 GEMM loop timed alone vs while 256 MiB bf16 all-reduces run on "
                                 "another stream (median over runs of the slower rank)",
                "copy_slowdown": "a 1 GiB fp32 device copy loop timed alone vs while 256 MiB bf16 all-reduces run "
                                 "on another stream",
                "comm_slowdown": "the 256 MiB all-reduce loop under the GEMM loop vs alone; a lower bound, since "
                                 "the all-reduce loop outlasts the GEMMs"}
        lines += ["", f'[measured."{gpu}".overlap]']
        lines += [figure_line(k, round(v, 3), "measured", f"{what[k]}; {ref}") for k, v in sorted(overlap.items())]
    return "\n".join(lines) + "\n"
