"""The collective laws (gpusim.cost.collectives) on recorded NCCL sweeps, their properties, and the link files."""

import dataclasses
import glob
import math
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from gpusim.cost import collectives as C
from gpusim.hw.links import COLLECTIVES, LinkError, link_spec, known_links, read_link
from validation.fit import collectives_records as CM
from validation.fit import fit_collectives as F

ROOT = Path(__file__).resolve().parents[1]
RECORDS = sorted(glob.glob(str(ROOT / "validation/results/collectives/*.jsonl")))
#: the law's median error over a sweep may exceed the run-to-run noise (the median over every recorded size of
#: |run A - run B| / mean between two clean runs of one world size: 1.2% on the H200 graph-replay records, two runs
#: of each world size on one lease) by at most this margin: the issue's 5% target
MARGIN = 0.05
#: leave-one-world-size-out medians as measured on the graph-replay records (device time; docs/collectives.md; world
#: 2, 3 and 4, two or more runs each on 4-H200 leases; sharded collectives' records with shards off 16 bytes left
#: out), latency per unit of the busBw factor, LL's bytes on NCCL's own channels at NCCL's LL rate, and LL at 2 ranks
#: with the broadcast's latency (pair_us): the issue's 5% target is met with world 3 or world 4 left out (every
#: collective) and with world 2 left out for all-reduce (4.0%), reduce-scatter (3.9%) and broadcast (3.5%), not for
#: all-gather and send/recv (5.2% each; before pair_us all-reduce 9.0%, all-gather 9.2%, reduce-scatter 8.7%);
#: (world left out, collective) -> (median over every size, median over sizes above 1 MiB)
LOO_MEASURED = {
    (2, "all_reduce"): (0.040, 0.036), (2, "all_gather"): (0.052, 0.047), (2, "reduce_scatter"): (0.039, 0.075),
    (2, "broadcast"): (0.036, 0.048), (2, "send_recv"): (0.052, 0.034),
    (3, "all_reduce"): (0.033, 0.025), (3, "all_gather"): (0.035, 0.034), (3, "reduce_scatter"): (0.023, 0.045),
    (3, "broadcast"): (0.028, 0.034), (3, "send_recv"): (0.035, 0.032),
    (4, "all_reduce"): (0.033, 0.019), (4, "all_gather"): (0.046, 0.037), (4, "reduce_scatter"): (0.050, 0.024),
    (4, "broadcast"): (0.027, 0.026), (4, "send_recv"): (0.036, 0.035),
}
NCCL_LOG = ROOT / "validation/results/collectives/h200-x2-2026-11-28-nccl.txt"
NCCL_FUNCS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
              "Broadcast": "broadcast"}


@pytest.fixture(scope="module")
def recorded():
    """(runs, the points of the method the law is fitted on, graph replay where recorded, else eager; those runs'
    run-to-run noise; the LL form of the method)."""
    runs = F.load_runs(RECORDS)
    gpu_name = "NVIDIA H200"
    method, sel, data, _ = CM.fit_data(runs, gpu_name)
    return runs, data, F.noise(sel, gpu_name), F.LL_FORM[method]


def _noise(noise):
    """Median run-to-run |difference| / mean over every size, between clean runs of one world size."""
    return statistics.median(e for _, e in noise["clean"])


def _bound(noise):
    return _noise(noise) + MARGIN


def test_records_exist_and_are_clean(recorded):
    runs, data, noise, form = recorded
    assert any(r["clean"] for r in runs), "no clean run (NCCL_DEBUG unset) in the records"
    assert {c for c, _ in data} == set(COLLECTIVES)
    assert len(noise["between"]) >= 20 and len(noise["clean"]) >= 100
    # 1.2% between the graph-replay runs (11.9% between the eager loop's, whose small messages are the host's
    # launch-bound floor, 7-20 us from lease to lease): the bounds below rest on this figure
    assert _noise(noise) < (0.03 if form == "nccl" else 0.15), "run-to-run noise grew: the bounds below rest on it"


def test_shipped_figures_predict_the_records(recorded):
    """The figures in hwspecs/links/nvlink4.toml, through the library's law, on every recorded size."""
    _, data, noise, form = recorded
    link = link_spec("nvlink4")
    errs = F.errors(link, "h200-sxm", data, sorted({n for _, n in data}))
    for coll in COLLECTIVES:
        assert statistics.median(errs[coll]) <= _bound(noise), (coll, statistics.median(errs[coll]))


