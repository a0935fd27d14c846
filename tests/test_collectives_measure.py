"""The collective sweep's --graph path (validation/measure/collectives.py) on a CPU: its plan and a gloo dry run."""

import json
import os
import socket

import pytest

from validation.measure import collectives as cm


def test_graph_plan_bounds_the_graph_and_keeps_small_sizes_amortised():
    sizes = [1 << p for p in range(10, 31)]
    plans = [cm.graph_plan(s) for s in sizes]
    for (k, r, n), s in zip(plans, sizes):
        assert k >= 1 and r >= 1 and n >= 5
        if s <= 1 << 20:  # launch-floor sizes: as many timed calls a sample as the eager plan
            assert k * r >= cm.plan(s)[0]
    # calls per graph never grow with the size (a 1 GiB graph stays ~100 ms on H200s)
    assert [k for k, _, _ in plans] == sorted((k for k, _, _ in plans), reverse=True)
    assert cm.graph_plan(1 << 30)[0] <= 5


def test_graph_lead_grows_with_what_the_host_enqueues():
    assert cm.graph_lead_us(20, 2) > cm.graph_lead_us(5, 1) > 0


def test_summarise():
    assert cm.summarise([3.0, 1.0, 2.0, 10.0, 4.0]) == {"us": 3.0, "us_min": 1.0, "us_max": 10.0}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_graph_dry_run_writes_both_device_and_host_figures(tmp_path, monkeypatch):
    """The lead's command's arguments (--graph --out) on gloo, one rank: every record holds the graph time, the
    eager loop and the host's issue cost; no overlap record in --graph mode."""
    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(_free_port())}.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "g.jsonl"
    cm.main(["--graph", "--out", str(out), "--max-bytes", "4096", "--step", "4",
             "--collectives", "all_reduce", "broadcast"])
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["kind"] for r in recs] == ["environment"] + ["collective"] * 4 + ["done"]
    assert recs[0]["args"]["graph"] is True
    for r in recs[1:-1]:
        assert "error" not in r, r
        assert r["method"] == "cpu-dry-run"  # never "graph" without a GPU: a smoke test is not data
        assert r["us_min"] <= r["us"] <= r["us_max"]
        assert r["calls_per_sample"] == r["calls_per_graph"] * r["replays_per_sample"]
        for f in ("eager_us", "host_call_us", "host_issue_us"):
            assert r[f] > 0
        assert r["busbw_gbs"] == pytest.approx(r["bytes"] / (r["us"] * 1e-6) / 1e9 * r["busbw_factor"])


def test_a_failed_capture_skips_the_collective_on_every_rank(tmp_path, monkeypatch):
    """A collective whose capture fails (send/recv on some torch builds) gets error records, at every size without
    retrying, and the sweep goes on to the next collective."""
    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(_free_port())}.items():
        monkeypatch.setenv(k, v)
    calls = []

    def broken(op, k, dev):
        calls.append(k)
        raise RuntimeError("operation not permitted when stream is capturing")
    monkeypatch.setattr(cm, "capture", broken)
    out = tmp_path / "g.jsonl"
    cm.main(["--graph", "--out", str(out), "--max-bytes", "4096", "--step", "2", "--collectives", "all_reduce"])
    recs = [json.loads(line) for line in out.read_text().splitlines() if '"collective"' in line]
    assert len(recs) == 3 and len(calls) == 1
    assert "not permitted" in recs[0]["error"] and recs[1]["error"].startswith("skipped: graph capture failed")


def _graph_run(tmp_path):
    """A synthetic graph run (a test fixture, not a measurement): the first recorded world-2 eager run with
    --graph set and clean, 0.3x the time at 1 MiB and below (a device time under the host's floor), the eager loop's
    time kept as ``eager_us``; no send/recv (as if its capture had failed)."""
    from validation.fit import fit_collectives as F
    src = next(p for p in F.default_records() if p.endswith("h200-x2-2026-11-28.jsonl"))
    out = []
    for line in open(src):
        r = json.loads(line)
        if r["kind"] == "environment":
            if out:
                break
            r["args"] = {**r["args"], "graph": True}
            r["env"] = {k: v for k, v in r["env"].items() if not k.startswith("NCCL_DEBUG")}  # a clean run
        elif r["kind"] == "collective":
            if r["collective"] == "send_recv":   # as if its capture had failed
                continue
            r.update(method="graph", eager_us=r["us"], host_call_us=r["us"] + 5.0, host_issue_us=12.0,
                     us=r["us"] * 0.3 if r["bytes"] <= 1 << 20 else r["us"])
        elif r["kind"] != "done":
            continue
        out.append(json.dumps(r))
    path = tmp_path / "h200-x2-graph-fixture.jsonl"
    path.write_text("\n".join(out) + "\n")
    return str(path)


