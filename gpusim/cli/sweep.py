"""``gpusim sweep``, ``gpusim sweep report`` and ``gpusim sweep serve``: many models, sizes, GPUs and modes into one table (:mod:`gpusim.sweep`), the page of its answers, and serving a decoder (:mod:`gpusim.sweep.serving`)."""

from __future__ import annotations
import argparse
import json
import sys
from gpusim.util.errors import UserError
from gpusim.cli.parser import _Parser


def cmd_sweep(a) -> int:
    """``gpusim sweep MODEL... --gpu a,b --size batch=1,8 --out F``: every combination,
    on Dask (:func:`gpusim.sweep.run.sweep`), one row per prediction in ``--out``."""
    from gpusim.cli.sweep_dist import cmd_sweep_dist, is_sweep_dist
    if is_sweep_dist(a):
        return cmd_sweep_dist(a)
    from gpusim.predict.compare import parse_gpus
    from gpusim.sweep.run import parse_size_grid, sweep
    df = sweep(a.models, parse_gpus(a.gpu), parse_size_grid(a.size), _words(a.mode, "--mode"),
               _words(a.dtype, "--dtype"), host=a.host, train=a.train, amp=a.amp, out=a.out,
               dask=a.dask)
    errors = int((df["error"] != "").sum()) if len(df) else 0
    done = {"out": a.out, "rows": len(df), "new_rows": df.attrs.get("new_rows", 0),
            "errors": errors}
    print(json.dumps(done) if a.json else f"{a.out}: {len(df)} rows ({done['new_rows']} new, "
          f"{len(df) - done['new_rows']} already there), {errors} with an error")
    return 0


def _words(text: str, opt: str) -> list[str]:
    """``"eager,compiled"`` -> ``["eager", "compiled"]``; an empty word is a mistake."""
    words = [w.strip().lower() for w in str(text).split(",")]
    if "" in words:
        raise UserError(f"{opt} {text!r} has an empty value; separate values by single commas")
    return words


def cmd_sweep_report(a) -> int:
    """``gpusim sweep report RESULTS --out F.html``: the answers of a sweep, one page."""
    from gpusim.report import viz
    from gpusim.sweep.results import read_results
    from gpusim.sweep.answers import answers, parse_prices
    from gpusim.sweep.page import sweep_html
    prices = parse_prices(a.price)
    res = answers(read_results(a.results), prices, a.target_latency_ms, a.target_throughput)
    viz.write_atomic(a.out, sweep_html(res, a.results))
    if a.json:          # the page's answers as data
        print(json.dumps({"out": a.out, **{k: json.loads(res[k].to_json(orient="records"))
                                           for k in ("cheapest", "frontier", "fastest_mode", "cost")
                                           if res[k] is not None}}))
    print(f"wrote {a.out}", file=sys.stderr)
    return 0


def sweep_report_parser() -> argparse.ArgumentParser:
    """``gpusim sweep report``: ``report`` is never a model name (built-in names, zoo
    names with their prefix and file:NAME all differ), so it selects this parser."""
    r = _Parser(prog="gpusim sweep report", description="Answers from sweep results: "
                "throughput against batch, memory frontier, fastest mode, cost, cheapest GPU.")
    r.add_argument("results", help="a sweep's .parquet or .csv")
    r.add_argument("--out", required=True, help="the page (.html)")
    r.add_argument("--price", action="append", metavar="GPU=USD_PER_HOUR",
                   help="what a GPU costs per hour (repeatable, or comma-separated): h100=2.49")
    r.add_argument("--target-latency-ms", type=float, default=None,
                   help="the cheapest GPU whose time per call is at most this")
    r.add_argument("--target-throughput", type=float, default=None,
                   help="the cheapest GPU that runs at least this many samples per second")
    r.add_argument("--json", action="store_true", help="also print the answers as one JSON document")
    r.set_defaults(fn=cmd_sweep_report, outputs=("out",), takes_model=False, cmd="sweep report")
    return r


