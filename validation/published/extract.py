"""Pick the published rows gpusim is validated on (run once; the picks are committed).

Source: timm's own inference benchmarks (huggingface/pytorch-image-models, results/
benchmark-infer-amp-*-pt240-cu124-{rtx3090,rtx4090}.csv: torch 2.4, CUDA 12.4, AMP
fp16 autocast, eager, batch 1024 where it fits; columns infer_samples_per_sec and
infer_step_time (ms per batch)). Rule: rows at the model's pretrained input size (the
size gpusim builds by default), models timm 1.0 can build, then the N whose name has the
smallest sha1 (a hash sample, no hand-picking). Nothing is fitted on these rows.

    python3 validation/published/extract.py MIRROR_GIT_DIR COMMIT [--set pt291]

``--set pt291`` picks from timm's later RTX 4090 tables (``results/benchmark-infer-amp-nchw-
pt291-cu128-4090{,-dynamo}.csv``: torch 2.9.1, CUDA 12.8, the same AMP benchmark, eager and
``torch.compile``d): by the same rule, the N models in both tables, each row twice (column
``mode``: eager, compiled), written as ``timm-infer-amp-pt291.csv``. timm's ``test_*``
models (tiny nets for its unit tests) are left out of both sets.
"""

import csv
import hashlib
import io
import subprocess
import sys

N = 48
FILES = {("rtx3090", "nchw"): "results/benchmark-infer-amp-nchw-pt240-cu124-rtx3090.csv",
         ("rtx3090", "nhwc"): "results/benchmark-infer-amp-nhwc-pt240-cu124-rtx3090.csv",
         ("rtx4090", "nchw"): "results/benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv"}


PT291 = {"eager": "results/benchmark-infer-amp-nchw-pt291-cu128-4090.csv",
         "compiled": "results/benchmark-infer-amp-nchw-pt291-cu128-4090-dynamo.csv"}


def _table(git_dir: str, commit: str, path: str) -> dict[str, dict]:
    """``{model: row}`` of one timm results table, the rows at the model's pretrained input
    size (the size gpusim builds by default) of models timm can build."""
    import timm
    text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
                          capture_output=True, text=True, check=True).stdout
    out = {}
    for r in csv.DictReader(io.StringIO(text)):
        name = r["model"]
        if not timm.is_model(name) or name.startswith("test_"):
            continue            # timm's test_* models are tiny unit-test nets, not architectures
        cfg = timm.models.get_pretrained_cfg(name)
        if cfg is None or int(cfg.input_size[-1]) != int(r["infer_img_size"]):
            continue
        out[name] = r
    return out


def _sample(names) -> list[str]:
    """The N names with the smallest sha1: a hash sample, no hand-picking."""
    return sorted(names, key=lambda n: hashlib.sha1(n.encode()).hexdigest())[:N]


def _row(gpu, layout, r, commit, path, *extra):
    return [gpu, layout, r["model"], r["infer_img_size"], r["infer_batch_size"],
            r["infer_step_time"], *extra, f"huggingface/pytorch-image-models@{commit[:12]}:{path}"]


def main(git_dir: str, commit: str, which: str = "pt240") -> None:
    out = csv.writer(sys.stdout, lineterminator="\n")
    if which == "pt291":
        tables = {mode: _table(git_dir, commit, path) for mode, path in PT291.items()}
        out.writerow(["gpu", "layout", "model", "img_size", "batch", "step_ms", "mode", "source"])
        for name in _sample(set(tables["eager"]) & set(tables["compiled"])):
            for mode, path in PT291.items():
                out.writerow(_row("rtx4090", "nchw", tables[mode][name], commit, path, mode))
        return
    out.writerow(["gpu", "layout", "model", "img_size", "batch", "step_ms", "source"])
    for (gpu, layout), path in FILES.items():
        rows = _table(git_dir, commit, path)
        for name in _sample(rows):
            out.writerow(_row(gpu, layout, rows[name], commit, path))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[4] if sys.argv[3:4] == ["--set"] else "pt240")
