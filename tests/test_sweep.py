"""gpusim sweep (gpusim.sweep, gpusim.sweep.answers, gpusim.sweep.page): rows equal
`gpusim predict --json` on a 2-worker Dask cluster, a sweep killed halfway finishes only
the missing rows, the report's answers follow from the rows, the page renders in a real
headless browser, and mistakes are one line with nothing written."""

import io
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

pd = pytest.importorskip("pandas", reason="pandas (the sweep extra) not installed")

from gpusim import sweep as sweep_fn                      # noqa: E402
from gpusim.cli.commands import main                                # noqa: E402
from gpusim.util.errors import UserError                        # noqa: E402
from gpusim.sweep.run import have_dask, version  # noqa: E402
from gpusim.sweep.columns import FIGURES, KEY, MEMORY
from gpusim.sweep.results import read_results
from gpusim.sweep.answers import answers, parse_prices, usd_per_million  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_dask = pytest.mark.skipif(not have_dask(), reason="dask.distributed (the sweep extra) "
                                "not installed: pip install 'gpusim[sweep]'")
try:
    import pyarrow  # noqa: F401
    HAVE_ARROW = True
except ImportError:
    HAVE_ARROW = False


def _predict_json(capsys, model, gpu, mode, sizes):
    argv = ["predict", model, "--gpu", gpu, "--mode", mode, "--json"]
    for k, v in sizes.items():
        argv += ["--size", f"{k}={v}"]
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _same_as_predict(row, d):
    """Every scalar figure of `predict --json` equals the row's, exactly."""
    assert row["gpu"] == d["gpu"] and row["mode"] == d["mode"] and row["host"] == d["host"]
    for k in FIGURES:
        assert row[k] == d[k], (k, row[k], d[k])
    for k in MEMORY:
        v = d["memory"][k]
        assert row["memory_" + k] == ("; ".join(v) if isinstance(v, list) else v), k
    assert row["unmodelled_ops"] == "; ".join(d["unmodelled_ops"])


@pytest.fixture(scope="module")
def cluster():
    if not have_dask():
        pytest.skip("dask.distributed (the sweep extra) not installed")
    import logging
    from dask.distributed import LocalCluster
    c = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                     dashboard_address=":0", silence_logs=logging.CRITICAL)
    yield c
    c.close()


@needs_dask
@pytest.mark.skipif(not HAVE_ARROW, reason="pyarrow (the sweep extra) not installed")
def test_two_worker_cluster_rows_equal_predict(cluster, tmp_path, capsys):
    """2 models x 2 GPUs x 2 batch sizes on a 2-worker LocalCluster, reached by its
    tcp:// address as a remote cluster would be: 8 rows, each equal to `gpusim predict`."""
    out = str(tmp_path / "r.parquet")
    df = sweep_fn(["conv_bn_relu", "transformer_block"], ["h100", "l4"], {"batch": [1, 4]},
                  modes=["eager"], out=out, dask=cluster.scheduler_address)
    assert len(df) == 8 and df.attrs["new_rows"] == 8
    assert (df["error"] == "").all()
    assert len(df.drop_duplicates(list(KEY))) == 8
    assert set(df["gpusim_version"]) == {version()}
    back = read_results(out)
    assert list(back.columns) == list(df.columns) and len(back) == 8
    for row, again in zip(df.to_dict("records"), back.to_dict("records")):
        d = _predict_json(capsys, row["model"], row["gpu"], row["mode"], {"batch": row["batch"]})
        _same_as_predict(row, d)
        _same_as_predict(again, d)          # through parquet unchanged
        assert row["samples_per_s"] == row["batch"] * 1e6 / d["end_to_end_us"]
    assert not os.path.exists(out + ".partial.jsonl")
    # the same sweep again: nothing to do, the same rows
    again = sweep_fn(["conv_bn_relu", "transformer_block"], ["h100", "l4"], {"batch": [1, 4]},
                     modes=["eager"], out=out, dask=cluster.scheduler_address)
    assert again.attrs["new_rows"] == 0
    pd.testing.assert_frame_equal(again, df, check_dtype=False)


def _sweep_argv(out):
    return ["sweep", "conv_bn_relu", "add_relu_mul", "--gpu", "h100,t4", "--size",
            "batch=" + ",".join(str(b) for b in range(1, 21)), "--size", "n=4096,8192",
            "--mode", "eager,compiled", "--out", out, "--dask", "off"]


