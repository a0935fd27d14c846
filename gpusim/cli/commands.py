"""The ``gpusim`` command: a thin layer over the Python API.

User mistakes (unknown GPU, bad spec file, bad model file, bad sizes, untraceable model,
illegal fusion, an output file that cannot be written) print one line
``gpusim: error: ...`` on stderr and exit 2; output paths are checked before any slow work,
and nothing is half-written. argparse's own mistakes (a missing argument, an unknown
option, an option given twice) are the same one line, naming ``gpusim CMD --help``, not
argparse's usage block: one shape for every error, which ``--json`` can wrap.

With ``--json`` an error is instead one JSON document ``{"error": "...", "exit": 2}`` on
*stdout*, where the successful answer would have been: a program reads one stream and
parses one document either way, and the exit status still says which it got.

Choices (``--dtype``, ``--mode``, ``--algo``, ``--gpu`` names) are case-insensitive; names
the user made (models, nodes, files) are not. This module is the top of the import graph:
only ``gpusim.__main__`` imports it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys

from gpusim.util.collector import loading_for_good
from gpusim.util.errors import GpusimError, UserError
from gpusim.cli.sweep import cmd_sweep, sweep_report_parser, sweep_serve_parser
from gpusim.cli.sweep_dist import add_sweep_dist_args
from gpusim.cli.info import cmd_examples, cmd_hosts, cmd_specs
from gpusim.cli.lab import cmd_accuracy, cmd_calibrate, cmd_validate
from gpusim.cli.parser import _Parser
from gpusim.cli.generate import add_parser as add_generate

# Everything else is imported inside the command that needs it, so that `gpusim --help`
# and argument errors never import torch. The lab (``validation``: calibrate, validate,
# accuracy) is loaded only by its own commands.

DEFAULT_MODEL = "transformer_block"
OUTPUTS = ("trace", "plot", "dot")          # the picture options of predict and search


def _graph(args):
    """The OpGraph a model-taking command works on (name, dtype and sizes from args); with
    ``--train``, the model's standard training step (:func:`gpusim.predict.step.standard_step`)."""
    from gpusim.models.resolve import model_graph, parse_sizes
    if getattr(args, "train", False):
        from gpusim.predict.step import step_graph
        return step_graph(args.model, args.dtype, parse_sizes(args.size), args.optimizer,
                          getattr(args, "amp", None))
    return model_graph(args.model, args.dtype, parse_sizes(args.size), getattr(args, "amp", None))


def _check_args(a) -> None:
    """Every cheap check, before the slow part (capture, search): the output files can
    be written, and the sizes, dtype, mode, algorithm and GPU spec are ones gpusim knows."""
    from gpusim.hw.spec import load_spec
    from gpusim.hw.host import load_host
    from gpusim.models.resolve import check_amp, parse_dtype, parse_sizes
    from gpusim.lower.modes import check_mode
    for opt in a.outputs:
        path = getattr(a, opt, None)
        if path is None:
            continue
        from gpusim.report import viz       # only for a picture or a page (matplotlib only for --plot)
        from gpusim.report.viz.common import load_matplotlib
        if opt == "plot":
            viz.plot_format(path)
            load_matplotlib()       # missing: say so before a --trace beside it is written
        if opt == "out" and a.cmd == "sweep":
            from gpusim.sweep.results import out_format
            out_format(path)
        if opt == "out" and a.cmd in ("report", "sweep report"):
            viz.html_target(path)
        viz.check_target(path)
    if a.takes_model:
        parse_sizes(a.size)
        parse_dtype(a.dtype)
        check_amp(a.amp, a.dtype)
        check_mode(a.mode)
        if a.cmd == "predict" and "," in a.gpu:     # one model on several GPUs
            from gpusim.predict.compare import parse_gpus
            a.gpus = parse_gpus(a.gpu)
            for g in a.gpus:
                load_spec(g)
            if any(getattr(a, o, None) for o in OUTPUTS):
                raise UserError("--trace/--plot/--dot draw one GPU's run; name one --gpu "
                                "or drop them")
        elif "," in a.gpu:
            raise UserError(f"--gpu {a.gpu!r}: only predict compares several GPUs; "
                            f"give {a.cmd} one GPU")
        else:
            load_spec(a.gpu)
        load_host(a.host)
    if a.cmd in ("predict", "report"):
        from gpusim.report.rollup import check_rollup_args
        check_rollup_args(a)
    if a.cmd == "predict":
        from gpusim.cli.train import check_train
        check_train(a)
    if getattr(a, "memory_limit", None) is not None:
        a.memory_limit = parse_bytes(a.memory_limit)
    if getattr(a, "algo", None) is not None:
        from gpusim.fusion.search import ALGOS       # search imports scipy: not on predict's path
        if a.algo not in ALGOS:
            raise UserError(f"unknown --algo {a.algo!r}; choose one of {', '.join(ALGOS)}")
    if a.cmd == "whatif":
        a.fuse = fuse_groups(a.fuse)


