"""Picture outputs (gpusim.report.viz, validation.reports.plot), the shared number formats
(gpusim.util.fmt) and the progress line: trace, roofline, DOT, HTML report, accuracy plot, and
the report opened in a real headless browser when one is installed."""

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import pytest

from gpusim.report import viz
from gpusim.capture.tracing import capture
from gpusim.cli.commands import main
from gpusim.util.errors import UserError
from gpusim.models.examples import build_example
from gpusim.util.fmt import fmt_bytes, fmt_num, fmt_shape, fmt_si, fmt_us, table
from gpusim.graph.opgraph import GraphBuilder, quotient
from gpusim.predict.pipeline import predict
from gpusim.util.progress import progress
from gpusim.fusion.search import search
from validation.reports.plot import accuracy_plot

try:
    import matplotlib  # noqa: F401
    HAVE_MPL = True
except ImportError:
    HAVE_MPL = False
needs_mpl = pytest.mark.skipif(not HAVE_MPL, reason="matplotlib (the plot extra) not installed")

BROWSER = (shutil.which("chromium") or shutil.which("chromium-browser")
           or shutil.which("google-chrome"))


def _graph(name, **sizes):
    fn, args = build_example(name, **sizes)
    return capture(fn, args, name=name)


@pytest.fixture(scope="module")
def arm_graph():
    return _graph("add_relu_mul", n=4096)


@pytest.fixture(scope="module")
def pred(arm_graph):
    return predict(arm_graph, gpu="h100")


@pytest.fixture(scope="module")
def arm_search(arm_graph):
    return search(arm_graph, gpu="h100")


@pytest.fixture(scope="module")
def tb_search():
    g = _graph("transformer_block", batch=1, seq=16, d=128, heads=2)
    return search(g, gpu="h100")


@pytest.fixture(scope="module")
def odd_graph():
    """Names as real models have them (':' '.' and a quote), a fusable chain and a
    second consumer so that the graph has a skip edge."""
    b = GraphBuilder("odd")
    x = b.input("in.0:x", (1 << 12, 64))
    a = b.op("layer.0:add", "pointwise", [x])
    r = b.op('layer.0:"relu"', "pointwise", [a])
    m = b.op("layer.1:mul", "pointwise", [r, x])
    s = b.op("layer.1:sum", "reduction", [m], shape=(1 << 12,))
    b.output(s)
    return b.build()


# ---------------------------------------------------------------- trace
def _x(doc, pid=None, tid=None):
    return [e for e in doc["traceEvents"] if e["ph"] == "X"
            and (pid is None or e["pid"] == pid) and (tid is None or e["tid"] == tid)]


def _thread_names(doc, pid):
    return {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid}


def test_trace_one_gpu_event_per_kernel(pred, tmp_path):
    path = tmp_path / "t.json"
    assert viz.trace_output(pred=pred, path=str(path))
    with open(path) as f:
        doc = json.load(f)
    names = _thread_names(doc, 1)
    gpu_tid = next(t for t, n in names.items() if n.startswith("GPU stream"))
    host_tid = next(t for t, n in names.items() if n.startswith("host"))
    gpu = sorted(_x(doc, 1, gpu_tid), key=lambda e: e["ts"])
    assert len(gpu) == len(pred.kernels)
    for e, k in zip(gpu, pred.kernels):
        assert e["name"] == k.name
        assert abs(e["dur"] - k.us) < 1e-6
        assert e["args"]["bound"] == k.bound and e["args"]["flops"] == k.flops
        assert e["args"]["bytes"] == k.bytes and e["args"]["ops"] == list(k.ops)
    host = _x(doc, 1, host_tid)
    assert len(host) == len(pred.kernels)          # eager: one dispatch per kernel
    for e in _x(doc):
        assert e["ts"] >= 0 and e["dur"] >= 0
    # at this size the host is the bottleneck: the idle gaps are in the trace
    idle = [e for e in _x(doc, 1) if e["cat"] == "idle" and e["name"] == "idle"]
    assert len(idle) == len(pred.timeline.gaps) > 0
    # every launch flow has a start and an end
    flows = [e for e in doc["traceEvents"] if e["ph"] in "sf"]
    assert sorted(e["id"] for e in flows if e["ph"] == "s") == \
        sorted(e["id"] for e in flows if e["ph"] == "f")