def test_killed_sweep_resumes_only_missing_rows(tmp_path):
    """SIGKILL a sweep once some tasks are on disk; the rerun adds only the missing rows:
    nothing lost, nothing twice, every figure as an uninterrupted run's."""
    out = str(tmp_path / "r.csv")
    part = out + ".partial.jsonl"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "gpusim"] + _sweep_argv(out), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(part) and sum(1 for _ in open(part)) >= 12:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not os.path.exists(out)                   # killed before the merge
    with open(part) as f:
        before = f.read().count("\n")
    assert 12 <= before < 88
    # a kill in the middle of a write leaves a cut last line: it is dropped, not fatal
    with open(part, "a") as f:
        f.write('{"model": "conv_bn_relu", "sizes": "bat')
    buf = io.StringIO()
    from contextlib import redirect_stdout
    with redirect_stdout(buf):
        assert main(_sweep_argv(out)) == 0
    m = re.search(r"(\d+) rows \((\d+) new, (\d+) already there\)", buf.getvalue())
    assert m and int(m.group(1)) == 2 * 2 * (20 + 2) and int(m.group(3)) == before
    assert not os.path.exists(part)
    got = read_results(out)
    assert len(got) == 88 and len(got.drop_duplicates(list(KEY))) == 88
    clean = str(tmp_path / "clean.csv")
    with redirect_stdout(io.StringIO()):
        assert main(_sweep_argv(clean)) == 0
    ref = read_results(clean)
    pd.testing.assert_frame_equal(got, ref)


def test_local_cluster_of_n_workers():
    """--dask local:N starts N worker processes (and the sweep closes what it started)."""
    if not have_dask():
        pytest.skip("dask.distributed (the sweep extra) not installed")
    import importlib
    sw = importlib.import_module("gpusim.sweep.run")
    client, cluster = sw._client("local:1")
    try:
        assert len(client.scheduler_info()["workers"]) == 1
    finally:
        client.close()
        cluster.close()


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_in_process_without_dask_and_progress(monkeypatch):
    """Without dask.distributed the sweep runs here; the progress line counts rows/s."""
    import importlib
    sw = importlib.import_module("gpusim.sweep.run")      # the module (gpusim.sweep is the function)
    monkeypatch.setattr(sw, "have_dask", lambda: False)
    tty = _Tty()
    df = sw.sweep(["add_relu_mul"], ["h100", "a100"], {"n": [4096, 65536]}, modes=["eager"],
                  stream=tty)
    assert len(df) == 4 and "rows/s" in tty.getvalue() and "4/4" in tty.getvalue()
    with pytest.raises(UserError, match="dask.distributed is not installed"):
        sw.sweep(["add_relu_mul"], ["h100"], modes=["eager"], dask="local:2")


def test_train_and_amp_rows_equal_predict():
    """A training sweep predicts predict --train's step, an autocast sweep predict --amp's
    forward, both together (a compiled autocast step) predict's; a bad --amp is a one-line
    refusal before any work."""
    import torch

    from gpusim.models.resolve import model_graph
    from gpusim.predict.pipeline import predict
    from gpusim.predict.step import step_graph
    df = sweep_fn(["transformer_block"], ["h100"], {"seq": [64]}, modes=["eager"], dask="off",
                  train=True)
    assert list(df["train"]) == [True] and df["error"].iloc[0] == ""
    want = predict(step_graph("transformer_block", sizes={"seq": 64}), gpu="h100")
    assert df["device_us"].iloc[0] == want.device_us
    df = sweep_fn(["transformer_block"], ["h100"], {"seq": [64]}, modes=["compiled"], dask="off",
                  train=True, amp="bf16")
    assert df["error"].iloc[0] == ""
    want = predict(step_graph("transformer_block", sizes={"seq": 64}, amp="bf16"), gpu="h100",
                   mode="compiled")
    assert df["device_us"].iloc[0] == want.device_us
    df = sweep_fn(["transformer_block"], ["h100"], {"seq": [64]}, modes=["eager"], dask="off",
                  amp="bf16")
    assert list(df["amp"]) == ["bf16"] and df["error"].iloc[0] == ""
    want = predict(model_graph("transformer_block", sizes={"seq": 64}, amp="bf16"), gpu="h100")
    assert df["device_us"].iloc[0] == want.device_us
    for kw, msg in (({"amp": "fp8"}, "amp"),):
        kw = {"modes": ["eager"], **kw}
        with pytest.raises(UserError, match=msg):
            sweep_fn(["transformer_block"], ["h100"], dask="off", **kw)