def fuse_groups(items) -> list[list[str]]:
    """``--fuse add,relu --fuse mul,exp`` -> ``[["add", "relu"], ["mul", "exp"]]``; a
    group names two or more nodes, each once, with no empty name between commas."""
    if not items:
        raise UserError("whatif needs at least one --fuse A,B,C (two or more node names as "
                        "`gpusim predict` prints them)")
    groups = []
    for f in items:
        names = [x.strip() for x in f.split(",")]
        if not any(names):
            raise UserError(f"--fuse {f!r} names no node; give two or more node names, "
                            "e.g. --fuse add,relu")
        if "" in names:
            raise UserError(f"--fuse {f!r} has an empty name; separate node names by single "
                            "commas, e.g. --fuse add,relu")
        twice = sorted({x for x in names if names.count(x) > 1})
        if twice:
            raise UserError(f"--fuse {f!r} names {', '.join(twice)} twice; name each node once")
        if len(names) < 2:
            raise UserError(f"--fuse {f!r} names one node; a fused group needs two or more, "
                            "e.g. --fuse add,relu")
        groups.append(names)
    return groups


def parse_bytes(text: str) -> int:
    """``--memory-limit``: bytes, or with a unit (``40GiB``, ``512MiB``, ``8e9``)."""
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6,
             "gb": 10**9, "b": 1}
    t = str(text).strip().lower().replace(" ", "")
    mult = 1
    for u in sorted(units, key=len, reverse=True):
        if t.endswith(u):
            t, mult = t[: -len(u)], units[u]
            break
    try:
        v = float(t) * mult
    except ValueError:
        raise UserError(f"--memory-limit {text!r} is not a number of bytes "
                        "(e.g. 40000000000 or 40GiB)") from None
    if not v > 0 or v == float("inf"):
        raise UserError(f"--memory-limit must be a positive number of bytes, got {text!r}")
    return int(v)


def _add_model_args(p, gpu_default="h100"):
    p.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                   help=f"built-in example name or path/to/file.py:NAME (default {DEFAULT_MODEL}; "
                        "`gpusim examples` lists them)")
    p.add_argument("--gpu", default=gpu_default, help="GPU spec name, alias or .toml path "
                   "(`gpusim specs` lists them); predict takes several, a100,v100,h100, "
                   "and prints one comparison")
    p.add_argument("--host", default=None, metavar="NAME|PATH",
                   help="host profile that issues the work: name or .toml path (default: the "
                        "reference host, the same for every GPU; `gpusim hosts` lists them)")
    p.add_argument("--dtype", default="float32", type=str.lower,
                   help="float32 | float16 | bfloat16")
    p.add_argument("--amp", default=None, metavar="bf16|fp16",
                   help="fp32 weights and inputs, the forward under torch.autocast(\"cuda\") "
                        "at this dtype (mixed precision)")
    p.add_argument("--size", action="append", metavar="KEY=VALUE",
                   help="override a model's size (repeatable, or several keys at once), e.g. "
                        "--size batch=8,seq=128")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--all", action="store_true", help="list every kernel, not the top 25")
    p.set_defaults(takes_model=True)