def test_sizes_left_out_are_predicted(recorded):
    """Fit on 1 KiB x 4^k, predict the sizes between (interpolation across the sweep)."""
    _, data, noise, form = recorded
    base = link_spec("nvlink4")
    worlds = sorted({n for _, n in data})
    sizes = {b for d in data.values() for b in d}
    even = {b for b in sizes if round(math.log(b / 1024, 4), 6).is_integer()}
    link = F.with_fit(base, "h200-sxm", F.fit(data, base, worlds, even, form))
    errs = F.errors(link, "h200-sxm", data, worlds, sizes - even)
    for coll in COLLECTIVES:
        assert statistics.median(errs[coll]) <= _bound(noise), (coll, statistics.median(errs[coll]))


def test_world_size_left_out_guard(recorded):
    """Guard at the measured leave-one-world-out error; the issue's target is 5%.

    Fit on the other world sizes, predict the one left out: the medians over the sweep may not exceed those
    measured when the world-aware law was fitted (LOO_MEASURED, docs/collectives.md) by more than the run-to-run
    noise (every size) or, above 1 MiB, than the noise there (p90 of |run A - run B| / mean). The 5% target is met
    with world 3 or 4 left out (asserted), not with world 2 left out; the guard keeps that from getting worse."""
    _, data, noise, form = recorded
    worlds = sorted({n for _, n in data})
    if len(worlds) < 2:
        pytest.skip(f"records hold world size(s) {worlds} only: nothing to leave out")
    base = link_spec("nvlink4")
    big = F.q(noise["between"], 0.9)
    for w in worlds:
        link = F.with_fit(base, "h200-sxm", F.fit(data, base, [x for x in worlds if x != w], ll_form=form))
        errs, errs_big = F.scored(link, "h200-sxm", data, [w])
        for coll in COLLECTIVES:
            every, above = LOO_MEASURED[(w, coll)]
            assert statistics.median(errs[coll]) <= every + _noise(noise), (w, coll, statistics.median(errs[coll]))
            assert statistics.median(errs_big[coll]) <= above + big, (w, coll, statistics.median(errs_big[coll]))
            if w > 2:   # the target, #33
                assert statistics.median(errs[coll]) <= 0.05, (w, coll, statistics.median(errs[coll]))
    if all(v <= 0.05 for v, _ in LOO_MEASURED.values()):
        pytest.fail("the issue's 5% target is met: assert it here instead of the guard")


def test_link_figures_are_shared():
    """The link's figures (bandwidth of one direction, the latency per unit of the busBw factor; LL's rate per NCCL
    channel) are one per protocol, whichever the ring collective (a send/recv's LL rate is its own); latencies and
    shard rates are the collective's own. LL's bandwidth is NCCL's, not fitted: its rate per channel is NCCL's
    (0.5 x bwIntra), its channels' product the link's figure."""
    nv = link_spec("nvlink4")
    m = nv.measured["h200-sxm"]
    by_regime = {}
    for coll, rs in m.regimes.items():
        for r in rs:
            if not (coll == "send_recv" and r.protocol == "ll"):
                by_regime.setdefault(r.name, set()).add((r.link_gbs, r.hop_us, r.share_us))
    assert set(by_regime) == {"ll", "simple"} and all(len(v) == 1 for v in by_regime.values()), by_regime
    ll = next(r for r in m.regimes["all_reduce"] if r.protocol == "ll")
    assert ll.channel_gbs == C.ll_channel_gbs(nv) == 0.5 * 360.0 / 24
    assert ll.link_gbs == pytest.approx(24 * ll.channel_gbs)


def test_ll_channels_follow_nccl():
    """NCCL's per-call channels of an LL ring collective (src/enqueue.cc topoGetAlgoInfo) are the ones NCCL 2.28.9
    logged for each LL call of the 2x H200 sweep up to 128 KiB (above, its plan splits the last channels' work and
    logs 22 of the 24); on more ranks the same message runs on fewer channels (the threshold grows with the ranks)."""
    nv = link_spec("nvlink4")
    seen = 0
    for line in NCCL_LOG.read_text().split("# per-call choices (summary)")[1].splitlines():
        parts = line.split()
        if len(parts) < 5 or parts[0] not in NCCL_FUNCS or parts[3] != "LL" or int(parts[1]) < 1024:
            continue
        coll, count = NCCL_FUNCS[parts[0]], int(parts[1])
        nbytes = count * 2 if coll in ("all_gather", "reduce_scatter") else count   # nccl-tests' size
        if nbytes <= 128 << 10:
            assert C.ll_channels(nbytes, 2, nv) == int(parts[4].rstrip(":")), line
            seen += 1
    assert seen >= 15
    assert [C.ll_channels(64 << 10, n, nv) for n in (2, 3, 4, 8)] == [8, 5, 4, 2]
    assert C.ll_channels(1 << 20, 4, nv) == 24 and C.ll_channels(1024, 4, nv) == 1