def test_failures_are_rows_and_sizes_apply_where_taken(tmp_path):
    """A model that does not trace at a size is an error row, one line; a size only some
    models take applies to those; a CSV reads back with the same values and types."""
    out = str(tmp_path / "r.csv")
    df = sweep_fn(["add_relu_mul", "transformer_block"], ["h100"],
                  {"n": [4096], "heads": [12, 7]}, modes=["eager"], dask="off", out=out)
    assert len(df) == 3
    back = read_results(out)
    assert list(back["memory_fits"]) == [True, True, None] and list(back["train"]) == [False] * 3
    assert str(back["n"].dtype) == "Int64" and list(back["heads"].astype(object)) == [pd.NA, 12, 7]
    pd.testing.assert_frame_equal(back, df, check_dtype=False)
    bad = df[df["error"] != ""]
    assert list(bad["sizes"]) == ["heads=7"] and "\n" not in bad["error"].iloc[0]
    assert list(df[df["model"] == "add_relu_mul"]["sizes"]) == ["n=4096"]


@pytest.fixture(scope="module")
def rows():
    """Memory runs out on the T4 (16 GB) well before the H100 (80 GB)."""
    return sweep_fn(["conv_bn_relu", "transformer_block"], ["h100", "t4"],
                    {"batch": [1, 64, 2048, 16384]}, modes=["eager", "compiled"], dask="off")


def test_answers_follow_from_rows(rows):
    prices = parse_prices(["h100=2.5", "t4=0.35"])
    assert prices == {"h100-sxm": 2.5, "t4": 0.35}
    res = answers(rows, prices, target_latency_ms=5.0, target_throughput=500)
    ok = rows[rows["error"] == ""]
    # memory frontier: the largest batch that fits, per GPU
    for r in res["frontier"].to_dict("records"):
        for gpu in ("h100-sxm", "t4"):
            h = ok[(ok["model"] == r["model"]) & (ok["gpu"] == gpu) & ok["memory_fits"]]
            assert r[gpu] == (h["samples_per_call"].max() if len(h) else 0)
    front = res["frontier"].set_index("model")
    assert front.loc["conv_bn_relu", "t4"] < front.loc["conv_bn_relu", "h100-sxm"]
    # fastest mode: no mode of the same model, sizes and GPU is faster
    for r in res["fastest_mode"].to_dict("records"):
        same = ok[(ok["model"] == r["model"]) & (ok["sizes"] == r["sizes"])
                  & (ok["gpu"] == r["gpu"]) & ok["memory_fits"]]
        assert r["end_to_end_ms"] * 1e3 == same["end_to_end_us"].min()
    # cost: each priced GPU's cheapest batch and mode, priced from samples/s
    for r in res["cost"].to_dict("records"):
        same = ok[(ok["model"] == r["model"]) & (ok["gpu"] == r["gpu"]) & ok["memory_fits"]]
        assert r["usd_per_million"] == usd_per_million(prices[r["gpu"]], same["samples_per_s"].max())
    # cheapest meeting both targets, and none cheaper meets them
    for r in res["cheapest"].to_dict("records"):
        meet = ok[(ok["model"] == r["model"]) & ok["memory_fits"]
                  & (ok["end_to_end_us"] <= 5000) & (ok["samples_per_s"] >= 500)]
        if r["gpu"] is None:
            assert not len(meet)
            continue
        costs = [usd_per_million(prices[g], s) for g, s in zip(meet["gpu"], meet["samples_per_s"])]
        assert r["usd_per_million"] == min(costs)
        assert r["end_to_end_ms"] <= 5.0 and r["samples_per_s"] >= 500


BROWSER = None
for _b in ("chromium", "chromium-browser", "google-chrome"):
    import shutil
    BROWSER = BROWSER or shutil.which(_b)


