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
import json
import os
import sys

from .errors import GpusimError, UserError

# Everything else is imported inside the command that needs it, so that `gpusim --help`
# and argument errors never import torch. The lab (``validation``: calibrate, validate,
# accuracy) is loaded only by its own commands.

DEFAULT_MODEL = "transformer_block"
OUTPUTS = ("trace", "plot", "dot")          # the picture options of predict and search


def _graph(args):
    """The OpGraph a model-taking command works on (name, dtype and sizes from args); with
    ``--train``, the model's standard training step (:func:`gpusim.step.standard_step`)."""
    from .models import model_graph, parse_sizes
    if getattr(args, "train", False):
        from .capture import capture
        from .step import standard_step
        fn, fargs = standard_step(args.model, args.dtype, parse_sizes(args.size), args.optimizer)
        return capture(fn, fargs, name=f"{args.model} training step ({args.optimizer})")
    return model_graph(args.model, args.dtype, parse_sizes(args.size))


def _check_args(a) -> None:
    """Every cheap check, before the slow part (capture, search): the output files can
    be written, and the sizes, dtype, mode, algorithm and GPU spec are ones gpusim knows."""
    from . import viz
    from .hardware import load_spec
    from .host import load_host
    from .models import parse_dtype, parse_sizes
    from .viz.common import load_matplotlib
    from .search import ALGOS
    from .simulate import check_mode
    for opt in a.outputs:
        path = getattr(a, opt, None)
        if path is None:
            continue
        if opt == "plot":
            viz.plot_format(path)
            load_matplotlib()       # missing: say so before a --trace beside it is written
        if opt == "out" and a.cmd == "report":
            viz.html_target(path)
        viz.check_target(path)
    if a.takes_model:
        parse_sizes(a.size)
        parse_dtype(a.dtype)
        check_mode(a.mode)
        if a.cmd == "predict" and "," in a.gpu:     # one model on several GPUs
            from .compare import parse_gpus
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
    if a.cmd == "predict":
        _check_train(a)
    if getattr(a, "memory_limit", None) is not None:
        a.memory_limit = parse_bytes(a.memory_limit)
    if getattr(a, "algo", None) is not None and a.algo not in ALGOS:
        raise UserError(f"unknown --algo {a.algo!r}; choose one of {', '.join(ALGOS)}")
    if a.cmd == "whatif":
        a.fuse = fuse_groups(a.fuse)


