"""Capture and predict time of an 8-GPU FSDP2 training step of a 7B-class decoder on this machine.

Target (issue 33): capture plus predict under 30 s on the 2-core machine. The step is ``gpusim predict llama7b
--train --fsdp --amp bf16 --nproc-per-node 8``'s (LLaMA-style 7B decoder, 32 layers, d=4096, batch 1 x 2048 tokens;
``fully_shard`` per decoder layer and at the root with bf16 parameters and fp32 reductions; foreach AdamW), built on
the meta device under gpusim's fake 8-rank process group.

    python benchmarks/dist_7b.py [--nproc-per-node 8] [--nnodes 1]
"""

import argparse
import resource
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc-per-node", type=int, default=8)
    ap.add_argument("--nnodes", type=int, default=1)
    a = ap.parse_args()
    t0 = time.perf_counter()
    import torch  # noqa: F401  (import time reported separately)

    from gpusim.predict.distributed import predict_distributed, zoo_builder
    t_import = time.perf_counter() - t0
    t1 = time.perf_counter()
    p = predict_distributed(zoo_builder("llama7b", "fsdp", amp="bf16"), "h100", a.nproc_per_node, a.nnodes,
                            world1=False)
    t = time.perf_counter() - t1
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"llama7b FSDP2 step on {a.nproc_per_node} x {a.nnodes} H100: step {p.step_us / 1e3:.0f} ms, comm "
          f"{p.comm_us / 1e3:.0f} ms ({p.exposed_comm_us / 1e3:.0f} exposed), {p.n_collectives} collectives, peak "
          f"{p.peak_bytes / 2**30:.1f} GiB per rank ({'fits' if p.fits else 'does not fit'})")
    print(f"import {t_import:.1f} s, capture + predict {t:.1f} s (target 30 s); peak RSS {rss_gb:.2f} GB")


if __name__ == "__main__":
    main()