def test_p2p_channels_follow_nccl_and_the_records():
    """NCCL's p2p rule: 16 channels per send/recv of 1-256 MiB on 2 ranks, 8 on 4 (per-peer channels halved while
    they times the world exceed 32), 16 from 256 MiB on 4; the 4-rank records show it: 128 MiB runs at ~262 GB/s
    (8 channels), 256 MiB at ~360 GB/s, as on 2 ranks."""
    nv = link_spec("nvlink4")
    assert [C.p2p_channels(s << 20, 2, nv) for s in (1, 128, 256, 1024)] == [16, 16, 16, 32]
    assert [C.p2p_channels(s << 20, 4, nv) for s in (1, 128, 256, 1024)] == [8, 8, 16, 32]
    w4 = [C.send_recv(s << 20, nv, "h200-sxm") for s in (128, 256)]
    r4 = [C.ring("send_recv", s << 20, 4, nv, "h200-sxm").busbw_gbs for s in (128, 256)]
    assert r4[0] < 0.8 * r4[1] and w4[0].busbw_gbs > r4[0]


def test_protocol_is_nccls_choice():
    """The protocol NCCL 2.28.9 logged for every call of the 2x H200 sweep (its per-call summary: function, bytes
    per rank, algorithm, protocol) is the one gpusim picks, at every size of the log."""
    nv = link_spec("nvlink4")
    seen = 0
    for line in NCCL_LOG.read_text().split("# per-call choices (summary)")[1].splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[0] not in NCCL_FUNCS or int(parts[1]) < 1024:
            continue
        coll, count = NCCL_FUNCS[parts[0]], int(parts[1])
        nbytes = count * 2 if coll in ("all_gather", "reduce_scatter") else count   # nccl-tests' size
        assert parts[2] == "RING"
        assert C.nccl_protocol(coll, nbytes, 2, nv) == parts[3].lower(), line
        seen += 1
    assert seen >= 60
    # on 4 ranks NCCL's model keeps 2 MiB all-reduces on LL (6 ring steps of Simple latency outweigh LL's bandwidth)
    assert C.nccl_protocol("all_reduce", 2 << 20, 4, nv) == "ll" != C.nccl_protocol("all_reduce", 2 << 20, 2, nv)


def test_world_size_changes_time_both_ways():
    """World-aware: small messages cost more on more ranks where each rank sends more of the buffer (the busBw
    factor: all-reduce, all-gather, reduce-scatter), the same for a broadcast and a send/recv (as measured by graph
    replay: 10.7-10.9 us at 2-4 ranks for a small broadcast); at 1 GiB the bus bandwidth of all-gather climbs with
    the world size towards the link's (the rank's own shard weighs less), as measured."""
    nv = link_spec("nvlink4")
    for coll in COLLECTIVES:
        small = [C.ring(coll, 4096, n, nv, "h200-sxm").us for n in (2, 4, 8)]
        assert small[0] <= small[1] <= small[2], (coll, small)
        if coll in ("broadcast", "send_recv"):
            assert small[0] == pytest.approx(small[2]), (coll, small)
        else:
            assert small[0] < small[2], (coll, small)
    bw = [C.all_gather(1 << 30, n, nv, "h200-sxm").busbw_gbs for n in (2, 4, 8)]
    top = next(r for r in nv.measured["h200-sxm"].regimes["all_gather"] if r.protocol == "simple").link_gbs
    assert bw[0] < bw[1] < bw[2] < top, bw


def test_a_wrong_law_fails(recorded):
    """The checks can fail: half the fitted bandwidths (link and shard) miss the records above 1 MiB by far more than
    the bound."""
    _, data, noise, form = recorded
    link = link_spec("nvlink4")
    m = link.measured["h200-sxm"]
    halved = {c: tuple(dataclasses.replace(r, link_gbs=r.link_gbs / 2, shard_gbs=r.shard_gbs / 2) for r in rs)
              for c, rs in m.regimes.items()}
    bad = dataclasses.replace(link, measured={"h200-sxm": dataclasses.replace(m, regimes=halved)})
    _, errs = F.scored(bad, "h200-sxm", data, [2, 4])
    assert statistics.median(errs["all_reduce"]) > _bound(noise)