def _check_train(a) -> None:
    """``--train``, ``--optimizer`` and ``--max-batch`` fit together."""
    from .step import OPTIMIZERS
    if a.optimizer is not None and not a.train:
        raise UserError("--optimizer applies to a training step; add --train")
    a.optimizer = (a.optimizer or "adamw").lower()
    if a.optimizer not in OPTIMIZERS:
        raise UserError(f"unknown --optimizer {a.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if a.train and a.mode != "eager":
        raise UserError(f"--train predicts an eager step; torch.compile training (--mode {a.mode}) "
                        "is not modelled yet: drop --mode")
    if a.max_batch and getattr(a, "gpus", None):
        raise UserError("--max-batch searches one GPU's memory; name one --gpu")
    if a.max_batch and any(k.split("=")[0].strip() == "batch" for k in a.size or []):
        raise UserError("--max-batch searches the batch size itself; drop --size batch=...")


def cmd_max_batch(a) -> int:
    """``predict MODEL --max-batch``: the largest batch whose call (or step) fits."""
    from .hardware import load_spec
    from .memory import fmt_bytes
    from .models import load_model, parse_dtype, parse_sizes
    from .report import dumps
    from .step import max_batch, standard_step
    sizes = parse_sizes(a.size)

    def make(b):
        if a.train:
            return standard_step(a.model, a.dtype, {**sizes, "batch": b}, a.optimizer)
        fn, args, _ = load_model(a.model, "meta", parse_dtype(a.dtype), **{**sizes, "batch": b})
        return fn, args
    try:
        make(1)
    except GpusimError as e:
        if "batch" in str(e) and "size" in str(e):
            raise UserError(f"{a.model} has no batch size to search (--max-batch needs one)") from None
        raise
    r = max_batch(make, a.gpu, host=a.host)
    spec = load_spec(a.gpu)
    what = "training step" if a.train else "forward"
    if a.json:
        print(dumps({"model": a.model, "gpu": spec.name, "train": a.train, "max_batch": r["batch"],
                     "tried": {str(k): v for k, v in sorted(r["tried"].items())},
                     "limit_reached": r["limit_reached"]}))
        return 0
    tried = ", ".join(f"{b}: {fmt_bytes(v)}" for b, v in sorted(r["tried"].items()))
    if r["batch"] == 0:
        print(f"{a.model}: a {what} at batch 1 does not fit on {spec.display_name} ({tried})")
    else:
        print(f"{a.model}: largest batch whose {what} fits on {spec.display_name}: {r['batch']}"
              + (" (the search's limit)" if r["limit_reached"] else ""))
        print(f"searched (doubling, then bisection): {tried}")
    return 0


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
    p.add_argument("--size", action="append", metavar="KEY=VALUE",
                   help="override an example's size (repeatable), e.g. --size batch=1")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--all", action="store_true", help="list every kernel, not the top 25")
    p.set_defaults(takes_model=True)


def _picture_args(p):
    p.add_argument("--trace", metavar="FILE", help="Chrome/Perfetto trace (.json) of the simulated call")
    p.add_argument("--plot", metavar="FILE", help="roofline (.png, .svg or .pdf; needs matplotlib)")
    p.add_argument("--dot", metavar="FILE", help="the fused graph in Graphviz DOT (and .svg when "
                   "Graphviz is installed)")
    p.set_defaults(outputs=OUTPUTS)


def _mode_arg(p, default):
    p.add_argument("--mode", default=default, type=str.lower,
                   help="eager | compiled | cudagraph")


def cmd_predict(a) -> int:
    from .predict import modes_by_speed, predict
    from .report import dumps, modes_line, prediction_text
    if a.max_batch:
        return cmd_max_batch(a)
    g = _graph(a)
    if getattr(a, "gpus", None):
        return _compare(a, g)
    p = predict(g, gpu=a.gpu, mode=a.mode, host=a.host)
    if a.json:
        print(dumps(p.to_dict()))
    else:
        print(prediction_text(p, None if a.all else 25))
        if p.fits and "train" not in g.meta:      # torch.compile training is not modelled
            print(modes_line(modes_by_speed(g, a.gpu, have=p, host=a.host)))
    _extras(a, pred=p)
    return 0


def _compare(a, g) -> int:
    """``predict MODEL --gpu a,b,c``: one table, the same host for every GPU."""
    from .compare import compare, compare_rows, compare_text
    from .report import dumps
    preds = compare(g, a.gpus, mode=a.mode, host=a.host)
    if a.json:
        print(dumps({"model": g.name, "mode": a.mode, "gpus": compare_rows(preds)}))
    else:
        print(compare_text(preds))
    return 0


def cmd_search(a) -> int:
    from .report import dumps, search_text
    from .search import search
    r = search(_graph(a), gpu=a.gpu, mode=a.mode, algo=a.algo, memory_limit=a.memory_limit,
               host=a.host)
    print(dumps(r.to_dict()) if a.json else search_text(r, None if a.all else 25))
    _extras(a, result=r)
    return 0


def cmd_whatif(a) -> int:
    from .report import dumps, search_text
    from .search import whatif
    r = whatif(_graph(a), a.fuse, gpu=a.gpu, mode=a.mode, host=a.host)
    if a.json:
        print(dumps(r.to_dict()))
    else:
        print(search_text(r, None))
        print(explain_whatif(r))
    return 0


def explain_whatif(r) -> str:
    """Where the time goes: bytes saved, kernels saved, host cost."""
    from .fmt import fmt_num
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
    from . import viz
    writers = {"trace": viz.trace_output, "plot": viz.plot_output, "dot": viz.dot_output}
    for opt in OUTPUTS:
        path = getattr(a, opt, None)
        if path:
            writers[opt](pred=pred, result=result, path=path)
            print(f"wrote {path}", file=sys.stderr)


def cmd_report(a) -> int:
    """``gpusim report``: search, then write the self-contained HTML report to ``--out``."""
    from . import viz
    from .models import model_graph, parse_sizes
    from .search import search
    sizes = parse_sizes(a.size)
    res = search(model_graph(a.model, a.dtype, sizes), gpu=a.gpu, mode=a.mode, algo=a.algo,
                 host=a.host)
    page = viz.report_html(res, {"model": a.model, "dtype": a.dtype, "sizes": sizes})
    viz.write_atomic(a.out, page)
    print(f"wrote {a.out}", file=sys.stderr)
    return 0


def cmd_specs(a) -> int:
    """Without a GPU: the table of all specs; with one: its every figure, value, source
    and ref (where each figure came from)."""
    from .hardware import figures_table, list_specs, load_spec, specs_table
    print(figures_table(load_spec(a.gpu)) if a.gpu else specs_table(list_specs()))
    return 0


def cmd_hosts(a) -> int:
    from .host import hosts_table, list_hosts
    print(hosts_table(list_hosts()))
    return 0


def cmd_examples(a) -> int:
    from .examples import EXAMPLES
    from .fmt import table
    rows = [[e.name, e.category, e.description,
             " ".join(f"{k}={v}" for k, v in e.defaults.items())] for e in EXAMPLES.values()]
    print(table(rows, ["name", "category", "description", "defaults"], "llll"))
    print()
    try:
        from . import zoo       # optional extra: torchvision, timm, transformers
    except ImportError:
        print("real-model zoo (tv:, timm:, hf:): install the zoo extra, pip install 'gpusim[zoo]'")
        return 0
    rows = [[name, fam, desc, sizes] for name, fam, _lib, desc, sizes in zoo.catalogue()]
    print(table(rows, ["zoo model", "family", "description", "defaults"], "llll"))
    return 0


def cmd_calibrate(a) -> int:
    from validation import calibrate
    argv = ["--out", a.out] + (["--base", a.base] if a.base else []) + (
        ["--host-only"] if a.host_only else []) + (["--forward-only"] if a.forward_only else [])
    return calibrate.main(argv)


def cmd_validate(a) -> int:
    from validation import measure, runner
    try:
        measure.require_cuda()          # before the results folder is made: nothing half-written
    except RuntimeError as e:
        raise UserError(str(e)) from None
    return runner.main(a)


def cmd_accuracy(a) -> int:
    """The accuracy table (:func:`validation.accuracy.main`), then the plot."""
    from validation import accuracy
    from validation.plot import accuracy_plot
    if a.results is not None and not os.path.isdir(a.results):
        raise UserError(f"results folder {a.results} does not exist")
    rc = accuracy.main(argparse.Namespace(**{**vars(a), "plot": None}))
    if a.plot:
        accuracy_plot(a.results or accuracy.RESULTS_DIR, a.gpu, a.plot)
        print(f"wrote {a.plot}", file=sys.stderr)
    return rc


class _Once(argparse._StoreAction):
    """A single-valued option given twice (``--gpu h100 --gpu v100``) is a mistake, not
    "the last one wins": which GPU did the user mean?"""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given", set())
        if self.dest in given:
            parser.error(f"{option_string} given twice; give it once")
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (raised, so ``main`` prints them as every other
    user error) and single-valued options that refuse a second value."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", None, _Once)
        self.register("action", "store", _Once)

    def error(self, message):
        raise UserError(f"{message} (see `{self.prog} --help`)")


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
                   "GPU (doubling, then bisection)")
    _mode_arg(p, "eager")
    _picture_args(p)
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
                      help="re-time only the host's in-forward speed (eager_forward_factor, about "
                           "30 s) on top of --base: run it right before the runs you compare")
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
    r.set_defaults(fn=cmd_report, outputs=("out",))
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


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    as_json = "--json" in argv
    try:
        ap = build_parser()
        cmds = next(x.choices for x in ap._actions if isinstance(x, argparse._SubParsersAction))
        if argv and argv[0].lower() in cmds:        # a command is a choice: PREDICT works
            argv[0] = argv[0].lower()
        a, extra = ap.parse_known_args(argv)
        if extra:                       # name the command whose options these are not
            prog = " ".join(["gpusim"] + ([a.cmd] if a.cmd else []))
            raise UserError(f"unrecognized arguments: {' '.join(extra)} (see `{prog} --help`)")
        if not getattr(a, "cmd", None):
            a = ap.parse_args(["predict"])
        as_json = bool(getattr(a, "json", as_json))
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
