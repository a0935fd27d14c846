"""One model on several GPUs (gpusim.predict.compare): one capture, the same host for all."""

import pytest
import torch

from gpusim.capture.tracing import capture
from gpusim.predict.compare import compare, compare_rows, compare_text, parse_gpus
from gpusim.util.errors import GpusimError


def _graph():
    x = torch.empty(2**24, device="meta")
    return capture(lambda x: torch.relu(x * 2 + 1), (x,), name="chain")


def test_rows_follow_the_order_asked_and_speedups_are_over_the_first():
    preds = compare(_graph(), ["h100", "a100", "h200"])
    rows = compare_rows(preds)
    assert [r["gpu"] for r in rows] == ["h100-sxm", "a100-sxm4-80gb", "h200-sxm"]
    assert rows[0]["speedup_device"] == pytest.approx(1.0)
    for r, p in zip(rows, preds):
        assert r["speedup_device"] == pytest.approx(preds[0].device_us / p.device_us)
    # a memory-bound chain: more bandwidth is faster (H200 4.8 TB/s > H100 3.35 > A100 2.0)
    assert rows[2]["device_us"] < rows[0]["device_us"] < rows[1]["device_us"]
    assert "speed-up over h100-sxm" in compare_text(preds)


@pytest.mark.parametrize("bad", ["", "a100,", ",h100", "a100,,h100", "a100,A100"])
def test_bad_gpu_lists_are_refused_in_one_line(bad):
    with pytest.raises(GpusimError) as e:
        parse_gpus(bad)
    assert "\n" not in str(e.value)


def test_cli_predict_several_gpus_prints_one_table(capsys):
    from gpusim.cli.commands import main
    assert main(["predict", "add_relu_mul", "--gpu", "h100,a100"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("add_relu_mul, mode eager: 2 GPUs (speed-up over h100-sxm")
    assert [ln.split()[0] for ln in out[3:]] == ["h100-sxm", "a100-sxm4-80gb"]


@pytest.mark.parametrize("argv", [["search", "add_relu_mul", "--gpu", "h100,a100"],
                                  ["predict", "add_relu_mul", "--gpu", "h100,a100", "--trace", "t.json"],
                                  ["predict", "add_relu_mul", "--gpu", "h100,nosuch"]])
def test_cli_several_gpus_mistakes_are_one_line(argv, capsys, tmp_path, monkeypatch):
    from gpusim.cli.commands import main
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpusim: error:")
    assert not list(tmp_path.iterdir())
