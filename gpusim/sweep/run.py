"""Sweeps: many models, sizes, GPUs and modes in one run, on Dask, into one table.

Nobody has one question about one model on one GPU: which GPU gives the most samples per
dollar, what batch fits on a 24 GB card, whether torch.compile pays at batch 1. A sweep
answers them from one table with a row per (model, sizes, dtype, train, amp, GPU, mode,
host): every scalar figure ``gpusim predict --json`` prints for those inputs, computed by
the same :func:`gpusim.predict.pipeline.predict`.

How the work is shared. One *task* is one (model, sizes, dtype, train, amp): the model is
built and captured once (the slow part, 0.2-2 s for a zoo model), then lowered and
predicted for every GPU x mode (a few ms each: the lowering depends on the GPU spec, since
eager dispatch and Inductor's padding and split reductions do, so it is redone per GPU,
never guessed from another). The captured graph stays on the worker that made it; only
rows travel. Tasks run on ``dask.distributed`` (the ``sweep`` extra): a ``LocalCluster``
of worker processes by default, or any running cluster by its scheduler address; without
Dask, in this process.

Resuming. Each finished task's rows are appended (one write, flushed and synced) to a
sidecar ``OUT.partial.jsonl``; at the end the rows already in ``OUT``, the sidecar's and
the new ones are merged, sorted and written to ``OUT`` atomically, and the sidecar is
removed. A run killed at any point loses at most the tasks in flight; the next run with
the same arguments skips every row already in ``OUT`` or the sidecar (error rows too:
delete them to retry) and runs only the missing ones.
"""

from __future__ import annotations

import functools
import itertools
import os
import time
from dataclasses import dataclass

from gpusim.util.errors import UserError
from gpusim.sweep.results import _frame, _key, append_rows, out_format, partial_path, read_partial, read_results, write_results
from gpusim.sweep.columns import AMP_OFF, FIGURES, INSTALL, KEY, MEMORY, _one_line, _pandas


