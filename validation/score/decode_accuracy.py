"""Eager decode steps predicted against the records of validation/measure/decode_run.py: kernels per
token, device time (kernel sum) and wall per token, for a step with its DynamicCache as an argument
(docs/llm.md), on the calibrated spec and the host profile of the machine kind that measured the
record (HOSTS). The loop's every step runs at a new key length, so every cuDNN attention call builds
its plan (cold: :func:`gpusim.predict.generate.plan_build_us`). Rewrites the generated table in docs/llm.md.

    python3 -m validation.score.decode_accuracy [--gpu h200-sxm-calibrated]"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDS = os.path.join(ROOT, "validation", "results", "decode")
DOC = os.path.join(ROOT, "docs", "llm.md")
BEGIN, END = "<!-- generated: python3 -m validation.score.decode_accuracy -->", "<!-- end generated -->"
GPUS = {"NVIDIA H200": "h200-sxm-calibrated", "NVIDIA H100 80GB HBM3": "h100-sxm-calibrated"}
#: the host profile of the machine kind that measured each GPU's records (hosts/)
HOSTS = {"NVIDIA H200": "h200-sxm-host", "NVIDIA H100 80GB HBM3": "h100-sxm-host"}


def records() -> list[tuple[dict, dict]]:
    out = []
    for path in sorted(glob.glob(os.path.join(RECORDS, "*.jsonl"))):
        env = None
        for line in open(path):
            r = json.loads(line)
            if r["kind"] == "environment":
                env = r
            elif r["kind"] == "decode":
                out.append((env, r))
    return out


def predict_step(model: str, batch: int, context: int, gpu: str, host=None):
    """The decode step at ``context`` cached tokens: the next token's forward with the cache and
    the argmax of its logits, as the record's loop runs it."""
    import torch
    from transformers import DynamicCache

    import gpusim
    from gpusim.models import zoo
    module, _ = zoo.build(model, device="meta", dtype=torch.bfloat16)
    module.config.use_cache = True
    cfg = module.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    cache = DynamicCache(config=cfg)
    for layer in range(cfg.num_hidden_layers):
        kv = torch.empty(batch, cfg.num_key_value_heads, context, head_dim, device="meta", dtype=torch.bfloat16)
        cache.update(kv, kv, layer)
    ids = torch.zeros(batch, 1, dtype=torch.long, device="meta")
    return gpusim.predict(lambda ids, cache: module(ids, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1),
                          (ids, cache), gpu=gpu, host=host)


def table() -> str:
    rows = ["| GPU | model | batch | context | kernels (pred / meas) | device µs (pred / meas) | wall µs per token (pred / meas) |",
            "|---|---|---|---|---|---|---|"]
    for env, r in records():
        gpu = GPUS[env["gpu"]]
        p = predict_step(r["model"], r["batch"], r["context"], gpu, HOSTS[env["gpu"]])
        dev, wall = r["kernel_sum_us"], r["wall_us"]["median"]
        # each step of the loop runs at a key length the process has not run: cold
        from gpusim.predict.generate import plan_build_us
        pw = p.end_to_end_us + plan_build_us(p)
        rows.append(f"| {env['gpu']} | {r['model']} | {r['batch']} | {r['context']} | {p.kernel_count} / {r['kernel_count']} "
                    f"| {p.device_us:.0f} / {dev:.0f} ({(p.device_us / dev - 1) * 100:+.0f}%) "
                    f"| {pw:.0f} / {wall:.0f} ({(pw / wall - 1) * 100:+.0f}%) |")
    return "\n".join(rows)


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    text = open(DOC).read()
    i, j = text.index(BEGIN), text.index(END) + len(END)
    new = text[:i] + BEGIN + "\n\n" + table() + "\n\n" + END + text[j:]
    with open(DOC, "w") as f:
        f.write(new)
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
