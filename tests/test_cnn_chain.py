"""The chain microbenchmark (validation/measure/cnn_chain.py): its grid straddles the L2 and its
CPU dry run writes one record per point with every stage timed alone both ways."""

import json

from validation.measure import cnn_chain


def test_grid_straddles_l2_and_spans_every_combination():
    pts = cnn_chain.points()
    sizes = [p["N"] * p["C"] * p["HW"] ** 2 * (4 if p["dtype"] == "float32" else 2) for p in pts]
    assert min(sizes) < 1 << 20 and max(sizes) > 60 << 20
    combos = {(p["chain"], p["dtype"], p["layout"], p["C"]) for p in pts}
    assert len(combos) == len(cnn_chain.CHAINS) * 2 * 2 * len(cnn_chain.SHAPES)
    assert len(pts) == len({json.dumps(p, sort_keys=True) for p in pts})
    # the first quarter of the sweep (a cut run) already holds every chain, dtype and layout
    assert {(p["chain"], p["dtype"], p["layout"]) for p in pts[: len(pts) // 4]} == \
        {(p["chain"], p["dtype"], p["layout"]) for p in pts}


def test_cpu_dry_run_writes_a_record_per_point(tmp_path):
    out = tmp_path / "c.jsonl"
    assert cnn_chain.main(["--out", str(out), "--device", "cpu", "--reps", "1"]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["kind"] == "environment" and lines[0]["method"].startswith("Method:")
    recs = [x for x in lines if x.get("kind") == "cnn_chain"]
    assert len(recs) == len(cnn_chain.points(small=True)) and lines[-1]["kind"] == "summary"
    for r in recs:
        assert "failed" not in r, r["failed"]
        assert set(r["cold"]) == set(r["warm"]) == set(r["stages"])
        assert r["stages"][0] == "producer" and r["stages"][-1] == "relu"
        assert ("conv" in r["stages"]) == (r["chain"] != "bnr")