def have_dask() -> bool:
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def version() -> str:
    """The installed gpusim's version (every row carries it)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as v
    try:
        return v("gpusim")
    except PackageNotFoundError:
        return "unknown"


# ---------------------------------------------------------------- what to run
@dataclass(frozen=True)
class Task:
    """One capture: a model at one set of sizes, dtype, train and amp; predicted on every
    GPU x mode of ``runs`` (the pairs still missing from the results)."""

    model: str
    sizes: tuple            # ((key, value), ...) sorted: the overrides of this task
    dtype: str
    train: bool
    amp: str
    host: str | None
    runs: tuple             # ((gpu spec name, mode), ...)


def sizes_text(sizes) -> str:
    """``(("batch", 8), ("seq", 128))`` -> ``"batch=8 seq=128"`` (the ``sizes`` key)."""
    return " ".join(f"{k}={v}" for k, v in sizes)


def parse_size_grid(items) -> dict[str, list[int]]:
    """``["batch=1,8,64", "seq=128"]`` -> ``{"batch": [1, 8, 64], "seq": [128]}``; each
    value checked as ``--size`` checks one (:func:`gpusim.models.resolve.parse_sizes`)."""
    from gpusim.models.resolve import parse_sizes
    grid: dict[str, list[int]] = {}
    for it in items or []:
        if "=" not in it:
            raise UserError(f"--size takes KEY=V1,V2,..., got {it!r}")
        k, vals = (x.strip() for x in it.split("=", 1))
        if k in grid:
            raise UserError(f"--size {k} given twice; list its values once, e.g. {k}=1,8,64")
        parts = [v.strip() for v in vals.split(",")]
        if "" in parts:
            raise UserError(f"--size {it!r} has an empty value; separate values by single "
                            "commas, e.g. batch=1,8,64")
        values = [parse_sizes([f"{k}={v}"])[k] for v in parts]
        if len(set(values)) != len(values):
            raise UserError(f"--size {it!r} lists a value twice; list each once")
        grid[k] = values
    return grid


def model_sizes(model: str) -> dict:
    """The sizes ``model`` takes and their defaults (a built-in example's or a zoo
    entry's; a model file takes none). Raises the model's own error for unknown names."""
    from gpusim.models.examples import EXAMPLES
    from gpusim.models.resolve import ZOO_PREFIXES, load_model
    if model in EXAMPLES:
        return dict(EXAMPLES[model].defaults)
    if model.startswith(ZOO_PREFIXES):
        from gpusim.models import zoo
        return dict(zoo.get(model).defaults)
    if ":" not in model:
        load_model(model)               # raises its "unknown model" error
    path = model.rpartition(":")[0]
    if not os.path.isfile(path):
        raise UserError(f"model file {path} does not exist")
    return {}


def _list(x, what: str) -> list:
    items = [x] if isinstance(x, str) else list(x or [])
    if not items:
        raise UserError(f"a sweep needs at least one {what}")
    low = [str(i).lower() for i in items]
    twice = sorted({i for i in low if low.count(i) > 1})
    if twice:
        raise UserError(f"{what} {twice[0]} given twice; name each once")
    return items


def plan(models, gpus, sizes=None, modes=("eager", "compiled", "cudagraph"),
         dtypes=("float32",), host=None, train=False, amp=None) -> tuple[list[Task], dict]:
    """The tasks of a sweep and its shared facts (spec names, host name, size keys); every
    name is checked here, before any work. A size applies to the models that take it
    (``seq`` to the language models of a mixed sweep); one no model takes is an error."""
    from gpusim.hw.spec import load_spec
    from gpusim.hw.host import load_host
    from gpusim.models.resolve import parse_dtype
    from gpusim.lower.modes import check_mode
    models = _list(models, "model")
    grid = {k: list(v) for k, v in (sizes or {}).items()}
    for k, v in grid.items():
        if not v:
            raise UserError(f"size {k} has no values")
    specs = [load_spec(g).name for g in _list(gpus, "GPU")]
    if len(set(specs)) != len(specs):
        raise UserError(f"GPUs {', '.join(map(str, gpus))} name one spec twice; name each once")
    modes = [check_mode(str(m).lower()) for m in _list(modes, "mode")]
    dtypes = [str(parse_dtype(d)).replace("torch.", "") for d in _list(dtypes, "dtype")]
    if len(set(dtypes)) != len(dtypes):
        raise UserError(f"dtypes {', '.join(map(str, dtypes))} name one dtype twice")
    _train_amp_supported(train, amp, modes)
    host_name = load_host(host).name
    takes = {m: model_sizes(m) for m in models}
    unused = [k for k in grid if not any(k in t for t in takes.values())]
    if unused:
        raise UserError(f"no model of this sweep takes size {unused[0]!r}; sizes are "
                        + "; ".join(f"{m}: {', '.join(t) or 'none'}" for m, t in takes.items()))
    runs = tuple((g, m) for g in specs for m in modes)
    tasks = []
    for model in models:
        keys = sorted(k for k in grid if k in takes[model])
        for combo in itertools.product(*(grid[k] for k in keys)):
            for dt in dtypes:
                tasks.append(Task(model, tuple(zip(keys, combo)), dt, bool(train),
                                  amp or AMP_OFF, host, runs))
    return tasks, {"specs": specs, "host": host_name, "takes": takes, "modes": modes}


def _train_amp_supported(train, amp, modes=()) -> None:
    """``amp`` goes to the capture :func:`gpusim.predict` uses: an fp32 model under autocast
    (a training step too: the standard step's loss under autocast, fp16 with a GradScaler)."""
    amp_on = bool(amp) and amp != AMP_OFF
    if amp_on:
        from gpusim.models.resolve import check_amp
        check_amp(amp, "float32")


def task_keys(task: Task, host_name: str) -> list[tuple]:
    return [(task.model, sizes_text(task.sizes), task.dtype, task.train, task.amp, g, m,
             host_name) for g, m in task.runs]


def task_graph(task: Task):
    """The graph ``gpusim predict`` captures for the task's model, sizes, dtype, ``train``
    (``predict --train``'s step, :func:`gpusim.predict.step.step_graph`) and ``amp``: the one place
    a sweep builds its input."""
    if task.train:
        from gpusim.predict.step import step_graph
        return step_graph(task.model, task.dtype, dict(task.sizes),
                          amp=None if task.amp == AMP_OFF else task.amp)
    from gpusim.models.resolve import model_graph
    return model_graph(task.model, task.dtype, dict(task.sizes),
                       None if task.amp == AMP_OFF else task.amp)


def run_task(task: Task) -> list[dict]:
    """Capture ``task``'s model once and predict it on each (GPU, mode) of its runs: one
    row per run, or per run a row with the one-line error. Runs on a Dask worker; returns
    plain dicts, so nothing but rows leaves the worker."""
    import torch
    from gpusim.hw.spec import load_spec
    from gpusim.hw.host import load_host
    from gpusim.predict.pipeline import predict
    sizes = dict(task.sizes)
    base = {"model": task.model, "sizes": sizes_text(task.sizes), "dtype": task.dtype,
            "train": task.train, "amp": task.amp}
    host = load_host(task.host)         # checked by plan(): a mistake there is the user's
    try:
        with torch.no_grad():
            graph = task_graph(task)
        error = None
    except Exception as e:  # noqa: BLE001 - a failed capture is a row, not a crash
        graph, error = None, _one_line(e)
    takes = model_sizes(task.model)
    effective = dict(takes, **sizes)
    rows = []
    for gpu, mode in task.runs:
        row = dict(base, gpu=gpu, mode=mode, host=host.name,
                   **{k: v for k, v in effective.items()})
        row["samples_per_call"] = effective.get("batch", 1)
        if error is None:
            try:
                p = predict(graph, gpu=load_spec(gpu), mode=mode, host=host)
                row.update(prediction_row(p))
                row["samples_per_s"] = row["samples_per_call"] * 1e6 / p.end_to_end_us
            except Exception as e:  # noqa: BLE001 - one failed prediction, one error row
                row["error"] = _one_line(e)
        else:
            row["error"] = error
        row.setdefault("error", "")
        row["gpusim_version"] = version()
        rows.append(row)
    return rows


def failed_rows(task: Task, error: str) -> list[dict]:
    """The rows of a task whose worker died before it could return any."""
    from gpusim.hw.host import load_host
    host = load_host(task.host).name
    return [{"model": task.model, "sizes": sizes_text(task.sizes), "dtype": task.dtype,
             "train": task.train, "amp": task.amp, "gpu": g, "mode": m, "host": host,
             "error": error, "gpusim_version": version()} for g, m in task.runs]


def prediction_row(p) -> dict:
    """The scalar figures of ``p.to_dict()`` (what ``predict --json`` prints) as columns."""
    d = p.to_dict(kernels=False)
    row = {k: d[k] for k in FIGURES}
    row["gpu_name"] = p.spec.display_name
    row["spec_source"] = p.spec.source
    row["graph"] = d["graph"]
    row["unmodelled_ops"] = "; ".join(d["unmodelled_ops"])
    for k in MEMORY:
        v = d["memory"][k]
        row["memory_" + k] = "; ".join(v) if isinstance(v, list) else v
    return row


# ---------------------------------------------------------------- the engine
def _client(dask):
    """``(client, owned cluster or None)`` for ``dask``: None/"local" -> a LocalCluster of
    as many worker processes as CPUs, ``"local:N"`` -> N workers, ``"tcp://HOST:PORT"`` ->
    that scheduler, a ``distributed.Client`` -> itself; ``"off"`` -> ``(None, None)``."""
    if dask is None:
        dask = "local" if have_dask() else "off"
    if not isinstance(dask, str):
        return dask, None
    text = dask.strip()
    if text.lower() in ("off", "none", "0"):
        return None, None
    if not have_dask():
        raise UserError(f"--dask {text}: dask.distributed is not installed ({INSTALL}); "
                        "give --dask off to sweep in this process")
    import logging
    from dask.distributed import Client, LocalCluster
    if text.lower() == "local" or text.lower().startswith("local:"):
        n = text.split(":", 1)[1] if ":" in text else str(os.cpu_count() or 1)
        if not n.isdigit() or int(n) < 1:
            raise UserError(f"--dask {text}: give local:N with N worker processes, e.g. local:4")
        cluster = LocalCluster(n_workers=int(n), threads_per_worker=1, processes=True,
                               dashboard_address=":0", silence_logs=logging.CRITICAL)
        return Client(cluster), cluster
    if "://" not in text:
        raise UserError(f"--dask {text!r}: give local:N, a scheduler address such as "
                        "tcp://host:8786, or off")
    try:
        return Client(text, timeout="10s"), None
    except (OSError, TimeoutError) as e:
        raise UserError(f"--dask {text}: cannot reach the scheduler ({_one_line(e)})") from None


def _run(tasks: list[Task], client, sink) -> None:
    """Run ``tasks`` (in this process, or on ``client``'s cluster), handing each task's
    rows to ``sink`` as it finishes."""
    if client is None:
        for t in tasks:
            sink(run_task(t))
        return
    from dask.distributed import as_completed
    futures = client.map(run_task, tasks, pure=False)
    task_of = {f.key: t for f, t in zip(futures, tasks)}
    for fut in as_completed(futures):
        try:
            rows = fut.result()
        except Exception as e:  # noqa: BLE001 - a worker died on it (memory): error rows
            rows = failed_rows(task_of[fut.key], _one_line(e))
        sink(rows)


def sweep(models, gpus, sizes=None, modes=("eager", "compiled", "cudagraph"),
          dtypes=("float32",), host=None, train=False, amp=None, out=None, dask=None,
          stream=None):
    """Predict every model x sizes x dtype on every GPU x mode; a pandas DataFrame with one
    row per prediction (:data:`KEY` columns, the sizes, every scalar ``predict --json``
    figure, ``samples_per_s``, ``error``, ``gpusim_version``).

    Parameters
    ----------
    models : model names as ``gpusim predict`` takes them (examples, zoo, file:NAME)
    gpus : spec names, aliases or .toml paths
    sizes : ``{"batch": [1, 8, 64], "seq": [128, 512]}``: every combination of the sizes
        a model takes
    modes, dtypes : lists of them
    host : host profile (default the reference host, the same for every GPU)
    train, amp : the capture's switches: ``predict --train``'s standard step instead of the
        forward, and the forward (or the step's loss) under autocast
    out : .parquet or .csv: rows already there are skipped, new ones written there
    dask : None (a LocalCluster when dask.distributed is installed, else this process),
        ``"local:N"``, ``"tcp://HOST:PORT"``, a ``distributed.Client``, or ``"off"``
    stream : where the progress line goes (default stderr; drawn only on a terminal)

    >>> df = sweep(["add_relu_mul"], ["h100", "a100"], {"n": [4096]}, modes=["eager"], dask="off")
    >>> list(df["gpu"]), bool(df["error"].eq("").all())
    (['h100-sxm', 'a100-sxm4-80gb'], True)
    """
    from gpusim.util.progress import Progress
    _pandas()
    if out is not None:
        from gpusim.report.viz.common import check_target
        out_format(out)
        check_target(out)
    tasks, facts = plan(models, gpus, sizes, modes, dtypes, host, train, amp)
    order = {k: i for i, k in enumerate(k for t in tasks for k in task_keys(t, facts["host"]))}
    have: list[dict] = []
    if out is not None:
        if os.path.exists(out):
            have = read_results(out).to_dict("records")
        have += read_partial(partial_path(out))
    done = {_key(r) for r in have}
    todo = []
    for t in tasks:
        runs = tuple(r for r, k in zip(t.runs, task_keys(t, facts["host"])) if k not in done)
        if runs:
            todo.append(Task(t.model, t.sizes, t.dtype, t.train, t.amp, t.host, runs))
    new: list[dict] = []
    bar = Progress(total=sum(len(t.runs) for t in todo), label="sweep", stream=stream)

    def sink(rows):
        if out is not None:
            append_rows(partial_path(out), rows)
        new.extend(rows)
        rate = (bar.n + len(rows)) / max(1e-9, time.monotonic() - bar.t0)
        bar.update(len(rows), note=f"{rate:.1f} rows/s  {rows[0]['model']} {rows[0]['sizes']}")

    if todo:
        client, cluster = _client(dask)
        try:
            with bar:
                _run(todo, client, sink)
        finally:
            if client is not None and client is not dask:       # ours: close it
                client.close()
            if cluster is not None:
                cluster.close()
    everything = _frame(have + new, order)
    if out is not None and (new or os.path.exists(partial_path(out)) or not os.path.exists(out)):
        write_results(out, everything)
        if os.path.exists(partial_path(out)):
            os.unlink(partial_path(out))
    if not len(everything):
        everything.attrs["new_rows"] = 0
        return everything
    mine = everything[[_key(r) in order for r in everything[list(KEY)].to_dict("records")]]
    mine = mine.reset_index(drop=True)
    mine.attrs["new_rows"] = len(new)
    return mine