def test_trace_search_two_processes(tb_search, tmp_path):
    path = tmp_path / "t.json"
    viz.trace_output(result=tb_search, path=str(path))
    doc = json.loads(path.read_text())
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert len(procs) == 2
    assert "unfused" in procs[1] and "fused" in procs[2]
    for pid, p in ((1, tb_search.unfused), (2, tb_search.fused)):
        gpu = [e for e in _x(doc, pid, viz.TID_GPU)]
        assert len(gpu) == len(p.kernels)
        assert sum(e["dur"] for e in gpu) == pytest.approx(p.device_us, abs=1e-6)
        assert "host (dispatch)" in _thread_names(doc, pid).values()


def test_trace_measured_lane(pred):
    measured = [{"name": f"void k{i}<float>", "us": 3.0 + i} for i in range(len(pred.kernels))]
    doc = viz.trace_document(pred, measured_kernels=measured)
    lane = sorted(_x(doc, 1, viz.TID_MEASURED), key=lambda e: e["ts"])
    assert [e["dur"] for e in lane] == [m["us"] for m in measured]
    for a, b in zip(lane, lane[1:]):                  # back to back
        assert b["ts"] == pytest.approx(a["ts"] + a["dur"])
    assert lane[0]["args"]["predicted_kernel"] == pred.kernels[0].name
    assert "measured GPU" in _thread_names(doc, 1)[viz.TID_MEASURED]
    rec = {"runs": {"eager": {"profile": {"kernels": [{"name": "gpusim:call", "us": 99.0},
                                                      {"name": "k", "us": 1.5}]}}}}
    assert viz.record_kernels(rec) == [{"name": "k", "us": 1.5}]


# ---------------------------------------------------------------- roofline
@needs_mpl
def test_plot_png_svg_pdf(pred, tb_search, tmp_path):
    png = tmp_path / "r.png"
    assert viz.plot_output(pred=pred, path=str(png))
    assert png.read_bytes()[:4] == b"\x89PNG"
    svg = tmp_path / "r.svg"
    viz.plot_output(result=tb_search, path=str(svg))
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    pdf = tmp_path / "r.pdf"
    viz.plot_output(result=tb_search, path=str(pdf))
    assert pdf.read_bytes()[:4] == b"%PDF"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".gpusim-")]


def test_plot_errors(pred, tmp_path, monkeypatch):
    with pytest.raises(UserError, match=r"\.png, \.svg or \.pdf"):
        viz.plot_output(pred=pred, path=str(tmp_path / "r.jpg"))
    with pytest.raises(UserError, match="does not exist"):
        viz.plot_output(pred=pred, path=str(tmp_path / "no" / "r.png"))
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # as if not installed
    with pytest.raises(UserError, match=r"--plot needs matplotlib: pip install 'gpusim\[plot\]'"):
        viz.plot_output(pred=pred, path=str(tmp_path / "r.png"))


def test_fusion_moves_and_zero_flop_kernels(tb_search):
    moves = viz.fusion_moves(tb_search)
    multi = [k for k in tb_search.fused.kernels if len(k.ops) > 1 and k.flops > 0]
    assert {m.kernel.name for m in moves} == {k.name for k in multi}
    for m in moves:
        assert {p.ops[0] for p in m.parts} <= set(m.kernel.ops)
        assert m.x1 == pytest.approx(m.kernel.intensity)
    pts, left_out = viz.roofline_points(tb_search.unfused.kernels)
    assert len(pts) + len(left_out) == len(tb_search.unfused.kernels)
    assert all(k.flops == 0 for k in left_out)           # the reshape copy
    svg = viz.roofline_svg(result=tb_search)
    ET.fromstring(svg)
    if left_out:
        assert "not shown" in svg


def test_one_number_format():
    """The text tables and the pictures write magnitudes one way (gpusim.util.fmt): three
    significant digits, decimal SI prefixes; tables pack the unit, labels space it."""
    assert fmt_num(2.01e8, "B") == "201MB" and fmt_num(1.68e7) == "16.8M"
    assert fmt_num(0, "B") == "0B" and fmt_num(None) == "-" and fmt_num(12.5) == "12.5"
    assert fmt_num(4096 * 28, "B") == "115kB"
    assert fmt_bytes(64 * 2**20) == "67.1 MB" and fmt_bytes(100) == "100 B"
    assert fmt_bytes(64 * 2**20, sep="") == fmt_num(64 * 2**20, "B")
    assert fmt_si(3.35e12, "B/s") == "3.35 TB/s" and fmt_si(float("inf"), "B") == "inf B"
    assert fmt_us(12.34) == "12.3 µs" and fmt_us(2500) == "2.50 ms" and fmt_us(3e6) == "3.00 s"
    assert fmt_shape((8, 128)) == "8x128" and fmt_shape(((2, 3), (4,))) == "2x3,4"
    assert fmt_shape(()) == "()"
    assert table([["a", "1"], ["bb", "22"]], ["k", "v"]).splitlines() == ["k    v", "--  --",
                                                                          "a    1", "bb  22"]


