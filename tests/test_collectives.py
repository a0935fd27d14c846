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
from validation.fit import fit_collectives as F

ROOT = Path(__file__).resolve().parents[1]
RECORDS = sorted(glob.glob(str(ROOT / "validation/results/collectives/*.jsonl")))
#: the law's median error over a sweep may exceed the run-to-run noise (p90 of |run A - run B| / mean above 1 MiB,
#: 2.5% on the 2x H200 records) by at most this margin: the issue's 5% target for a collective over its sweep
MARGIN = 0.05


@pytest.fixture(scope="module")
def recorded():
    runs = F.load_runs(RECORDS)
    gpu_name = "NVIDIA H200"
    return runs, F.points(runs, gpu_name), F.noise(runs, gpu_name)


def _bound(noise):
    return F.q(noise["between"], 0.9) + MARGIN


def test_records_exist_and_are_clean(recorded):
    runs, data, noise = recorded
    assert any(r["clean"] for r in runs), "no clean run (NCCL_DEBUG unset) in the records"
    assert {c for c, _ in data} == set(COLLECTIVES)
    assert len(noise["between"]) >= 20


def test_shipped_figures_predict_the_records(recorded):
    """The figures in hwspecs/links/nvlink4.toml, through the library's law, on every recorded size."""
    _, data, noise = recorded
    link = link_spec("nvlink4")
    errs = F.errors(link, "h200-sxm", data, sorted({n for _, n in data}))
    for coll in COLLECTIVES:
        assert statistics.median(errs[coll]) <= _bound(noise), (coll, statistics.median(errs[coll]))


def test_sizes_left_out_are_predicted(recorded):
    """Fit on 1 KiB x 4^k, predict the sizes between (interpolation across the sweep)."""
    _, data, noise = recorded
    base = link_spec("nvlink4")
    worlds = sorted({n for _, n in data})
    sizes = {b for d in data.values() for b in d}
    even = {b for b in sizes if round(math.log(b / 1024, 4), 6).is_integer()}
    link = F.with_fit(base, "h200-sxm", F.fit(data, base, worlds, even))
    errs = F.errors(link, "h200-sxm", data, worlds, sizes - even)
    for coll in COLLECTIVES:
        assert statistics.median(errs[coll]) <= _bound(noise), (coll, statistics.median(errs[coll]))


def test_each_world_size_left_out_is_predicted(recorded):
    _, data, noise = recorded
    worlds = sorted({n for _, n in data})
    if len(worlds) < 2:
        pytest.skip(f"records hold world size(s) {worlds} only: nothing to leave out")
    base = link_spec("nvlink4")
    for w in worlds:
        link = F.with_fit(base, "h200-sxm", F.fit(data, base, [x for x in worlds if x != w]))
        errs = F.errors(link, "h200-sxm", data, [w])
        for coll in COLLECTIVES:
            assert statistics.median(errs[coll]) <= _bound(noise), (w, coll)


def test_a_wrong_law_fails(recorded):
    """The checks can fail: half the fitted bus bandwidth misses the records by far more than the bound."""
    _, data, noise = recorded
    link = link_spec("nvlink4")
    m = link.measured["h200-sxm"]
    halved = {c: tuple(dataclasses.replace(r, busbw_gbs=r.busbw_gbs / 2) for r in rs) for c, rs in m.regimes.items()}
    bad = dataclasses.replace(link, measured={"h200-sxm": dataclasses.replace(m, regimes=halved)})
    errs = F.errors(bad, "h200-sxm", data, [2])
    assert statistics.median(errs["all_reduce"]) > _bound(noise)


def test_link_file_is_up_to_date():
    assert not F.run(RECORDS, check=True)["stale"], "run python3 validation/fit/fit_collectives.py"


LINKS = [link_spec(n) for n in known_links()]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(COLLECTIVES), st.integers(2, 64), st.integers(1, 1 << 31), st.integers(1, 1 << 31),
       st.sampled_from(LINKS), st.sampled_from(["h200-sxm", "h100", None]))
def test_monotone_in_bytes(coll, n, a, b, link, gpu):
    lo, hi = sorted((a, b))
    assert C.ring(coll, lo, n, link, gpu).us <= C.ring(coll, hi, n, link, gpu).us + 1e-9


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(COLLECTIVES), st.integers(2, 64), st.integers(1, 1 << 31), st.floats(1.0, 10.0),
       st.sampled_from(LINKS))
def test_more_bandwidth_is_never_slower(coll, n, nbytes, scale, link):
    faster = dataclasses.replace(
        link, unidirectional_gbs=link.unidirectional_gbs * scale,
        measured={g: dataclasses.replace(m, regimes={c: tuple(dataclasses.replace(r, busbw_gbs=r.busbw_gbs * scale)
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
])
def test_bad_link_file_is_one_line_error(tmp_path, edit, field):
    p = tmp_path / "bad.toml"
    p.write_text(edit(GOOD))
    with pytest.raises(LinkError) as e:
        read_link(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and field in msg
    assert read_link(ROOT / "hwspecs/links/nvlink3.toml").unidirectional_gbs == 300.0
