"""Host profiles apart from GPU specs (issue #21 items 3-4): one reference host for every
GPU, so a GPU comparison compares GPUs; --host / host= to pick another; and predictions
that are the same on every run (nothing is clocked on the machine running gpusim)."""

import json
import tomllib

import pytest
import torch

from gpusim import capture, predict
from gpusim.cli.commands import main
from gpusim.hw.spec import load_spec
from gpusim.hw.schema import builtin_dir
from gpusim.hw.host import REFERENCE, HostError, host_names, hosts_dir, list_hosts, load_host


def test_no_gpu_spec_carries_host_figures():
    for p in builtin_dir().glob("*.toml"):
        data = tomllib.loads(p.read_text())
        assert "host" not in data and "host_measured_on" not in data, p.name
    assert not hasattr(load_spec("h100"), "eager_op_us")


def test_every_host_figure_has_provenance():
    assert REFERENCE in host_names()
    for h in list_hosts():
        for k, (source, ref) in h.provenance.items():
            assert source in ("measured", "derived", "assumed") and ref.strip(), (h.name, k)
        # the model's Python law is fitted in the lab and says so
        assert h.provenance["python_module_call_us"][0] == "derived"
        assert "host_accuracy.py --fit" in h.provenance["python_torch_call_us"][1]


def test_the_reference_host_is_a_measured_device_host():
    ref, h100 = load_host(), load_host("h100-sxm-host")
    assert ref.name == REFERENCE
    for k in ("eager_op_us", "compiled_call_us", "eager_forward_factor", "python_torch_call_us"):
        assert getattr(ref, k) == getattr(h100, k)


def test_a_bad_host_is_one_line_naming_file_and_field(tmp_path, capsys):
    text = (hosts_dir() / "reference.toml").read_text()
    p = tmp_path / "bad.toml"
    p.write_text(text.replace("eager_view_us = {", "eager_vew_us = {", 1))
    with pytest.raises(HostError, match=r"bad.toml: field \[host\].eager_vew_us"):
        load_host(str(p))
    assert main(["predict", "gelu_tanh", "--host", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpusim: error: ") and len(err.strip().splitlines()) == 1
    assert main(["predict", "gelu_tanh", "--host", "no-such-host"]) == 2
    assert "unknown host 'no-such-host'" in capsys.readouterr().err


def _small():
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.LayerNorm(64)).to("meta")
    return m, (torch.empty(8, 64, device="meta"),)


def test_two_predictions_are_identical():
    from gpusim.models import zoo
    m, args = zoo.build("tv:resnet18", device="meta", dtype=torch.float32)
    a = predict(capture(m, args), gpu="h100-sxm-calibrated", mode="eager").to_dict()
    b = predict(capture(m, args), gpu="h100-sxm-calibrated", mode="eager").to_dict()
    assert a == b and a["python_us"] > 0 and a["host"] == REFERENCE


def test_predict_json_is_identical_across_runs(capsys):
    outs = []
    for _ in range(2):
        assert main(["predict", "gelu_tanh", "--gpu", "h100-sxm-calibrated", "--json"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]


def test_host_picks_the_host_and_not_the_gpu():
    m, args = _small()
    g = capture(m, args)
    ref = predict(g, gpu="h100", mode="eager")
    h200 = predict(g, gpu="h100", mode="eager", host="h200-sxm-host")
    path = predict(g, gpu="h100", mode="eager", host=str(hosts_dir() / "h200-sxm-host.toml"))
    assert ref.host.name == REFERENCE and h200.host.name == "h200-sxm-host"
    assert h200.device_us == ref.device_us                  # same GPU, same kernels
    assert h200.timeline.host_us < ref.timeline.host_us     # a faster host
    assert path.end_to_end_us == h200.end_to_end_us


@pytest.mark.parametrize("batch", [1, 32])
def test_h100_is_never_slower_than_a100_end_to_end_on_resnet50(batch):
    """With one host for both, the GPU comparison is a GPU comparison: an H100 (more
    bandwidth, more FLOP/s) is never predicted slower than an A100."""
    from gpusim.models import zoo
    m, args = zoo.build("tv:resnet50", device="meta", dtype=torch.float32, batch=batch)
    g = capture(m, args)
    a100, h100 = predict(g, gpu="a100", mode="eager"), predict(g, gpu="h100", mode="eager")
    assert h100.device_us < a100.device_us
    # host-bound, both end to end are the host's time: equal up to float summation order
    assert h100.end_to_end_us <= a100.end_to_end_us * (1 + 1e-12)
    assert h100.host.name == a100.host.name == REFERENCE


def test_every_model_command_takes_host_and_hosts_lists_them(capsys, tmp_path):
    assert main(["hosts"]) == 0
    out = capsys.readouterr().out
    assert all(n in out for n in host_names())
    assert main(["predict", "gelu_tanh", "--host", "h200-sxm-host"]) == 0
    assert "host profile h200-sxm-host" in capsys.readouterr().out
    for cmd in (["search", "gelu_tanh"], ["whatif", "gelu_tanh", "--fuse", "mul,pow_1"]):
        assert main(cmd + ["--host", "h200-sxm-host", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["host"] == "h200-sxm-host"
    assert main(["report", "gelu_tanh", "--host", "h200-sxm-host", "--out",
                 str(tmp_path / "r.html")]) == 0