def test_labels_and_units(tb_search):
    assert viz.unit_name("fp16_tc/bf16_tc") == "FP16/BF16 tensor cores"
    spec = tb_search.fused.spec
    assert [u for u, _ in viz.roofs(spec, [])] == ["fp32"]
    b = GraphBuilder("siblings")
    x = b.input("x", (256, 256))
    w = b.input("w", (256, 256))
    mm = dict(kind="matmul", shape=(256, 256), flops=2 * 256 ** 3,
              gemm={"b": 1, "m": 256, "n": 256, "k": 256, "unit_dtype": "float32"})
    q = b.op("q", inputs=[x, w], op="aten.mm.default", **mm)
    k = b.op("k", inputs=[x, w], op="aten.mm.default", **mm)
    r = b.op("r", "pointwise", [q])
    b.output(r, k)
    g = b.build()
    p = predict(g, gpu="h100", mode="eager", partition=[["q", "r"], ["k"]])
    (qr,) = [k for k in p.kernels if len(k.ops) > 1]
    assert viz.ops_text(qr, g) == "mm → r"                # a chain
    assert viz.ops_text(qr) == "mm, r"                     # no graph: no claim of order
    p = predict(g, gpu="h100", mode="eager", partition=[["q", "k"], ["r"]])
    (qk,) = [k for k in p.kernels if len(k.ops) > 1]
    assert viz.ops_text(qk, g) == "mm, mm"                # siblings: q does not feed k


