"""The ``gpusim`` command: a thin layer over the Python API.

User mistakes (unknown GPU, bad spec file, bad model file, untraceable model, illegal
fusion) print one line ``gpusim: error: ...`` and exit 2; nothing is half-written.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

DEFAULT_MODEL = "transformer_block"


class UserError(Exception):
    pass


def _user_errors():
    from .capture import CaptureError
    from .examples import ModelError
    from .hardware import SpecError
    from .legality import FusionError
    from .search import SearchError
    from .simulate import ModeError
    return (CaptureError, ModelError, SpecError, FusionError, SearchError, ModeError,
            UserError)


def _parse_sizes(items: list[str]) -> dict:
    out = {}
    for it in items or []:
        if "=" not in it:
            raise UserError(f"--size takes KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                raise UserError(f"--size {k}: {v!r} is not a number") from None
    return out


def _dtype(name: str):
    import torch
    d = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
         "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if name not in d:
        raise UserError(f"unknown --dtype {name!r}; choose float32, float16 or bfloat16")
    return d[name]


def _graph(args):
    from .capture import capture
    from .examples import load_model
    fn, fargs, label = load_model(args.model, device="meta", dtype=_dtype(args.dtype),
                                  **_parse_sizes(args.size))
    return capture(fn, fargs, name=label)


def _add_model_args(p, gpu_default="h100"):
    p.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                   help=f"built-in example name or path/to/file.py:NAME (default {DEFAULT_MODEL}; "
                        "`gpusim examples` lists them)")
    p.add_argument("--gpu", default=gpu_default, help="GPU spec name, alias or .toml path "
                   "(`gpusim specs` lists them)")
    p.add_argument("--dtype", default="float32", help="float32 | float16 | bfloat16")
    p.add_argument("--size", action="append", metavar="KEY=VALUE",
                   help="override an example's size (repeatable), e.g. --size batch=1")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--all", action="store_true", help="list every kernel, not the top 25")


def _mode_arg(p, default):
    p.add_argument("--mode", default=default, choices=None,
                   help="eager | compiled | cudagraph")


def cmd_predict(a) -> int:
    from .predict import predict
    from .report import dumps, prediction_text
    g = _graph(a)
    p = predict(g, gpu=a.gpu, mode=a.mode)
    if a.json:
        print(dumps(p.to_dict()))
    else:
        print(prediction_text(p, None if a.all else 25))
    _extras(a, pred=p)
    return 0


def cmd_search(a) -> int:
    from .report import dumps, search_text
    from .search import search
    g = _graph(a)
    r = search(g, gpu=a.gpu, mode=a.mode, algo=a.algo)
    print(dumps(r.to_dict()) if a.json else search_text(r, None if a.all else 25))
    _extras(a, result=r)
    return 0


def cmd_whatif(a) -> int:
    from .report import dumps, search_text
    from .search import whatif
    if not a.fuse:
        raise UserError("whatif needs at least one --fuse a,b,c (node names as `gpusim predict` prints them)")
    g = _graph(a)
    groups = [[x.strip() for x in f.split(",") if x.strip()] for f in a.fuse]
    r = whatif(g, groups, gpu=a.gpu, mode=a.mode)
    if a.json:
        print(dumps(r.to_dict()))
    else:
        print(search_text(r, None))
        print(explain_whatif(r))
    return 0


def explain_whatif(r) -> str:
    """Where the time goes: bytes saved, kernels saved, host cost."""
    u, f = r.unfused, r.fused
    fused_groups = [k for k in f.kernels if len(k.ops) > 1]
    lines = []
    for k in fused_groups:
        parts = [uk for uk in u.kernels if uk.ops[0] in k.ops]
        b0 = sum(p.bytes for p in parts)
        t0 = sum(p.us for p in parts)
        lines.append(f"group {'+'.join(k.ops)}: {len(parts)} kernels -> 1; bytes {b0:.3g} -> "
                     f"{k.bytes:.3g} ({b0 / k.bytes if k.bytes else float('inf'):.2f}x less); device "
                     f"{t0:.2f} us -> {k.us:.2f} us ({k.bound}-bound)")
    lines.append(f"host: {u.timeline.host_us:.1f} us per call eager -> {f.timeline.host_us:.1f} us "
                 f"in {f.mode} mode; GPU idle {u.idle_us:.1f} -> {f.idle_us:.1f} us")
    return "\n".join(lines)


def _extras(a, pred=None, result=None):
    """--trace/--plot/--dot outputs (the viz module), when asked for."""
    wants = [x for x in ("trace", "plot", "dot") if getattr(a, x, None)]
    if not wants:
        return
    from . import viz
    for w in wants:
        path = getattr(a, w)
        text_or_bytes = getattr(viz, f"{w}_output")(pred=pred, result=result, path=path)
        if text_or_bytes is not None:
            print(f"wrote {path}", file=sys.stderr)


def cmd_specs(a) -> int:
    from .hardware import list_specs, specs_table
    print(specs_table(list_specs()))
    return 0


def cmd_examples(a) -> int:
    from .examples import EXAMPLES
    from .report import table
    rows = [[e.name, e.category, e.description,
             " ".join(f"{k}={v}" for k, v in e.defaults.items())] for e in EXAMPLES.values()]
    print(table(rows, ["name", "category", "description", "defaults"], "llll"))
    return 0


def cmd_calibrate(a) -> int:
    from . import calibrate
    argv = ["--out", a.out] + (["--base", a.base] if a.base else [])
    return calibrate.main(argv)


def cmd_validate(a) -> int:
    from .validation import runner
    return runner.main(a)


def cmd_accuracy(a) -> int:
    from .validation import accuracy
    return accuracy.main(a)


def cmd_report(a) -> int:
    from . import viz
    return viz.report_main(a)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gpusim", description=(
        "Predict how fast PyTorch computations run on NVIDIA GPUs and what operator "
        "fusion buys, before writing a kernel."))
    sub = ap.add_subparsers(dest="cmd")
    p = sub.add_parser("predict", help="per-kernel time of a model on a GPU")
    _add_model_args(p)
    _mode_arg(p, "eager")
    for x in ("trace", "plot", "dot"):
        p.add_argument(f"--{x}", metavar="FILE")
    p.set_defaults(fn=cmd_predict)
    s = sub.add_parser("search", help="find the best fusion partition")
    _add_model_args(s)
    _mode_arg(s, "compiled")
    s.add_argument("--algo", default="auto", help="auto | greedy | bytes | exact")
    for x in ("trace", "plot", "dot"):
        s.add_argument(f"--{x}", metavar="FILE")
    s.set_defaults(fn=cmd_search)
    w = sub.add_parser("whatif", help="predict the speed-up of fusing named nodes")
    _add_model_args(w)
    _mode_arg(w, "compiled")
    w.add_argument("--fuse", action="append", metavar="A,B,C", help="a group (repeatable)")
    w.set_defaults(fn=cmd_whatif)
    sp = sub.add_parser("specs", help="list the GPU spec files")
    sp.set_defaults(fn=cmd_specs)
    ex = sub.add_parser("examples", help="list the built-in examples")
    ex.set_defaults(fn=cmd_examples)
    c = sub.add_parser("calibrate", help="measure the GPU at hand and write a spec file")
    c.add_argument("--out", required=True)
    c.add_argument("--base", default=None, help="datasheet spec to start from")
    c.set_defaults(fn=cmd_calibrate)
    v = sub.add_parser("validate", help="measure the built-in cases on this machine's GPU")
    v.add_argument("--out", required=True, help="results folder")
    v.add_argument("--cases", default=None, help="comma-separated example names")
    v.add_argument("--quick", action="store_true", help="fewer sizes and dtypes")
    v.set_defaults(fn=cmd_validate)
    acc = sub.add_parser("accuracy", help="compare predictions with recorded measurements")
    acc.add_argument("--gpu", action="append", help="results folder name (h100, h200)")
    acc.add_argument("--results", default=None, help="validation/results folder")
    acc.add_argument("--json", action="store_true")
    acc.add_argument("--markdown", action="store_true", help="print the README table")
    acc.add_argument("--plot", metavar="FILE", default=None)
    acc.add_argument("--update-readme", metavar="README", default=None,
                     help="rewrite the table between the accuracy markers of this file")
    acc.set_defaults(fn=cmd_accuracy)
    r = sub.add_parser("report", help="one self-contained HTML report")
    _add_model_args(r)
    _mode_arg(r, "compiled")
    r.add_argument("--out", required=True)
    r.add_argument("--algo", default="auto")
    r.set_defaults(fn=cmd_report)
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    if not getattr(a, "cmd", None):
        a = ap.parse_args(["predict"])
    try:
        errors = _user_errors()
    except ImportError as e:  # pragma: no cover - broken install
        print(f"gpusim: error: {e}", file=sys.stderr)
        return 2
    try:
        if getattr(a, "mode", None) is not None:
            from .simulate import check_mode
            check_mode(a.mode)
        return int(a.fn(a) or 0)
    except errors as e:
        print(f"gpusim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpusim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