def test_link_file_and_pages_are_up_to_date():
    from validation.reports import collectives_page
    assert collectives_page.main(["--check"]) == 0, "run python3 -m validation.reports.collectives_page"


LINKS = [link_spec(n) for n in known_links()]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(COLLECTIVES), st.integers(2, 64), st.integers(1, 1 << 31), st.integers(1, 1 << 31),
       st.sampled_from(LINKS), st.sampled_from(["h200-sxm", "h100", None]))
def test_monotone_in_bytes(coll, n, a, b, link, gpu):
    """More bytes never take less time, but across one of NCCL's LL channel steps (a message just below a step runs on
    one channel fewer, as NCCL runs it): there the drop is at most the bytes' time on the channels below."""
    lo, hi = sorted((a, b))
    t_lo, t_hi = C.ring(coll, lo, n, link, gpu), C.ring(coll, hi, n, link, gpu)
    steps = t_lo.protocol == t_hi.protocol == "ll" and C.ll_channels(lo, n, link) != C.ll_channels(hi, n, link)
    drop = lo * C.BUSBW_FACTOR[coll](n) / (C.ll_channels(lo, n, link) * C.ll_channel_gbs(link) * 1e3) if steps else 0
    assert t_lo.us <= t_hi.us + drop + 1e-9


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(COLLECTIVES), st.integers(2, 64), st.integers(1, 1 << 31), st.floats(1.0, 10.0),
       st.sampled_from(LINKS))
def test_more_bandwidth_is_never_slower(coll, n, nbytes, scale, link):
    faster = dataclasses.replace(
        link, unidirectional_gbs=link.unidirectional_gbs * scale,
        measured={g: dataclasses.replace(m, regimes={c: tuple(dataclasses.replace(r, link_gbs=r.link_gbs * scale,
                                                                                  shard_gbs=r.shard_gbs * scale)
                                                              for r in rs) for c, rs in m.regimes.items()})
                  for g, m in link.measured.items()})
    assert C.ring(coll, nbytes, n, faster, "h200-sxm").us <= C.ring(coll, nbytes, n, link, "h200-sxm").us + 1e-9


def test_result_fields_and_sources():
    nv = link_spec("nvlink-4")
    r = C.all_reduce(1 << 30, 2, nv, "h200-sxm-calibrated")
    assert (r.algorithm, r.protocol, r.source) == ("ring", "simple", "measured")
    assert r.busbw_gbs == pytest.approx(r.algbw_gbs * 2 * (2 - 1) / 2)
    assert C.all_gather(1 << 30, 4, nv, "h100-sxm").source == "measured on h200-sxm"
    assert C.broadcast(1 << 20, 4, link_spec("nvlink3"), "a100").source == "datasheet"
    assert C.all_reduce(1 << 20, 1, nv).us == 0.0
    h = C.hierarchical("all_reduce", 1 << 30, 8, 2, nv, link_spec("ib"), "h100")
    assert h.world == 16 and h.algorithm == "hierarchical ring" and h.source.startswith("unvalidated")
    assert h.us > C.all_reduce(1 << 30, 8, nv, "h100").us   # the network leg only adds
    assert C.concurrent_compute_slowdown(nv, "h200-sxm")[0] > 1.0


def test_aliases_resolve():
    assert link_spec("h100-sxm").name == link_spec("NVLink4").name == "nvlink4"
    assert link_spec("ib").name == "ib-ndr400" and link_spec("pcie4").name == "pcie4-x16"
    with pytest.raises(LinkError, match="unknown link"):
        link_spec("nvlink9")


GOOD = (ROOT / "hwspecs/links/nvlink3.toml").read_text()