@pytest.mark.skipif(not HAVE_ARROW, reason="pyarrow (the sweep extra) not installed")
def test_cli_report_page_in_headless_chromium(rows, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib draws the sweep report")
    from gpusim.sweep.results import write_results
    res_path = str(tmp_path / "r.parquet")
    write_results(res_path, rows)
    page = tmp_path / "sweep.html"
    capsys.readouterr()
    assert main(["sweep", "report", res_path, "--out", str(page), "--price", "h100=2.5,t4=0.35",
                 "--target-latency-ms", "5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)          # the page's answers, as data
    want = answers(rows, {"h100-sxm": 2.5, "t4": 0.35}, target_latency_ms=5)
    assert [r["gpu"] for r in doc["cheapest"]] == list(want["cheapest"]["gpu"])
    assert len(doc["fastest_mode"]) == len(want["fastest_mode"]) and len(doc["cost"]) == 4
    html = page.read_text()
    for sid in ("cheapest", "throughput", "frontier", "fastest", "cost"):
        assert f'id="{sid}"' in html
    # self-contained: nothing fetched (namespaces are names, not fetches)
    assert not re.search(r"""(src|href)=["']https?:|url\(https?:""", html) and "<svg" in html
    if not BROWSER:
        pytest.skip("no Chromium/Chrome installed")
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from test_viz import _chromium
    url = page.resolve().as_uri()
    shot = tmp_path / "sweep.png"
    _chromium(["--hide-scrollbars", f"--screenshot={shot}", "--window-size=1300,2400", url])
    assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 20_000
    r = _chromium(["--enable-logging=stderr", "--v=0", "--dump-dom", url])
    assert "<title>gpusim sweep: 2 model(s) on 2 GPU(s)</title>" in r.stdout
    assert 'data-ok="1"' in r.stdout and 'id="cost-table"' in r.stdout
    assert "Uncaught" not in r.stderr


def test_page_tables_are_capped(rows, monkeypatch):
    """A huge sweep's page shows the first rows of each table and says so."""
    pytest.importorskip("matplotlib", reason="matplotlib draws the sweep report")
    import importlib
    page = importlib.import_module("gpusim.sweep.page")
    monkeypatch.setattr(page, "MAX_ROWS", 3)
    html = page.sweep_html(answers(rows))
    n = len(answers(rows)["fastest_mode"])
    assert f"The first 3 of {n} rows" in html
    table = re.search(r'id="fastest-table">(.*?)</table>', html, re.S).group(1)
    assert table.count("<tr>") == 1 + 3


@pytest.mark.parametrize("argv, message", [
    (["sweep", "report"], r"required: results, --out \(see `gpusim sweep report --help`\)"),
    (["sweep", "add_relu_mul", "--out", "{d}/r.csv"], "required: --gpu"),
    (["sweep", "add_relu_mul", "--gpu", "h100", "--out", "{d}/r.json"], "give a .parquet or .csv"),
    (["sweep", "report.parquet", "--gpu", "h100", "--out", "{d}/r.csv"], "unknown model 'report.parquet'"),
    (["sweep", "add_relu_mul", "--gpu", "h100,a10", "--out", "{d}/r.csv"], "unknown GPU 'a10'"),
    (["sweep", "add_relu_mul", "--gpu", "h100", "--size", "n=1,,2", "--out", "{d}/r.csv"], "empty value"),
    (["sweep", "add_relu_mul", "--gpu", "h100", "--size", "batch=1", "--out", "{d}/r.csv"],
     "no model of this sweep takes size 'batch'"),
    (["sweep", "add_relu_mul", "--gpu", "h100", "--mode", "eager,fast", "--out", "{d}/r.csv"], "fast"),
    (["sweep", "add_relu_mul", "--gpu", "h100", "--dask", "local:x", "--out", "{d}/r.csv"], "local:N"),
    (["sweep", "report", "{d}/none.parquet", "--out", "{d}/s.html"], "do not exist"),
    (["sweep", "report", "{d}/r.csv", "--out", "{d}/s.png"], "give a .html file name"),
    (["sweep", "report", "{d}/r.csv", "--out", "{d}/s.html", "--price", "h100"], "GPU=USD_PER_HOUR"),
    (["sweep", "report", "{d}/r.csv", "--out", "{d}/s.html", "--price", "h100=-1"], "positive"),
])
def test_cli_mistakes_one_line_nothing_written(argv, message, tmp_path, capsys):
    d = str(tmp_path)
    argv = [a.replace("{d}", d) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpusim: error: ")
    assert re.search(message, err), err
    assert os.listdir(d) == []


def test_ci_runs_the_readme_test_command():
    """.ci/run's last line is the README's test command, verbatim; both install the sweep
    extra."""
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        last = f.read().rstrip("\n").split("\n")[-1]
    assert "```\n" + last + "\n```" in readme
    assert '".[test,plot,zoo,sweep]"' in last


def test_readme_sweep_commands_run(tmp_path, monkeypatch, request):
    """The README's sweep and report commands, verbatim (on Dask when it is installed:
    the module's 2-worker cluster, already warm, stands in for the LocalCluster the
    command would start; this process when not)."""
    import importlib
    import shlex
    if have_dask():
        from dask.distributed import Client
        c = request.getfixturevalue("cluster")
        sw = importlib.import_module("gpusim.sweep.run")
        monkeypatch.setattr(sw, "_client", lambda dask: (Client(c), None))
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    block = re.search(r"## Sweeps\n.*?```sh\n(.*?)```", text, re.S).group(1)
    lines = block.strip().split("\n")
    assert len(lines) == 2 and all(x.startswith("gpusim sweep ") for x in lines)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    from contextlib import redirect_stdout
    with redirect_stdout(out):
        for line in lines:
            assert main(shlex.split(line)[1:]) == 0, line
    df = read_results("sweep.parquet" if HAVE_ARROW else "sweep.csv")
    assert len(df) == 2 * 3 * 3 * 2 and (df["error"] == "").all()
    html = (tmp_path / "sweep.html").read_text()
    assert "Cheapest GPU that meets the target" in html and "$ / M samples" in html