# ---------------------------------------------------------------- DOT
_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|(->|[{}\[\];=,])|([A-Za-z0-9_.]+)|(//[^\n]*)|(\s+)')


def _dot_tokens(text):
    """A small DOT tokenizer: quoted strings come back unescaped."""
    out, i = [], 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        assert m, f"cannot tokenize DOT at {text[i:i + 40]!r}"
        if m.group(1) is not None:
            out.append(("id", re.sub(r'\\(.)', r'\1', m.group(1))))
        elif m.group(2):
            out.append(("p", m.group(2)))
        elif m.group(3):
            out.append(("id", m.group(3)))
        i = m.end()
    return out


def _dot_structure(text):
    """Balanced braces/brackets; returns (statement ids, edges, cluster names)."""
    toks = _dot_tokens(text)
    depth = sq = 0
    for kind, v in toks:
        if kind == "p":
            depth += {"{": 1, "}": -1}.get(v, 0)
            sq += {"[": 1, "]": -1}.get(v, 0)
            assert depth >= 0 and sq >= 0
    assert depth == 0 and sq == 0
    assert toks[0] == ("id", "digraph")
    nodes, edges, clusters = set(), set(), []
    in_attr = 0
    for j, (kind, v) in enumerate(toks):
        if kind == "p" and v == "[":
            in_attr += 1
        elif kind == "p" and v == "]":
            in_attr -= 1
        elif kind == "id" and not in_attr:
            prev = toks[j - 1] if j else None
            nxt = toks[j + 1] if j + 1 < len(toks) else None
            if prev == ("id", "subgraph"):
                clusters.append(v)
            elif nxt == ("p", "->"):
                edges.add((v, toks[j + 2][1]))
            elif prev != ("p", "->") and v not in ("digraph", "subgraph", "graph", "node", "edge") \
                    and nxt in (("p", "["), ("p", ";")):
                nodes.add(v)
    return nodes, edges, clusters


def test_dot_search_clusters_and_nodes(tb_search, tmp_path):
    path = tmp_path / "g.dot"
    assert viz.dot_output(result=tb_search, path=str(path))
    text = path.read_text()
    nodes, edges, clusters = _dot_structure(text)
    g = tb_search.graph
    assert set(g.compute_nodes) <= nodes
    multi = [grp for grp in tb_search.partition.groups if len(grp) > 1]
    assert len(clusters) == len(multi) > 0
    assert all(re.fullmatch(r"cluster_\d+", c) for c in clusters)
    assert edges == set(g.dataflow.edges)
    assert re.search(r'label="\d+(\.\d+)? (kB|MB)"', text)
    try:
        import pydot
    except ImportError:
        return
    (parsed,) = pydot.graph_from_dot_data(text)
    assert len(parsed.get_subgraphs()) == len(multi)


def test_dot_quotes_odd_names(odd_graph, tmp_path):
    res = search(odd_graph, gpu="h100")
    text = viz.dot_document(result=res)
    nodes, edges, clusters = _dot_structure(text)
    assert set(odd_graph.compute_nodes) <= nodes
    assert "in.0:x" in nodes
    assert ('layer.0:add', 'layer.0:"relu"') in edges
    assert len(clusters) == sum(len(grp) > 1 for grp in res.partition.groups)
    p = predict(odd_graph, gpu="h100")                   # no search: no clusters
    nodes, _, clusters = _dot_structure(viz.dot_document(pred=p))
    assert clusters == [] and set(odd_graph.compute_nodes) <= nodes
    ET.fromstring(viz.graph_svg(result=res))             # hand-drawn layout is valid SVG


def test_kernel_graph_is_the_partition_quotient(tb_search, odd_graph):
    """The report's kernel drawing uses the partition's quotient graph (one definition),
    with the bytes each kernel reads of another's tensors on its edges."""
    for res in (tb_search, search(odd_graph, gpu="h100")):
        ks = res.fused.kernels
        q, from_inputs = viz.kernel_graph(res.graph, ks)
        assert set(q.edges) == set(quotient(res.graph, [k.ops for k in ks]).edges)
        assert all(b > 0 for _, _, b in q.edges(data="bytes"))
        assert len(from_inputs) == len(ks) and sum(from_inputs) > 0


def test_dot_svg_beside_when_graphviz_present(pred, tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    exe = fake / "dot"
    exe.write_text("#!/bin/sh\ncat >/dev/null\n"
                   "echo '<svg xmlns=\"http://www.w3.org/2000/svg\"><g/></svg>'\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ.get('PATH', '')}")
    viz.dot_output(pred=pred, path=str(tmp_path / "g.dot"))
    ET.parse(tmp_path / "g.svg")
    monkeypatch.setenv("PATH", "")
    os.remove(tmp_path / "g.svg")
    viz.dot_output(pred=pred, path=str(tmp_path / "g.dot"))
    assert not (tmp_path / "g.svg").exists()


# ---------------------------------------------------------------- report
def _inline_svgs(html):
    return re.findall(r"<svg\b.*?</svg>", html, flags=re.S)


def test_report_html_self_contained(tb_search, monkeypatch):
    monkeypatch.setenv("PATH", "")          # the hand-drawn graph, whatever is installed
    html = viz.report_html(tb_search, {"model": "transformer_block", "dtype": "float32",
                                       "sizes": {"batch": 1}})
    assert "<title>gpusim report: transformer_block on NVIDIA H100 SXM5 80GB</title>" in html
    assert 'id="kernels-fused"' in html and 'id="kernels-unfused"' in html
    for k in tb_search.fused.kernels:
        assert f">{k.name}<" in html
    assert not re.search(r'''(src|href)\s*=\s*["']?\s*(https?:)?//''', html, flags=re.I)
    assert "<link" not in html and "@import" not in html and "<script src" not in html
    svgs = _inline_svgs(html)
    assert len(svgs) >= 3                   # timeline, roofline, graph
    for s in svgs:
        ET.fromstring(s)


def test_timeline_svg_lanes(arm_search):
    svg = viz.timeline_svg(result=arm_search)
    root = ET.fromstring(svg)
    texts = ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert texts.count("host") == 2 and texts.count("GPU stream") == 2
    assert any(t.startswith("unfused (eager)") for t in texts)
    assert any(t.startswith("fused (compiled)") for t in texts)
    page = viz.timeline_page(result=arm_search)
    assert page.startswith("<!DOCTYPE html>") and "fusion hurts" in page


# ---------------------------------------------------------------- CLI end to end
def test_cli_predict_outputs(tmp_path, capsys):
    t, p, d = tmp_path / "t.json", tmp_path / "r.png", tmp_path / "g.dot"
    argv = ["predict", "add_relu_mul", "--size", "n=4096", "--trace", str(t), "--dot", str(d)]
    if HAVE_MPL:
        argv += ["--plot", str(p)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"wrote {t}" in err and f"wrote {d}" in err
    assert json.loads(t.read_text())["traceEvents"]
    assert d.read_text().startswith('digraph "add_relu_mul"')
    if HAVE_MPL:
        assert p.read_bytes()[:4] == b"\x89PNG"


def test_cli_search_trace(tmp_path, capsys):
    t = tmp_path / "t.json"
    assert main(["search", "gelu_tanh", "--size", "n=4096", "--trace", str(t)]) == 0
    doc = json.loads(t.read_text())
    assert {e["pid"] for e in doc["traceEvents"]} == {1, 2}


def test_cli_report(tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", "transformer_block", "--size", "batch=1", "--size", "seq=16",
                 "--size", "d=128", "--size", "heads=2", "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().err
    html = out.read_text(encoding="utf-8")
    assert "<title>gpusim report: transformer_block on" in html
    assert "batch=1 seq=16 d=128 heads=2" in html
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".gpusim-")]


def test_cli_report_missing_folder(tmp_path, capsys):
    out = tmp_path / "nope" / "report.html"
    assert main(["report", "add_relu_mul", "--size", "n=4096", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("gpusim: error:") and str(tmp_path / "nope") in err
    assert "does not exist" in err


# ---------------------------------------------------------------- accuracy plot
def _results_dir(root, arm_graph, pred):
    d = root / "h100"
    d.mkdir(parents=True)
    kernels = [{"name": f"k{i}", "us": k.us * (1.1 + 0.1 * i)} for i, k in enumerate(pred.kernels)]
    rec = {"case": "add_relu_mul/small/float32", "graph": arm_graph.to_dict(),
           "runs": {"eager": {"profile": {"kernels": kernels + [{"name": "gpusim:r", "us": 1.0}]},
                              "wall": {"median_us": 30.0}}}}
    from validation.records.store import write_records
    write_records(str(d / "classic.jsonl.gz"), [rec])
    return root


@needs_mpl
def test_accuracy_plot(tmp_path, arm_graph, pred):
    res = _results_dir(tmp_path / "results", arm_graph, pred)
    out = tmp_path / "acc.png"
    assert accuracy_plot(str(res), ["h100"], str(out))
    assert out.read_bytes()[:4] == b"\x89PNG"
    accuracy_plot(str(res), None, str(tmp_path / "acc.svg"))
    ET.parse(tmp_path / "acc.svg")


def test_accuracy_plot_no_records(tmp_path):
    (tmp_path / "h100").mkdir()
    with pytest.raises(UserError, match="no validation records"):
        accuracy_plot(str(tmp_path), ["h100"], str(tmp_path / "a.png"))
    with pytest.raises(UserError, match="no validation records"):
        accuracy_plot(str(tmp_path / "missing"), None, str(tmp_path / "a.png"))


# ---------------------------------------------------------------- progress
class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_only_on_a_terminal():
    quiet = io.StringIO()
    assert list(progress(range(5), "work", stream=quiet)) == list(range(5))
    assert quiet.getvalue() == ""
    tty = _Tty()
    assert list(progress(range(3), "work", stream=tty)) == [0, 1, 2]
    out = tty.getvalue()
    assert "\r" in out and "work" in out and "3/3" in out and "\n" not in out
    assert out.endswith("\r")                 # the line is erased at the end
    tty = _Tty()
    with progress(4, "search", stream=tty) as p:
        p.update(note="greedy")
        p.update(3)
    assert "4/4" in tty.getvalue() and "greedy" in tty.getvalue()
    unknown = _Tty()
    list(progress((i for i in range(2)), "gen", stream=unknown))
    assert "gen" in unknown.getvalue()


# ---------------------------------------------------------------- headless browser
def _chromium(args, timeout=90):
    with tempfile.TemporaryDirectory() as profile:
        cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", f"--user-data-dir={profile}"] + args
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(not BROWSER, reason="no Chromium/Chrome installed")
def test_report_in_headless_chromium(tb_search, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(viz.report_html(tb_search, {"model": "transformer_block"}), encoding="utf-8")
    url = page.resolve().as_uri()
    shot = tmp_path / "report.png"
    r = _chromium(["--hide-scrollbars", f"--screenshot={shot}", "--window-size=1400,2000", url])
    assert shot.exists(), r.stderr[-2000:]
    assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 20_000
    r = _chromium(["--enable-logging=stderr", "--v=0", "--dump-dom", url])
    dom = r.stdout
    assert "<title>gpusim report: transformer_block on NVIDIA H100 SXM5 80GB</title>" in dom
    assert 'id="kernels-fused"' in dom and "<svg" in dom
    assert 'data-ok="1"' in dom                      # the inline script ran to the end
    assert "Uncaught" not in r.stderr
