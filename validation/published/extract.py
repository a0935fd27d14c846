"""Pick the published rows gpusim is validated on (run once; the picks are committed).

Source: timm's own inference benchmarks (huggingface/pytorch-image-models, results/
benchmark-infer-amp-*-pt240-cu124-{rtx3090,rtx4090}.csv: torch 2.4, CUDA 12.4, AMP
fp16 autocast, eager, batch 1024 where it fits; columns infer_samples_per_sec and
infer_step_time (ms per batch)). Rule: rows at the model's pretrained input size (the
size gpusim builds by default), models timm 1.0 can build, then the N whose name has the
smallest sha1 (a hash sample, no hand-picking). Nothing is fitted on these rows.

    python3 validation/published/extract.py MIRROR_GIT_DIR COMMIT
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


def main(git_dir: str, commit: str) -> None:
    import timm
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["gpu", "layout", "model", "img_size", "batch", "step_ms", "source"])
    for (gpu, layout), path in FILES.items():
        text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
                              capture_output=True, text=True, check=True).stdout
        rows = []
        for r in csv.DictReader(io.StringIO(text)):
            name = r["model"]
            if not timm.is_model(name):
                continue
            cfg = timm.models.get_pretrained_cfg(name)
            if cfg is None or int(cfg.input_size[-1]) != int(r["infer_img_size"]):
                continue
            rows.append(r)
        rows.sort(key=lambda r: hashlib.sha1(r["model"].encode()).hexdigest())
        for r in rows[:N]:
            out.writerow([gpu, layout, r["model"], r["infer_img_size"], r["infer_batch_size"],
                          r["infer_step_time"],
                          f"huggingface/pytorch-image-models@{commit[:12]}:{path}"])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