@pytest.mark.parametrize("edit, field", [
    (lambda s: s.replace('source = "datasheet"', 'source = "guess"', 1), "bandwidth_gbs"),
    (lambda s: s.replace("value = 600.0", "value = -600.0"), "bandwidth_gbs"),
    (lambda s: s.replace('scope = "intra-host"', 'scope = "nearby"'), "scope"),
    (lambda s: s.replace("hop_us_ll = ", "hop_us_lx = "), "hop_us_ll"),
    (lambda s: s + '\n[measured."a100"]\ngpu = "A100"\nrecord = "x"\n[measured."a100".all_reduce.ll]\n'
                   'protocol = "ll"\nbase_us = 1.0\n', "base_us"),
    (lambda s: s.replace("[nccl]", "[nccl"), "not valid TOML"),
    (lambda s: s.replace("[nccl]\n", '[nccl]\np2p_channels = { value = 32, source = "derived", ref = "log" }\n'),
     "p2p_chunk_bytes"),
    (lambda s: s.replace("[nccl]\n", '[nccl]\nbusbw_lx = { value = 1.0, source = "derived", ref = "log" }\n'),
     "busbw_lx"),
])
def test_bad_link_file_is_one_line_error(tmp_path, edit, field):
    p = tmp_path / "bad.toml"
    p.write_text(edit(GOOD))
    with pytest.raises(LinkError) as e:
        read_link(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and field in msg
    assert read_link(ROOT / "hwspecs/links/nvlink3.toml").unidirectional_gbs == 300.0


def test_leave_one_gpu_out_scores_the_other_gpus_records(recorded):
    """One GPU's fit scores another GPU's records on the same link: with the H200 records standing in for a second
    GPU, the scores are the in-sample ones (and nothing is scored across different links)."""
    _, data, _, form = recorded
    base = F.base_link("nvlink4")
    worlds = sorted({n for _, n in data})
    regimes = F.fit(data, base, worlds, ll_form=form)
    results = {g: {"link": "nvlink4", "base": base, "regimes": regimes, "data": data} for g in ("h200-sxm", "h100-sxm")}
    rows = F.leave_one_gpu_out(results)
    assert {(r["fit"], r["scored"]) for r in rows} == {("h200-sxm", "h100-sxm"), ("h100-sxm", "h200-sxm")}
    inside = F.errors(F.with_fit(base, "h200-sxm", regimes), "h200-sxm", data, worlds)
    for r in rows:
        assert r["median"] == pytest.approx(statistics.median(inside[r["collective"]]))
    results["h100-sxm"]["link"] = "pcie5-x16"
    assert F.leave_one_gpu_out(results) == []


def test_two_ranks_take_the_broadcasts_latency(recorded):
    """At 2 ranks LL's all-reduce, all-gather and reduce-scatter take the broadcast's latency (pair_us = its base +
    share; all-reduce NCCL's 0.6 us for its second step): the figure is the broadcast's, the law prices it, and it
    is what carries worlds 3 and 4 to world 2 (without it, all-reduce left out at 2 ranks misses by over 8%). With
    one world size above 2 the fit has no pair_us (the latency's growth would rest on that one world)."""
    _, data, _, form = recorded
    nv = link_spec("nvlink4")
    m = nv.measured["h200-sxm"]
    ll = {c: next(r for r in rs if r.protocol == "ll") for c, rs in m.regimes.items()}
    for c in C.PAIRED:
        assert ll[c].pair_us == pytest.approx(ll["broadcast"].base_us + ll["broadcast"].share_us, abs=0.01), c
    assert ll["broadcast"].pair_us is None and ll["send_recv"].pair_us is None
    bc = C.broadcast(1024, 2, nv, "h200-sxm").us
    assert C.all_reduce(1024, 2, nv, "h200-sxm").us - bc == pytest.approx(nv.hop_us["ll"], abs=0.2)
    assert abs(C.all_gather(1024, 2, nv, "h200-sxm").us - bc) < 0.2   # only the bytes differ
    assert C.all_gather(1024, 3, nv, "h200-sxm").us > bc + 1.0   # from 3 ranks the collective's own latency
    if form != "share" or not all(("broadcast", n) in data for n in (2, 3, 4)):
        pytest.skip("needs graph records of worlds 2, 3 and 4")
    base = link_spec("nvlink4")
    fitted = F.fit(data, base, [3, 4], ll_form=form)
    assert all(r.pair_us is not None for c in C.PAIRED for r in fitted[c] if r.protocol == "ll")
    unpaired = {c: tuple(dataclasses.replace(r, pair_us=None) for r in rs) for c, rs in fitted.items()}
    errs = {k: statistics.median(F.scored(F.with_fit(base, "h200-sxm", f), "h200-sxm", data, [2])[0]["all_reduce"])
            for k, f in (("paired", fitted), ("unpaired", unpaired))}
    assert errs["paired"] <= 0.05 < 0.08 < errs["unpaired"], errs
    assert all(r.pair_us is None for rs in F.fit(data, base, [2, 4], ll_form=form).values() for r in rs)
