"""``gpusim sweep MODEL... --train --ddp|--fsdp --nproc-per-node 1,2,4,8 [--nnodes N]``: training steps across GPU
counts (:mod:`gpusim.sweep.dist`), one row per (model, sizes, GPU, strategy, GPUs), and which count and strategy
meets ``--target-step-ms`` / ``--target-throughput`` at the lowest ``--price``."""

from __future__ import annotations

import json
import sys

from gpusim.util.errors import UserError


def add_sweep_dist_args(sw) -> None:
    sw.add_argument("--nproc-per-node", default=None, metavar="1,2,4,8",
                    help="GPUs per host to sweep (with --train --ddp and/or --fsdp): training steps across GPUs")
    sw.add_argument("--nnodes", type=int, default=1, metavar="N", help="hosts (with --nproc-per-node)")
    sw.add_argument("--ddp", action="store_true", help="with --nproc-per-node: DistributedDataParallel rows")
    sw.add_argument("--fsdp", action="store_true", help="with --nproc-per-node: FSDP2 (fully_shard) rows")
    sw.add_argument("--target-step-ms", type=float, default=None, help="with --nproc-per-node: the step time to meet")
    sw.add_argument("--target-throughput", type=float, default=None,
                    help="with --nproc-per-node: samples per second to reach")
    sw.add_argument("--price", action="append", metavar="GPU=USD_PER_HOUR",
                    help="with --nproc-per-node: what one GPU costs per hour (repeatable): h100=2.49")


def is_sweep_dist(a) -> bool:
    return getattr(a, "nproc_per_node", None) is not None or getattr(a, "ddp", False) or getattr(a, "fsdp", False)


def cmd_sweep_dist(a) -> int:
    from gpusim.predict.compare import parse_gpus
    from gpusim.sweep.answers import parse_prices
    from gpusim.sweep.columns import _pandas
    from gpusim.sweep.dist import COLUMNS, answer_table, answers, parse_counts, sweep_dist
    from gpusim.sweep.results import out_format, write_results
    from gpusim.sweep.run import parse_size_grid
    if a.nproc_per_node is None:
        raise UserError("--ddp/--fsdp in a sweep go with --nproc-per-node 1,2,4,8 (the GPU counts to sweep)")
    if not a.train:
        raise UserError("a sweep across GPUs sweeps training steps: add --train")
    strategies = [s for s, on in (("ddp", a.ddp), ("fsdp", a.fsdp)) if on] or ["ddp", "fsdp"]
    if "," in str(a.dtype):
        raise UserError("a sweep across GPUs takes one --dtype")
    out_format(a.out)
    pd = _pandas()
    rows = sweep_dist(a.models, parse_gpus(a.gpu), parse_counts(a.nproc_per_node), strategies,
                      parse_size_grid(a.size), a.nnodes, a.dtype, a.amp, host=a.host,
                      progress=None if a.json else (lambda s: print(f"predicting {s}", file=sys.stderr, flush=True)))
    write_results(a.out, pd.DataFrame(rows, columns=list(COLUMNS)))
    ans = answers(rows, a.target_step_ms, parse_prices(a.price), a.target_throughput)
    errors = sum(1 for r in rows if r["error"])
    if a.json:
        print(json.dumps({"out": a.out, "rows": len(rows), "errors": errors, "answers": ans}, default=str))
    else:
        print(answer_table(ans) if ans else "no configuration fits")
        print(f"{a.out}: {len(rows)} rows, {errors} with an error", file=sys.stderr)
    return 0
