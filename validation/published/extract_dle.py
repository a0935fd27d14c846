"""Pick the NVIDIA DeepLearningExamples inference rows gpusim is validated on (run once;
the picks are committed as ``dle-convnets.csv``).

Source: NVIDIA/DeepLearningExamples, PyTorch/Classification/ConvNets/<model>/README.md,
section "Inference performance results": one table per GPU (DGX A100 1x A100 80GB, DGX-1
1x V100 16GB, T4) and precision (FP32 or TF32, NCHW; AMP, which the ConvNets configs run
channels_last: ``configs.yml`` ``memory_format: nhwc``), measured in the PyTorch 21.03
NGC container with ``launch.py --mode benchmark_inference``.

Rule (no hand-picking): every row at batch 128 and 256, where the GPU bounds the step,
of every model that timm or torchvision builds as the same architecture: resnet50 (v1.5 =
torchvision's), resnext101-32x4d, se-resnext101-32x4d, efficientnet-b0 (224 px) and
efficientnet-b4 (380 px, the configs' ``image_size``). The "widese" EfficientNets are
NVIDIA's own variants and are left out.

The step time is ``batch / Throughput Avg``. The tables' "Latency Avg" is not: in every
picked row (39 of 39) it exceeds the row's own 95th percentile (EfficientNet-B0 AMP batch
256 on the A100: 39.1 ms average, 25.0 ms at p95, 25.0 ms from the throughput), so a few
slow iterations pull the mean up; the throughput figure sits at the percentiles. It is kept
in the column ``latency_avg_ms`` for reference.

    python3 validation/published/extract_dle.py MIRROR_GIT_DIR COMMIT > validation/published/dle-convnets.csv

``--host`` picks the batch-1 rows instead (``dle-convnets-batch1.csv``, column ``bound`` =
host): where the host bounds the step (ResNet-50 FP32 on the V100: 10.4 ms per image at
batch 1, 2 and 4 alike, ~0.8 ms of kernels), scored against gpusim's eager end-to-end time
per call with the reference host, not against device time.
"""

import csv
import re
import subprocess
import sys

MODELS = {   # DLE name -> (gpusim model, image size)
    "resnet50": ("tv:resnet50", 224),
    "resnext101-32x4d": ("timm:resnext101_32x4d", 224),
    "se-resnext101-32x4d": ("timm:seresnext101_32x4d", 224),
    "efficientnet-b0": ("timm:efficientnet_b0", 224),
    "efficientnet-b4": ("timm:efficientnet_b4", 380),
}
READMES = {"resnet50": "resnet50v1.5", "resnext101-32x4d": "resnext101-32x4d",
           "se-resnext101-32x4d": "se-resnext101-32x4d",
           "efficientnet-b0": "efficientnet", "efficientnet-b4": "efficientnet"}
GPUS = (("A100", "a100-sxm4-80gb", "DGX A100 1x A100 80GB"),
        ("V100", "v100-sxm2-16gb", "DGX-1 1x V100 16GB"),
        ("T4", "t4", "T4"))
PRECISIONS = {"FP32": ("float32", "nchw"), "TF32": ("float32", "nchw"),
              "Mixed Precision": ("float16", "nhwc")}
BATCHES = (128, 256)


def _cells(line: str) -> list[str]:
    return [c.strip().strip("*").strip() for c in line.strip().strip("|").split("|")]


def parse(text: str, model: str, source: str, batches=BATCHES):
    """Rows of one README: yields (gpu, layout, dtype, batch, step_ms, latency_avg_ms)."""
    gpu = prec = None
    for line in text.splitlines():
        h = re.match(r"#+\s*Inference performance: NVIDIA (.*)", line)
        if h:
            gpu = next((g for key, g, _ in GPUS if key in h.group(1)), None)
            continue
        h = re.match(r"#+\s*(FP32|TF32|Mixed Precision) Inference Latency", line)
        if h:
            prec = h.group(1)
            continue
        if line.startswith("#"):
            gpu = None if line.startswith("## ") or line.startswith("### ") else gpu
            continue
        if not (gpu and prec and line.startswith("|")):
            continue
        c = _cells(line)
        if c[0] in MODELS:                  # the EfficientNet tables name the model
            if c[0] != model:
                continue
            c = c[1:]
        elif c[0] not in {str(b) for b in range(1, 1025)}:
            continue
        batch = int(c[0])
        if batch not in batches:
            continue
        ips = float(c[1].split()[0])
        lat = float(c[2].split()[0])
        dtype, layout = PRECISIONS[prec]
        yield gpu, layout, dtype, batch, round(batch / ips * 1e3, 2), lat, prec


def main(git_dir: str, commit: str, host: bool = False) -> None:
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["gpu", "layout", "model", "img_size", "batch", "step_ms", "dtype",
                  "latency_avg_ms"] + (["bound"] if host else []) + ["source"])
    for dle, (model, size) in MODELS.items():
        path = f"PyTorch/Classification/ConvNets/{READMES[dle]}/README.md"
        text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
                              capture_output=True, text=True, check=True).stdout
        for gpu, layout, dtype, batch, step, lat, prec in parse(text, dle, path,
                                                                 (1,) if host else BATCHES):
            machine = next(d for _, g, d in GPUS if g == gpu)
            out.writerow([gpu, layout, model, size, batch, step, dtype, lat]
                         + (["host"] if host else []) +
                         [f"NVIDIA/DeepLearningExamples@{commit[:12]}:{path} (pytorch-21.03 "
                          f"NGC; {machine}; {prec} Inference Latency; batch / Throughput Avg)"])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--host" in sys.argv[3:])
