"""Per-module roll-up: which ``nn.Module`` costs what, as fvcore's ``flop_count_table``
and ``torch.profiler``'s module grouping show it, from gpusim's predicted kernels.

Capture tags each graph node with the module that was running when the tracer created
it (:mod:`gpusim.capture.scopes`): a node's ``module`` is the qualified name of the
innermost module (``layer1.0.conv1``; ``""`` is the top-level forward itself).

A kernel belongs to the **deepest common module** of the nodes it computes: one node in
eager mode, so its own module; a fused kernel of ``torch.compile`` (a conv's BatchNorm
and ReLU, a block's residual add and the next block's norm) to the module that contains
them all. Nothing is split, so every kernel lands in exactly one row and the rows' times
sum to the kernel total exactly; fusing across a module boundary moves the kernel up to
the parent, where the fused work then shows.

:func:`rollup` groups the kernels by their module cut at ``depth`` path components (the
rows are disjoint: ``--depth 1`` gives ``layer1``, ``layer2``, ...; modules shallower
than ``depth`` keep their own row), in program order: parameters (by name, tied weights
once), FLOPs, bytes, predicted time and its share, and the activation peak while the
module's kernels run (:attr:`gpusim.sim.memory.MemoryEstimate.timeline`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


from gpusim.util.errors import UserError
from gpusim.util.fmt import fmt_num, table
from gpusim.graph.opgraph import numel

ROOT = "(top)"          # how the tables name the top-level forward's own kernels
BY_CHOICES = ("kernel", "module")
DEFAULT_DEPTH = 3       # as fvcore's flop_count_table: encoder.layer.0, layer1.0.conv1


def common_module(paths) -> str:
    """The deepest module containing every one of ``paths`` (``""``: the top level)."""
    parts = [p.split(".") if p else [] for p in paths]
    if not parts:
        return ""
    out = []
    for level in zip(*parts):
        if any(x != level[0] for x in level):
            break
        out.append(level[0])
    return ".".join(out)


def cut(path: str, depth: int) -> str:
    """``path`` cut to its first ``depth`` components."""
    return ".".join(path.split(".")[:depth]) if path else ""


def kernel_module(graph, kernel) -> str:
    """The module a kernel is attributed to: the deepest common module of its nodes."""
    return common_module([graph.g.nodes[n].get("module", "") for n in kernel.ops
                          if n in graph.g])


@dataclass(frozen=True)
class ModuleRow:
    """One module's share of a prediction (``path`` ``""``: the top-level forward)."""

    path: str
    depth: int
    kernels: int
    params: int
    flops: float
    bytes: float
    us: float
    share: float                 # of the kernel total (0..1)
    peak_bytes: int              # activation bytes allocated at the peak inside the module

    def to_dict(self) -> dict:
        return asdict(self)


def check_depth(depth) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise UserError(f"--depth {depth!r}: give a whole number of module levels, at least 1 "
                        "(1: the model's top-level children)")
    return depth


def check_by(by: str) -> str:
    if by not in BY_CHOICES:
        raise UserError(f"unknown --by {by!r}; choose kernel (the flat kernel list) or module "
                        "(a per-module roll-up)")
    return by


def rollup(pred, depth: int = DEFAULT_DEPTH) -> list[ModuleRow]:
    """Rows per module cut at ``depth``, in program order; their ``us`` sum to the sum of
    ``pred.kernels``' times (each kernel is in exactly one row)."""
    check_depth(depth)
    graph = pred.graph
    total = sum(k.us for k in pred.kernels)
    timeline = pred.memory.timeline
    acc: dict[str, dict] = {}

    def row(path):
        return acc.setdefault(path, {"kernels": 0, "params": 0, "flops": 0.0, "bytes": 0.0,
                                     "us": 0.0, "peak": 0})
    for i, k in enumerate(pred.kernels):
        r = row(cut(kernel_module(graph, k), depth))
        r["kernels"] += 1
        r["flops"] += k.flops
        r["bytes"] += k.bytes
        r["us"] += k.us
        if i < len(timeline):
            r["peak"] = max(r["peak"], int(timeline[i]))
    for p in graph.meta.get("params", []):
        a = graph.g.nodes[p]
        if a.get("tied_to"):
            continue
        row(_holder(cut(p.rsplit(".", 1)[0] if "." in p else "", depth), acc))["params"] += \
            numel(a["shape"])
    return [ModuleRow(path, len(path.split(".")) if path else 0, r["kernels"], r["params"],
                      r["flops"], r["bytes"], r["us"], r["us"] / total if total else 0.0,
                      r["peak"]) for path, r in acc.items()]


def _holder(path: str, rows: dict) -> str:
    """The row a parameter of module ``path`` counts in: its own, or where its module ran no
    kernel of its own (its work fused into a parent's kernel), the nearest ancestor row."""
    p = path
    while p and p not in rows:
        p = p.rpartition(".")[0]
    return p if p in rows else path


MODULE_HEADER = ["module", "params", "kernels", "FLOPs", "bytes", "us", "share", "act. peak"]


def module_rows(rows: list[ModuleRow]) -> list[list[str]]:
    return [[r.path or ROOT, fmt_num(r.params) if r.params else "-", str(r.kernels),
             fmt_num(r.flops), fmt_num(r.bytes, "B"), f"{r.us:.2f}", f"{r.share * 100:.1f}%",
             fmt_num(r.peak_bytes, "B") if r.kernels else "-"] for r in rows]


def rollup_dict(pred, depth: int = DEFAULT_DEPTH) -> dict:
    """The roll-up for ``--json``: ``by``, ``depth``, ``modules`` (one dict per row), and
    ``kernel_modules`` (each kernel's module, in ``kernels``' order)."""
    return {"by": "module", "depth": depth,
            "modules": [r.to_dict() for r in rollup(pred, depth)],
            "kernel_modules": [kernel_module(pred.graph, k) for k in pred.kernels]}


def rollup_text(pred, depth: int = DEFAULT_DEPTH) -> str:
    """The per-module table of a prediction and how it adds up."""
    rows = rollup(pred, depth)
    tagged = any(pred.graph.g.nodes[n].get("module") for n in pred.graph.compute_nodes)
    out = [f"{pred.graph.name} on {pred.spec.display_name} ({pred.gpu}), mode {pred.mode}, "
           f"per module to depth {depth}",
           table(module_rows(rows), MODULE_HEADER, "lrrrrrrr"),
           f"modules          {len(rows)} rows summing to the kernel total, "
           f"{sum(k.us for k in pred.kernels):.1f} us (a fused kernel: in the deepest module "
           "holding all its ops)",
           "act. peak        activations allocated at the peak while the module's kernels run"]
    if not tagged:
        out.append(f"note             no kernel ran inside an nn.Module (a function was "
                   f"captured): every kernel is in {ROOT}")
    return "\n".join(out)


def check_rollup_args(a) -> None:
    """``--by kernel|module`` and ``--depth N`` (the roll-up's module levels)."""
    from gpusim.util.errors import UserError
    by = check_by(getattr(a, "by", None) or "module")
    if a.depth is None:
        a.depth = DEFAULT_DEPTH
    else:
        if by != "module":
            raise UserError("--depth sets the module levels of --by module; add --by module "
                            "or drop --depth")
        try:
            depth = int(a.depth)
        except ValueError:
            depth = a.depth
        a.depth = check_depth(depth)
    if by == "module" and getattr(a, "gpus", None):
        raise UserError("--by module rolls up one GPU's run; name one --gpu or drop --by")
