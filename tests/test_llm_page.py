"""docs/accuracy.md's LLM section is built from the stored predictions of validation.score.generate_accuracy."""

import json
import os

from validation.reports import llm_page


def _gen(mode, cache, p_tpot, m_tpot, fastest=True, kv=(100, 100), peak=(1000, 1000), batch=1):
    return dict(gpu="G", host="lease-x/host.toml", lease_profile=True, model="m", batch=batch, prompt=8, new=4,
                cache=cache, mode=mode, fastest_rep=fastest, contended=False, pred_ttft_us=1.0, meas_ttft_us=1.0,
                pred_tpot_us=p_tpot, meas_tpot_us=m_tpot, pred_total_us=1.0, meas_total_us=1.0,
                pred_peak_bytes=peak[0], meas_peak_bytes=peak[1], pred_kv_bytes=kv[0], meas_kv_bytes=kv[1])


def test_section_from_a_tiny_stored_file(tmp_path):
    data = {"generate": [_gen("eager", "dynamic", 110.0, 100.0),              # +10%
                         _gen("compiled", "static", 20.0, 25.0, peak=(1000, 1100)),   # -20%, peak 9% off
                         _gen("eager", "dynamic", 50.0, 40.0, fastest=False, kv=(7, 8), batch=8)],
            "prefill": [{"gpu": "G", "pred_device_us": 103.0, "meas_device_us": 100.0},
                        {"gpu": "G", "pred_device_us": 95.0, "meas_device_us": 100.0}],
            "decode_step": [{"gpu": "G", "pred_device_us": 88.0, "meas_device_us": 100.0}]}
    path = tmp_path / "predictions.json"
    path.write_text(json.dumps(data))
    text = llm_page.llm_markdown(str(path))
    assert "| G | 4.0% / 4.8% (2) | 12.0% / 12.0% (1) |" in text
    assert "| dynamic cache, eager | 10.0% | 1 |" in text           # the call-by-call record only
    assert "| static cache, compiled | 20.0% | 1 |" in text
    assert "| static compiled over eager dynamic (speed-up) | 37.5% | 1 |" in text   # 5.5x / 4x
    assert "exact in 2 of 3" in text
    assert "within 2% in 2 of 3 calls" in text
    assert llm_page.llm_markdown(str(tmp_path / "none.json")) is None


def test_accuracy_page_carries_the_stored_section():
    """docs/accuracy.md's LLM section is what the committed stored file gives, and its figures are docs/llm.md's."""
    body = llm_page.llm_markdown()
    assert body is not None
    page = open(os.path.join(llm_page.ROOT, "docs", "accuracy.md")).read()
    assert (llm_page.LLM_HEAD + "\n" + body) in page
    llm = open(os.path.join(llm_page.ROOT, "docs", "llm.md")).read()
    data = llm_page.load()
    peak = [abs(x["pred_peak_bytes"] / x["meas_peak_bytes"] - 1) * 100 for x in data["generate"] if x["meas_peak_bytes"]]
    assert f"within 2% in {sum(e <= 2 for e in peak)} of {len(peak)} calls" in llm
