"""The per-module roll-up (``gpusim predict --by module``, :mod:`gpusim.capture.scopes`): capture
tags each node with the module that made it; each kernel lands in exactly one row, so the
rows' times add up to the kernel total; ``--depth`` cuts paths; JSON, HTML and CLI errors."""

import json
import math

import pytest
import torch
from torch import nn

from gpusim import capture, predict, search
from gpusim.cli.commands import main
from gpusim.report.rollup import (ROOT, check_depth, common_module, cut, kernel_module, rollup, rollup_dict,
    rollup_text)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Net(nn.Module):
    def __init__(self, d=64, n=3):
        super().__init__()
        self.embed = nn.Linear(16, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        x = torch.relu(self.embed(x))       # relu: the top-level forward's own kernel
        for b in self.blocks:
            x = b(x)
        return self.head(x).softmax(-1)


@pytest.fixture(scope="module")
def net_graph():
    return capture(Net().to("meta"), (torch.randn(8, 32, 16, device="meta"),), name="net")


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_rows_sum_to_kernel_total(net_graph, mode, depth):
    p = predict(net_graph, gpu="h100", mode=mode)
    rows = rollup(p, depth)
    assert math.fsum(r.us for r in rows) == pytest.approx(math.fsum(k.us for k in p.kernels),
                                                          rel=1e-12, abs=0)
    assert sum(r.kernels for r in rows) == len(p.kernels)
    assert math.fsum(r.flops for r in rows) == pytest.approx(p.flops, rel=1e-12)
    assert math.fsum(r.share for r in rows) == pytest.approx(1.0, rel=1e-9)
    assert all(r.depth <= depth for r in rows)
    assert len({r.path for r in rows}) == len(rows)
    # every parameter counted once, in some row
    assert sum(r.params for r in rows) == sum(t.numel() for t in Net().parameters())


def test_eager_nodes_carry_their_module(net_graph):
    p = predict(net_graph, gpu="h100", mode="eager")
    mods = {kernel_module(p.graph, k) for k in p.kernels}
    assert {"embed", "blocks.0.norm", "blocks.0.mlp.0", "blocks.0.mlp.1", "blocks.2.mlp.2",
            "head", ""} <= mods
    rows = {r.path: r for r in rollup(p, 1)}
    assert set(rows) == {"embed", "blocks", "head", ""}
    d = 64
    assert rows["blocks"].params == 3 * (2 * d + d * 4 * d + 4 * d + 4 * d * d + d)
    assert rows["head"].params == d * 10 + 10
    # top-level ops: relu, the residual-free softmax; the blocks' residual adds are theirs
    assert rows[""].kernels == 2
    assert {r.path for r in rollup(p, 2)} >= {"blocks.0", "blocks.1", "blocks.2"}
    assert rows["blocks"].peak_bytes > 0


def test_fused_kernel_goes_to_the_deepest_common_module(net_graph):
    p = predict(net_graph, gpu="h100", mode="compiled")
    fused = [k for k in p.kernels if len(k.ops) > 1]
    assert fused
    for k in fused:
        mods = [p.graph.g.nodes[n]["module"] for n in k.ops]
        m = kernel_module(p.graph, k)
        assert all(x == m or x.startswith(m + ".") or m == "" for x in mods)
        assert m == common_module(mods)
    # fusion moves time up, never loses it
    e = predict(net_graph, gpu="h100", mode="eager")
    assert sum(r.kernels for r in rollup(p, 4)) == len(p.kernels) < len(e.kernels)


def test_helpers():
    assert common_module(["a.b.c", "a.b.d", "a.b"]) == "a.b"
    assert common_module(["a.b", "ab.c"]) == ""
    assert common_module(["x"]) == "x" and common_module([]) == ""
    assert cut("a.b.c", 2) == "a.b" and cut("a", 3) == "a" and cut("", 1) == ""
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(Exception, match="--depth"):
            check_depth(bad)


def test_function_capture_is_all_top_level():
    g = capture(lambda x: torch.relu(x + 1), (torch.empty(1024, device="meta"),))
    p = predict(g, gpu="h100")
    rows = rollup(p, 3)
    assert [r.path for r in rows] == [""] and rows[0].kernels == len(p.kernels)
    assert ROOT in rollup_text(p) and "no kernel ran inside an nn.Module" in rollup_text(p)


def test_front_door(net_graph):
    import gpusim
    p = gpusim.predict(net_graph, gpu="h100")
    assert gpusim.rollup(p, 1) == rollup(p, 1) and "rollup" in gpusim.__all__


def test_json_keys(net_graph):
    p = predict(net_graph, gpu="h100")
    d = json.loads(json.dumps(rollup_dict(p, 2)))
    assert d["by"] == "module" and d["depth"] == 2
    assert set(d["modules"][0]) == {"path", "depth", "kernels", "params", "flops", "bytes",
                                    "us", "share", "peak_bytes"}
    assert len(d["kernel_modules"]) == len(p.kernels)


def test_cli_by_module(capsys):
    args = ["predict", "transformer_block", "--size", "batch=1", "--size", "seq=64"]
    assert main(args + ["--by", "module", "--depth", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {r["path"] for r in doc["modules"]} >= {"ln1", "qkv", "proj", "fc1", "fc2"}
    assert math.fsum(r["us"] for r in doc["modules"]) == pytest.approx(
        math.fsum(k["us"] for k in doc["kernels"]), rel=1e-12)
    assert doc["kernels"], "the flat kernel list stays"
    assert main(args + ["--by", "MODULE"]) == 0
    out = capsys.readouterr().out
    assert "per module to depth 3" in out and "act. peak" in out and "end-to-end" in out


@pytest.mark.parametrize("extra, msg", [
    (["--by", "layer"], "unknown --by 'layer'"),
    (["--by", "module", "--depth", "0"], "--depth 0"),
    (["--by", "module", "--depth", "two"], "--depth 'two'"),
    (["--depth", "2"], "--depth sets the module levels of --by module"),
    (["--by", "module", "--gpu", "h100,a100"], "--by module rolls up one GPU's run"),
])
def test_cli_errors(capsys, extra, msg):
    assert main(["predict", "add_relu_mul", "--size", "n=4096"] + extra) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and msg in cap.err and len(cap.err.strip().splitlines()) == 1
    assert "Traceback" not in cap.err


def test_html_report_has_module_table(net_graph):
    from gpusim.report import viz
    res = search(net_graph, gpu="h100", mode="compiled", algo="greedy")
    page = viz.report_html(res, {"model": "net", "depth": 2})
    assert 'id="modules-table"' in page and "blocks.1" in page and "eager µs" in page
    f = capture(lambda x: x * 2, (torch.empty(64, device="meta"),))
    assert 'id="modules"' not in viz.report_html(search(f, gpu="h100", algo="greedy"))


def test_added_nodes_inherit_their_inputs_module():
    """A constant built on the device inside a module's forward becomes a host copy node
    that capture adds itself: it counts in that module, not at the top level."""
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            return self.lin(x) * torch.tensor(0.5, device=x.device)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Scaled()

        def forward(self, x):
            return self.inner(x)

    g = capture(Outer().to("meta"), (torch.randn(4, 8, device="meta"),))
    h2d = [n for n in g.g.nodes if n.endswith("_h2d")]
    assert h2d and all(g.g.nodes[n]["module"] == "inner" for n in h2d)