def _picture_args(p):
    p.add_argument("--trace", metavar="FILE", help="Chrome/Perfetto trace (.json) of the simulated call")
    p.add_argument("--plot", metavar="FILE", help="roofline (.png, .svg or .pdf; needs matplotlib)")
    p.add_argument("--dot", metavar="FILE", help="the fused graph in Graphviz DOT (and .svg when "
                   "Graphviz is installed)")
    p.set_defaults(outputs=OUTPUTS)


def _depth_arg(p):
    p.add_argument("--depth", default=None, metavar="N",
                   help="module levels of the per-module roll-up (default 3: e.g. "
                        "encoder.layer.0, layer1.0.conv1)")


def _mode_arg(p, default):
    p.add_argument("--mode", default=default, type=str.lower,
                   help="eager | compiled | cudagraph")


def cmd_predict(a) -> int:
    from gpusim.report.rollup import rollup_dict, rollup_text
    from gpusim.predict.pipeline import modes_by_speed, predict
    from gpusim.report.text import dumps, modes_line, prediction_text
    from gpusim.cli.dist import cmd_predict_dist, is_dist
    if is_dist(a):
        return cmd_predict_dist(a)
    if a.max_batch:
        from gpusim.cli.train import cmd_max_batch
        return cmd_max_batch(a)
    g = _graph(a)
    if getattr(a, "gpus", None):
        return _compare(a, g)
    p = predict(g, gpu=a.gpu, mode=a.mode, host=a.host)
    if a.json:
        doc = p.to_dict()
        if a.by == "module":
            doc.update(rollup_dict(p, a.depth))
        print(dumps(doc))
    else:
        print(prediction_text(p, body=rollup_text(p, a.depth)) if a.by == "module"
              else prediction_text(p, None if a.all else 25))
        if p.fits and "train" not in g.meta:      # torch.compile training is not modelled
            print(modes_line(modes_by_speed(g, a.gpu, have=p, host=a.host)))
    _extras(a, pred=p)
    return 0


def _compare(a, g) -> int:
    """``predict MODEL --gpu a,b,c``: one table, the same host for every GPU."""
    from gpusim.predict.compare import compare, compare_rows, compare_text
    from gpusim.report.text import dumps
    preds = compare(g, a.gpus, mode=a.mode, host=a.host)
    if a.json:
        print(dumps({"model": g.name, "mode": a.mode, "gpus": compare_rows(preds)}))
    else:
        print(compare_text(preds))
    return 0


def cmd_search(a) -> int:
    from gpusim.report.text import dumps, search_text
    from gpusim.fusion.search import search
    r = search(_graph(a), gpu=a.gpu, mode=a.mode, algo=a.algo, memory_limit=a.memory_limit,
               host=a.host)
    print(dumps(r.to_dict()) if a.json else search_text(r, None if a.all else 25))
    _extras(a, result=r)
    return 0


def cmd_whatif(a) -> int:
    from gpusim.report.text import dumps, search_text
    from gpusim.fusion.search import whatif
    r = whatif(_graph(a), a.fuse, gpu=a.gpu, mode=a.mode, host=a.host)
    if a.json:
        print(dumps(r.to_dict()))
    else:
        print(search_text(r, None))
        print(explain_whatif(r))
    return 0


