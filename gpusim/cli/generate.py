"""``gpusim generate MODEL --batch B --prompt P --new N [--cache static] [--mode compiled]``:
a whole Hugging Face ``generate()`` call (:func:`gpusim.predict.generate.generate`). Without
``--cache``/``--mode`` it prints the dynamic cache (eager) and the static cache compiled
(what ``cache_implementation="static"`` runs on CUDA) side by side."""

from __future__ import annotations

from gpusim.util.errors import UserError


def _count(text: str, name: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise UserError(f"--{name} {text!r} is not a whole number; give e.g. --{name} 128") from None
    if v < 1:
        raise UserError(f"--{name} must be at least 1, got {v}")
    return v


def add_parser(sub) -> None:
    g = sub.add_parser("generate", help="a whole Hugging Face generate(): time to first token, "
                       "time per output token, tokens/s, KV cache, peak memory")
    g.add_argument("model", help="hf:NAME (a zoo decoder, `gpusim examples`) or path/to/file.py:NAME "
                   "whose NAME() returns a Hugging Face causal LM")
    g.add_argument("--batch", default="1", help="sequences (default 1)")
    g.add_argument("--prompt", default="512", help="prompt tokens (default 512)")
    g.add_argument("--new", default="128", help="new tokens generated (default 128)")
    g.add_argument("--cache", default=None, type=str.lower, help="dynamic | static (default: both, "
                   "side by side)")
    g.add_argument("--mode", default=None, type=str.lower, help="eager | compiled (static cache: "
                   "generate's torch.compile, CUDA graphs)")
    g.add_argument("--gpu", default="h100", help="GPU spec name, alias or .toml path")
    g.add_argument("--host", default=None, metavar="NAME|PATH", help="host profile (default the "
                   "reference host)")
    g.add_argument("--dtype", default="bfloat16", type=str.lower, help="bfloat16 | float16 | float32")
    g.add_argument("--samples", default="2", help="contexts at which the decode step is predicted "
                   "(default 2: the first and last step; linear between)")
    g.add_argument("--cold", action="store_true", help="the first call at these lengths in the "
                   "process: every eager step builds cuDNN attention plans (default: the steady "
                   "state, lengths seen before)")
    g.add_argument("--jobs", default="2", help="processes: 2 (default) predicts the two paths on two "
                   "cores where the machine has them (a forked copy; the same figures); 1: one after "
                   "the other")
    g.add_argument("--json", action="store_true", help="print one JSON document")
    g.set_defaults(fn=cmd_generate)


def runs(cache, mode) -> list[tuple[str, str]]:
    """The (cache, mode) pairs asked: both by default; one flag implies the other."""
    if cache is None and mode is None:
        return [("dynamic", "eager"), ("static", "compiled")]
    if cache is None:
        cache = "static" if mode == "compiled" else "dynamic"
    if mode is None:
        mode = "compiled" if cache == "static" else "eager"
    return [(cache, mode)]


def cmd_generate(a) -> int:
    from gpusim.hw.host import load_host
    from gpusim.hw.spec import load_spec
    from gpusim.models.resolve import parse_dtype
    from gpusim.predict import decode
    batch, prompt, new = (_count(getattr(a, k), k) for k in ("batch", "prompt", "new"))
    samples = _count(a.samples, "samples")
    jobs = _count(a.jobs, "jobs")
    pairs = runs(a.cache, a.mode)
    for c, m in pairs:
        decode.check_request(batch, prompt, new, c, m)
    parse_dtype(a.dtype)
    load_spec(a.gpu)
    load_host(a.host)
    from gpusim.predict.generate import generate_runs
    from gpusim.report.llm import generate_text
    from gpusim.report.text import dumps
    res = generate_runs(a.model, pairs, batch, prompt, new, gpu=a.gpu, host=a.host,
                        dtype=a.dtype, samples=samples, warm=not a.cold, jobs=jobs)
    print(dumps({"runs": [r.to_dict() for r in res]}) if a.json else generate_text(res))
    return 0