def test_graph_records_are_fitted_and_eager_ones_kept(tmp_path):
    from validation.fit import fit_collectives as F
    from validation.reports import collectives_page as P
    eager = [p for p in F.default_records() if "graph" not in os.path.basename(p)]
    res = F.run(eager + [_graph_run(tmp_path)], check=True)["results"]["h200-sxm"]
    assert res["method"] == "graph" and res["worlds"] == [2]   # fitted on the graph run alone
    assert "--graph" in res["ref"] and res["eager"]["method"] == "eager" and res["eager"]["worlds"] == [2, 4]
    assert "send_recv from the eager records" in res["ref"] and ("send_recv", 4) not in res["data"]
    assert res["data"][("send_recv", 2)] == res["eager"]["data"][("send_recv", 2)]  # filled in, at world 2 only
    from gpusim.cost.collectives import ring

    def at_4k(r):
        return ring("all_reduce", 4096, 2, F.with_fit(r["base"], "h200-sxm", r["regimes"]), "h200-sxm").us
    assert at_4k(res) == pytest.approx(res["data"][("all_reduce", 2)][4096], rel=0.3)
    assert at_4k(res) < at_4k(res["eager"])  # the device floor is below the host's
    small = res["compare"][("all_reduce", 2, 1024)]
    assert small["graph"] == pytest.approx(small["eager_same"] * 0.3) and small["host_issue"] == 12.0
    page = P.doc({"h200-sxm": res})
    for head in ("Method: graph", "### Graph replay vs the eager loop", "### What back-to-back eager calls pay",
                 "#### Scores", "not scored; the records of this method hold one world size only"):
        assert head in page, head
    scores = F._summary({"h200-sxm": res}, [])
    assert "method graph" in P.accuracy_block(scores) and "The eager loop's records" in P.accuracy_block(scores)


def test_graph_runs_are_pooled_and_misaligned_shards_left_out():
    """Graph runs with and without NCCL_GRAPH_REGISTER=0 are pooled (they measured the same); a sharded collective's
    record whose shards start off 16 bytes (nccl-tests' sizes at 3 ranks) is left out of the points and paired with
    the aligned record of its size."""
    from validation.fit import collectives_records as CM

    def rec(c, n, b, us, **kw):
        return {"collective": c, "world_size": n, "bytes": b, "us": us, "dtype": "bfloat16", **kw}

    def run(method, env, pts=(), clean=True):
        return {"env": {"gpu_name": "G", "env": env}, "method": method, "clean": clean, "points": list(pts)}
    reg, unreg, eager = run("graph", {}), run("graph", {"NCCL_GRAPH_REGISTER": "0"}), run("eager", {})
    assert CM.select([reg, unreg, eager], "G") == ("graph", [reg, unreg])
    assert CM.select([reg, unreg, eager], "G", "eager") == ("eager", [eager])
    big = 1 << 30
    assert CM.shard_bytes(rec("all_gather", 3, big, 1.0)) == (big // 2 - (big // 2) % 3) // 3 * 2
    assert CM.misaligned(rec("all_gather", 3, big, 1.0)) and CM.misaligned(rec("reduce_scatter", 3, big, 1.0))
    assert not CM.misaligned(rec("all_reduce", 3, big, 1.0))       # one whole buffer: no shard offsets
    assert not CM.misaligned(rec("all_gather", 4, big, 1.0))
    assert not CM.misaligned(rec("all_gather", 3, big, 1.0, shard_bytes=357913936))
    off = run("graph", {}, [rec("all_gather", 3, big, 3700.0), rec("all_reduce", 3, big, 4100.0)])
    on = run("graph", {}, [rec("all_gather", 3, big, 2350.0, shard_bytes=357913936, align_bytes=16)])
    pts = CM.points([off, on], "G")
    assert pts[("all_gather", 3)] == {big: 2350.0} and pts[("all_reduce", 3)] == {big: 4100.0}
    assert CM.points([off], "G", aligned=False)[("all_gather", 3)] == {big: 3700.0}
    assert CM.alignment([off, on], "G") == [("all_gather", 3, big, 3700.0, 2350.0)]


def test_sweep_sizes_align_shards():
    """--align-bytes makes every rank's shard a multiple of that many bytes; 0 keeps nccl-tests' sizes."""
    from validation.measure.collectives import op_numel
    assert op_numel(1 << 30, 3, 2) == (1 << 29) - (1 << 29) % 3
    n = op_numel(1 << 30, 3, 2, 16)
    assert n % 3 == 0 and (n // 3 * 2) % 16 == 0 and (1 << 29) - n < 3 * 8
    assert op_numel(1024, 4, 2, 16) == 512 and op_numel(2, 3, 2, 16) == 24