def explain_whatif(r) -> str:
    """Where the time goes: bytes saved, kernels saved, host cost."""
    from gpusim.util.fmt import fmt_num
    u, f = r.unfused, r.fused
    fused_groups = [k for k in f.kernels if len(k.ops) > 1]
    lines = []
    for k in fused_groups:
        parts = [uk for uk in u.kernels if uk.ops[0] in k.ops]
        b0 = sum(p.bytes for p in parts)
        t0 = sum(p.us for p in parts)
        lines.append(f"group {'+'.join(k.ops)}: {len(parts)} kernels -> 1; bytes {fmt_num(b0, 'B')} -> "
                     f"{fmt_num(k.bytes, 'B')} ({b0 / k.bytes if k.bytes else float('inf'):.2f}x less); "
                     f"device {t0:.2f} us -> {k.us:.2f} us ({k.bound}-bound)")
    lines.append(f"host: {u.timeline.host_us:.1f} us per call eager -> {f.timeline.host_us:.1f} us "
                 f"in {f.mode} mode; GPU idle {u.idle_us:.1f} -> {f.idle_us:.1f} us")
    return "\n".join(lines)


def _extras(a, pred=None, result=None):
    """The --trace/--plot/--dot pictures asked for (their paths were checked up front)."""
    for opt in OUTPUTS:
        path = getattr(a, opt, None)
        if path:
            from gpusim.report import viz
            writers = {"trace": viz.trace_output, "plot": viz.plot_output, "dot": viz.dot_output}
            writers[opt](pred=pred, result=result, path=path)
            print(f"wrote {path}", file=sys.stderr)