def _ints(text: str, opt: str) -> list[int]:
    out = []
    for w in _words(text, opt):
        try:
            v = int(w)
        except ValueError:
            raise UserError(f"{opt} {w!r} is not a whole number; e.g. {opt} 1,8,32") from None
        if v < 1:
            raise UserError(f"{opt} values must be at least 1, got {v}")
        out.append(v)
    return out


def cmd_sweep_serve(a) -> int:
    """``gpusim sweep serve MODEL --gpu a,b --batch 1,8 --prompt 512``: generate() over the
    grid, and the cheapest GPU for ``--target-tps`` at ``--max-tpot-ms``."""
    from gpusim.cli.generate import runs
    from gpusim.hw.host import load_host
    from gpusim.predict import decode
    from gpusim.predict.compare import parse_gpus
    from gpusim.sweep.answers import parse_prices
    from gpusim.sweep.serving import cheapest, serving_rows, serving_text
    batches, prompts = _ints(a.batch, "--batch"), _ints(a.prompt, "--prompt")
    (new,) = _ints(a.new, "--new")
    ((cache, mode),) = runs(a.cache or "dynamic", a.mode)
    for b in batches:
        decode.check_request(b, prompts[0], new, cache, mode)
    for v, opt in ((a.target_tps, "--target-tps"), (a.max_tpot_ms, "--max-tpot-ms")):
        if v is not None and not v > 0:
            raise UserError(f"{opt} must be a positive number, got {v:g}")
    gpus, prices = parse_gpus(a.gpu), parse_prices(a.price)
    load_host(a.host)
    (jobs,) = _ints(a.jobs, "--jobs")
    rows = serving_rows(a.model, gpus, batches, prompts, new, cache, mode, a.host, a.dtype, jobs)
    ranked = cheapest(rows, prices, a.target_tps, a.max_tpot_ms)
    print(json.dumps({"rows": rows, "ranked": ranked}) if a.json
          else serving_text(rows, ranked, a.target_tps, a.max_tpot_ms))
    return 0


def sweep_serve_parser() -> argparse.ArgumentParser:
    """``gpusim sweep serve``: ``serve`` is never a model name, so it selects this parser."""
    r = _Parser(prog="gpusim sweep serve", description="Serving a Hugging Face decoder: "
                "generate() over batch x prompt x GPU (time to first token, time per output token, "
                "tokens/s, memory) and the cheapest GPU for a target tokens/s at a latency bound.")
    r.add_argument("model", help="hf:NAME or path/to/file.py:NAME (a Hugging Face causal LM)")
    r.add_argument("--gpu", required=True, help="GPU specs, comma-separated: h100,a100,l4")
    r.add_argument("--batch", default="1,8,32", help="batch sizes, comma-separated")
    r.add_argument("--prompt", default="512", help="prompt lengths, comma-separated")
    r.add_argument("--new", default="128", help="new tokens per request")
    r.add_argument("--cache", default=None, type=str.lower, help="dynamic (default) | static")
    r.add_argument("--mode", default=None, type=str.lower, help="eager | compiled")
    r.add_argument("--dtype", default="bfloat16", type=str.lower)
    r.add_argument("--host", default=None, metavar="NAME|PATH")
    r.add_argument("--target-tps", type=float, default=None, help="decode tokens/s to serve")
    r.add_argument("--max-tpot-ms", type=float, default=None, help="bound on the time per output token")
    r.add_argument("--price", action="append", metavar="GPU=USD_PER_HOUR",
                   help="what a GPU costs per hour (repeatable, or comma-separated): h100=2.49")
    r.add_argument("--jobs", default="2", help="processes: 2 (default) splits the batches and prompts over "
                   "two cores where the machine has them (the same figures); 1: one after the other")
    r.add_argument("--json", action="store_true", help="print one JSON document")
    r.set_defaults(fn=cmd_sweep_serve, outputs=(), takes_model=False, cmd="sweep serve")
    return r
