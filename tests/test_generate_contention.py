"""The generate scorer's contention rule and per-lease summary (validation/score/generate_accuracy.py)."""

from validation.score import generate_accuracy as ga


def _rec(reps, probes):
    return {"statistic": "fastest rep", "token_ms_reps": reps, "python_us_reps": probes}


def test_contention_is_the_fastest_calls_probe():
    r = _rec([[3.0, 3.0], [2.0, 2.2], [2.5]], [1300, 2800, 1350])
    assert ga.contention(r, 1300) == 2800 / 1300          # the fastest call (2.1 ms) ran after the slow probe
    assert ga.contention(_rec([[2.0]], [1400]), 1300) < ga.CONTENDED
    assert ga.contention({"token_ms_reps": [[1.0]], "python_us_reps": [1]}, 1.0) is None   # not timed call by call
    assert ga.contention(_rec([[1.0]], []), 1300) is None


def test_quiet_probe_per_lease_else_per_run():
    a, b = {"gpu": "x"}, {"gpu": "x"}
    l1, l2 = {"_lease": True, "_host": "lease-q/host.toml"}, {"_lease": True, "_host": "lease-q/host.toml"}
    recs = [(a, _rec([[1]], [1500, 1320])), (a, _rec([[1]], [1400])), (b, _rec([[1]], [2000])),
            (l1, _rec([[1]], [2100])), (l2, _rec([[1]], [1300]))]      # two processes of one lease
    assert ga.quiet_probes(recs) == {id(a): 1320, id(b): 2000, "lease-q/host.toml": 1300}


def test_recorded_gemma_b8_static_call_on_lease_j_was_contended():
    # every one of its five calls ran after a probe 2.1-3.0x the lease's quietest; lease m's same case ran quiet
    recs = ga.records("generate")
    quiet = ga.quiet_probes(recs)
    found = {}
    for env, r in recs:
        if (r["model"], r["batch"], r["cache"]) == ("hf:gemma-2b", 8, "static") and r.get("python_us_reps"):
            found[env["_host"].split("/")[-2]] = ga.contention(r, quiet[ga._run(env)])
    assert found["lease-j"] > 2.0 and found["lease-m"] < 1.2


def test_lease_summary_medians_and_contended_apart():
    tpot = {("G", "lease-x", "m1", 1, "dynamic", "eager"): (110.0, 100.0, True, False),
            ("G", "lease-x", "m1", 1, "static", "compiled"): (20.0, 20.0, True, False),
            ("G", "lease-x", "m2", 1, "dynamic", "eager"): (100.0, 100.0, True, False),
            ("G", "lease-x", "m2", 1, "static", "compiled"): (20.0, 40.0, True, True),
            ("G", "kind", "m1", 1, "dynamic", "eager"): (1.0, 9.0, False, False)}     # not call by call: left out
    text = ga.lease_summary(tpot)
    row = next(line for line in text.splitlines() if line.startswith("| lease-x"))
    # eager 10%, 0% -> 5.0%; static 0%, 50% -> 25.0%; speed-up 10%, 100% -> 55.0%; without the contended: 0.0%
    assert row == "| lease-x | 4 (1 contended) | 5.0% (2) | 25.0% (2) | 55.0% (2) | 5.0% (2); 0.0% (1); 10.0% (1) |"
    assert "| all leases profiled call by call | 4 (1 contended) |" in text
    tpot.update({(k[0], "lease-y") + k[2:]: v for k, v in tpot.items() if k[1] == "lease-x"})
    both = next(line for line in ga.lease_summary(tpot).splitlines() if line.startswith("| all"))
    assert both.startswith("| all leases profiled call by call | 8 (2 contended) | 5.0% (4) |")   # leases kept apart