def cmd_report(a) -> int:
    """``gpusim report``: search, then write the self-contained HTML report to ``--out``."""
    from gpusim.report import viz
    from gpusim.models.resolve import model_graph, parse_sizes
    from gpusim.fusion.search import search
    sizes = parse_sizes(a.size)
    res = search(model_graph(a.model, a.dtype, sizes), gpu=a.gpu, mode=a.mode, algo=a.algo,
                 host=a.host)
    page = viz.report_html(res, {"model": a.model, "dtype": a.dtype, "sizes": sizes,
                                 "depth": a.depth})
    viz.write_atomic(a.out, page)
    print(f"wrote {a.out}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="gpusim", description=(
        "Predict how fast PyTorch computations run on NVIDIA GPUs and what operator "
        "fusion buys, before writing a kernel."))
    ap.set_defaults(outputs=(), takes_model=False)
    sub = ap.add_subparsers(dest="cmd")
    p = sub.add_parser("predict", help="per-kernel time of a model on a GPU")
    _add_model_args(p)
    p.add_argument("--train", action="store_true", help="a whole training step: forward, loss, "
                   "backward, optimizer (cross-entropy for classifiers, the LM loss for language models)")
    p.add_argument("--optimizer", default=None, type=str.lower, help="sgd | adam | adamw | "
                   "adamw_fused (with --train; default adamw)")
    p.add_argument("--max-batch", action="store_true", help="the largest batch that fits on the "
                   "GPU (a search along the predicted memory against the batch)")
    _mode_arg(p, "eager")
    p.add_argument("--by", default="kernel", type=str.lower,
                   help="kernel (the per-kernel list) | module (time, FLOPs, bytes, parameters "
                        "and memory per nn.Module, like fvcore's flop_count_table)")
    _depth_arg(p)
    _picture_args(p)
    from gpusim.cli.dist import add_dist_args
    add_dist_args(p)
    p.set_defaults(fn=cmd_predict)
    s = sub.add_parser("search", help="find the best fusion partition")
    _add_model_args(s)
    _mode_arg(s, "compiled")
    s.add_argument("--algo", default="auto", type=str.lower, help="auto | greedy | bytes | exact")
    s.add_argument("--memory-limit", metavar="BYTES", default=None,
                   help="the fastest partition whose weights, inputs and activation peak fit "
                        "in BYTES (units allowed: 40GiB)")
    _picture_args(s)
    s.set_defaults(fn=cmd_search)
    w = sub.add_parser("whatif", help="predict the speed-up of fusing named nodes")
    _add_model_args(w)
    _mode_arg(w, "compiled")
    w.add_argument("--fuse", action="append", metavar="A,B,C", help="a group (repeatable)")
    w.set_defaults(fn=cmd_whatif)
    sp = sub.add_parser("specs", help="list the GPU spec files, or one spec's figures and "
                        "where each came from")
    sp.add_argument("gpu", nargs="?", default=None,
                    help="a GPU name, alias or .toml path: print its every figure with source and ref")
    sp.set_defaults(fn=cmd_specs)
    ho = sub.add_parser("hosts", help="list the host profiles (--host)")
    ho.set_defaults(fn=cmd_hosts)
    ex = sub.add_parser("examples", help="list the built-in examples")
    ex.set_defaults(fn=cmd_examples)
    c = sub.add_parser("calibrate", help="measure the GPU at hand and write a spec file")
    c.add_argument("--out", required=True)
    c.add_argument("--base", default=None, help="datasheet spec to start from")
    only = c.add_mutually_exclusive_group()     # refused here, not by the lab's own parser
    only.add_argument("--host-only", action="store_true",
                      help="measure only this machine's host figures and write them as a host "
                           "profile (--base: the GPU spec to predict its reference forwards on)")
    only.add_argument("--forward-only", action="store_true",
                      help="re-time only the host's in-forward speed (eager_forward_factor and "
                           "compiled_forward_factor, about 1-2 min) on top of --base: run it right "
                           "before the runs you compare")
    c.add_argument("--rounds", type=int, default=None,
                   help="--host-only/--forward-only: time the host this many times (default 3) and keep "
                        "each figure's fastest: a shared host slows down in episodes")
    c.set_defaults(fn=cmd_calibrate, outputs=("out",))
    v = sub.add_parser("validate", help="measure the built-in cases on this machine's GPU")
    v.add_argument("--out", required=True, help="results folder")
    v.add_argument("--cases", default=None, help="comma-separated example names")
    v.add_argument("--quick", action="store_true", help="fewer sizes and dtypes")
    v.set_defaults(fn=cmd_validate)
    acc = sub.add_parser("accuracy", help="compare predictions with recorded measurements")
    acc.add_argument("--gpu", action="append", type=str.lower,
                     help="results folder name (h100, h200)")
    acc.add_argument("--results", default=None, help="validation/results folder")
    acc.add_argument("--json", action="store_true")
    acc.add_argument("--markdown", action="store_true", help="print the README table")
    acc.add_argument("--no-zoo", action="store_true",
                     help="skip the real-model zoo records (re-capturing them takes ~2 min)")
    acc.add_argument("--plot", metavar="FILE", default=None)
    acc.add_argument("--update-readme", metavar="README", default=None,
                     help="rewrite the summary between the accuracy markers of this README and docs/accuracy.md beside it")
    acc.set_defaults(fn=cmd_accuracy, outputs=("plot",))
    r = sub.add_parser("report", help="one self-contained HTML report")
    _add_model_args(r)
    _mode_arg(r, "compiled")
    r.add_argument("--out", required=True, help="the page (.html)")
    r.add_argument("--algo", default="auto", type=str.lower, help="auto | greedy | bytes | exact")
    _depth_arg(r)
    r.set_defaults(fn=cmd_report, outputs=("out",))
    add_generate(sub)
    sw = sub.add_parser("sweep", help="many models x sizes x GPUs x modes into one table, on "
                        "Dask; `gpusim sweep report RESULTS --out F.html` answers from it",
                        description="Predict every model x size x dtype on every GPU x mode "
                        "into one table (docs/sweep.md). `gpusim sweep report RESULTS --out "
                        "F.html` answers from it (see `gpusim sweep report --help`).")
    sw.add_argument("models", nargs="+", metavar="MODEL", help="models as predict takes them")
    sw.add_argument("--gpu", required=True, help="GPU specs, comma-separated: h100,a100,l4")
    sw.add_argument("--size", action="append", metavar="KEY=V1,V2",
                    help="sizes to sweep (repeatable): --size batch=1,8,64 --size seq=128,512")
    sw.add_argument("--mode", default="eager,compiled,cudagraph",
                    help="modes, comma-separated (default all three)")
    sw.add_argument("--dtype", default="float32", help="dtypes, comma-separated")
    sw.add_argument("--train", action="store_true", help="a training step per model (AdamW, "
                    "the loss of predict --train), eager")
    sw.add_argument("--amp", default=None, metavar="bf16|fp16", help="fp32 weights, the "
                    "forward under torch.autocast('cuda')")
    sw.add_argument("--host", default=None, metavar="NAME|PATH",
                    help="host profile (default the reference host, the same for every GPU)")
    sw.add_argument("--out", required=True, help="results .parquet or .csv: rows already "
                    "there are skipped, so a killed sweep resumes")
    sw.add_argument("--dask", default=None, metavar="local:N|tcp://HOST:PORT|off",
                    help="where tasks run (default: local:<CPUs> with the sweep extra, else "
                         "this process)")
    sw.add_argument("--json", action="store_true", help="print one JSON summary")
    add_sweep_dist_args(sw)
    sw.set_defaults(fn=cmd_sweep, outputs=("out",))
    return ap


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split("\n")) or type(e).__name__


def _error(message: str, as_json: bool) -> int:
    """Print a user error (one line, or one JSON document under --json); exit status 2."""
    if as_json:
        print(json.dumps({"error": message, "exit": 2}))
    else:
        print(f"gpusim: error: {message}", file=sys.stderr)
    return 2


#: The garbage collector's thresholds while a command runs (Python's default: 700, 10, 10).
#: A command imports torch and a model library (a million long-lived objects) and traces
#: once; at the defaults, full collections that rescan all of them and find next to nothing
#: were 0.4-0.7 s of `gpusim predict`'s 3-4 s of CPU. Young cycles are still collected.
#: Predictions do not depend on it: a traced tensor dies by its reference count (capture's
#: Python lifetimes are the same with the collector off, every example and zoo model).
GC_THRESHOLD = (100_000, 50, 100)


def main(argv=None) -> int:
    saved = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLD)
    try:
        return _main(argv)
    finally:
        gc.unfreeze()       # what the command froze (gpusim.util.collector)
        gc.set_threshold(*saved)


def _main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    as_json = "--json" in argv
    try:
        ap = build_parser()
        if len(argv) > 1 and argv[0].lower() == "sweep" and argv[1] == "report":
            ap, argv = sweep_report_parser(), argv[2:]
        elif len(argv) > 1 and argv[0].lower() == "sweep" and argv[1] == "serve":
            ap, argv = sweep_serve_parser(), argv[2:]
        cmds = next((x.choices for x in ap._actions
                     if isinstance(x, argparse._SubParsersAction)), {})
        if argv and argv[0].lower() in cmds:        # a command is a choice: PREDICT works
            argv[0] = argv[0].lower()
        a, extra = ap.parse_known_args(argv)
        if extra:                       # name the command whose options these are not
            prog = " ".join(["gpusim"] + ([a.cmd] if a.cmd else []))
            raise UserError(f"unrecognized arguments: {' '.join(extra)} (see `{prog} --help`)")
        if not getattr(a, "cmd", None):
            a = ap.parse_args(["predict"])
        as_json = bool(getattr(a, "json", as_json))
        with loading_for_good():        # the checks import torch: it is kept for good
            _check_args(a)
        return int(a.fn(a) or 0)
    except GpusimError as e:
        return _error(_one_line(e), as_json)
    except BrokenPipeError:
        # the reader left (`gpusim predict | head`): nothing to report, and stdout is gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:
        # the machine said no (a full disk, a folder that went away): not a gpusim bug
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        return _error(f"{where}{e.strerror or e}", as_json)
    except KeyboardInterrupt:
        print("gpusim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
