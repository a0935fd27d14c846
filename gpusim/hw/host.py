"""Host profiles: the CPU, driver and Python that issue a GPU's work, apart from the GPU.

Host costs belong to the machine that runs the program, not to the GPU: an A100 spec that
assumed a faster CPU than the H100's made the A100 look faster on host-bound models. So
they live in their own files (``hosts/*.toml``), one reference host is the default for
every GPU (a GPU comparison compares GPUs), and ``--host`` / ``host=`` picks another.

Every figure is an inline table with its provenance::

    eager_op_us = { value = 18.55, source = "measured", ref = "<machine>, <date>, <command>" }

``source`` is ``measured`` (ref: machine, date, command), ``derived`` (ref: the rule and
its inputs) or ``assumed`` (ref: the assumption and its uncertainty).

The model's own Python (``nn.Module.__call__``, attribute look-ups, library checks between
torch calls) is priced from what capture counts, never clocked on the machine running
gpusim, so a prediction is the same on every run: ``python_module_call_us`` per
``nn.Module`` call plus ``python_torch_call_us`` per top-level torch call (the law
:func:`python_us`; its coefficients are fitted in the lab, ``validation/score/host_accuracy.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from gpusim.util.errors import GpusimError
from gpusim.hw.spec import split_figure
from gpusim.hw.spec_io import figure_line, toml_value
from gpusim.hw.schema import read_toml
from gpusim.util.fmt import table

REFERENCE = "reference"
SOURCES = ("measured", "derived", "assumed")

#: Figures every host has (µs): eager dispatch per op and per view, torch.compile's call
#: and per-kernel launch, a CUDA graph replay's call and the GPU's gap between its
#: kernels, the launch's latency to the GPU.
REQUIRED = ("eager_op_us", "eager_view_us", "compiled_call_us", "compiled_kernel_us",
            "cudagraph_call_us", "cudagraph_kernel_us", "launch_latency_us")
#: Figures a host may lack (the simulation falls back as each field's comment says).
OPTIONAL = ("compiled_region_us", "eager_library_op_us", "eager_module_us",
            "compiled_input_us", "sync_us", "cudagraph_tree_call_us",
            "cudagraph_tree_input_us", "kernel_launch_us", "eager_forward_factor",
            "python_module_call_us", "python_torch_call_us", "cudnn_attention_plan_us",
            "fsdp_hook_call_us", "fsdp_unit_us", "fsdp_unit_sync_us", "fsdp_unit_sync_doubling_us",
            "compiled_triton_us", "compiled_extern_us", "compiled_param_us",
            "cudagraph_launch_node_us", "compiled_matmul_us", "compiled_attention_us",
            "compiled_conv_us", "compiled_forward_factor", "eager_backward_factor", "ranks_host_factor",
            "ranks_python_factor", "compiled_model_call_us", "eager_library_forward_factor")
FIELDS = REQUIRED + OPTIONAL
#: per-item increments a calibration may measure as zero (the extra inputs cost nothing
#: the timer can see), so a file may hold 0 for them
MAY_BE_ZERO = ("compiled_input_us", "cudagraph_tree_input_us", "fsdp_unit_sync_doubling_us",
               "compiled_param_us", "cudagraph_launch_node_us", "compiled_model_call_us")


class HostError(GpusimError):
    """A host profile that cannot be found or is malformed; one line naming file and field."""


@dataclass(frozen=True)
class HostProfile:
    name: str
    description: str
    path: str
    eager_op_us: float
    eager_view_us: float
    compiled_call_us: float
    compiled_kernel_us: float
    cudagraph_call_us: float
    cudagraph_kernel_us: float      # a replayed graph's gap between kernels where the spec has no graph_kernel_gap_us
    launch_latency_us: float
    compiled_region_us: float | None = None    # entering one separately compiled region; None: compiled_call_us
    eager_library_op_us: float | None = None   # eager dispatch of a GEMM/conv/norm/attention op; None: eager_op_us
    eager_module_us: float | None = None       # one bare nn.Module call (calibrate's probe)
    compiled_input_us: float | None = None     # compiled call's cost per tensor input (guards)
    sync_us: float | None = None               # host wait + copy of one host<->device sync
    cudagraph_tree_call_us: float | None = None   # reduce-overhead replay: host cost per call
    cudagraph_tree_input_us: float | None = None  # reduce-overhead: per tensor input (copy in)
    kernel_launch_us: float | None = None      # one launch call: a library op's helper kernel
    # eager host time inside a real forward over what the tight-loop figures price
    # (gpusim's reference forwards; validation.fit.calibrate.forward_factor); None: 1
    eager_forward_factor: float | None = None
    python_module_call_us: float | None = None  # the model's Python per nn.Module call
    python_torch_call_us: float | None = None   # the model's Python per top-level torch call
    # an eager cuDNN attention call at a shape its plan cache has not seen builds an execution
    # plan on the host (a decode step at a new context, :func:`gpusim.predict.generate.plan_build_us`)
    cudnn_attention_plan_us: float | None = None
    # FSDP2's per-unit law (validation/fit/fsdp_law.py; gpusim.sim.ranks.fsdp_host_law): host time per torch call
    # its hooks make (None: the floor python_torch_call_us + eager_view_us), per unit per step (None: 0), and per
    # unit per step across >= 2 ranks (at 4 ranks, and added per doubling of the ranks; None: 0)
    fsdp_hook_call_us: float | None = None
    fsdp_unit_us: float | None = None
    fsdp_unit_sync_us: float | None = None
    fsdp_unit_sync_doubling_us: float | None = None
    # Inductor's wrapper, per kernel by how it is launched (:func:`gpusim.sim.timeline.compiled_launch_us`):
    # one generated Triton kernel; one extern library call (cuBLAS, cuDNN, attention). None:
    # compiled_kernel_us, the mixed chain's mean
    compiled_triton_us: float | None = None
    compiled_extern_us: float | None = None
    compiled_param_us: float | None = None     # compiled call's cost per nn.Parameter input; None: compiled_input_us
    cudagraph_launch_node_us: float | None = None   # a CUDA graph launch's host time per node; None: 0
    # Inductor's wrapper, per extern library call by its class, in a model's own dtype and shapes
    # (bf16 cuBLASLt GEMMs with a bias, cuDNN attention, cuDNN convolutions; calibrate's
    # compiled_library_split), where compiled_extern_us is a tiny fp32 mm. None: compiled_extern_us
    compiled_matmul_us: float | None = None
    compiled_attention_us: float | None = None
    compiled_conv_us: float | None = None
    # the compiled wrapper's host time inside a real forward over what the chains' figures price
    # (gpusim's reference forwards under torch.compile; validation.measure.reference_forwards);
    # None: 1
    compiled_forward_factor: float | None = None
    # a training step's backward as autograd's engine issues it (from C++, no Python between its nodes), over
    # what the tight-loop figures price its kernels at (:func:`gpusim.sim.timeline.simulate`'s ``phases``;
    # validation/fit/train_host.py). None: the backward is priced like the forward (eager_forward_factor, and
    # the model's Python spread over every kernel)
    eager_backward_factor: float | None = None
    # the host's time for the same work with 2 or more ranks (one process a GPU, NCCL live) on it, over one process
    # alone (validation/measure/host_ranks.py: every rank's eager-op loop at once); None: 1 (:func:`at_ranks`)
    ranks_host_factor: float | None = None
    # the same for Python bytecode alone (a pure-Python probe's time with 2+ ranks on the host over one process),
    # applied to the model's Python (python_module_call_us, python_torch_call_us, eager_module_us); None: as
    # ranks_host_factor
    ranks_python_factor: float | None = None
    # a whole decoder's reduce-overhead compiled call beyond what cudagraph_tree_call_us and
    # cudagraph_tree_input_us price (Dynamo's guards over a module tree, its keyword arguments and output
    # object, the tree's bookkeeping, the copy-in): measured from stamped generate calls (fit_model_call) or
    # derived from cudagraph_tree_call_us (model_call_law); None: 0
    compiled_model_call_us: float | None = None
    # the in-forward slowdown of the library calls alone (GEMMs, convolutions, norms, attention: each op's own
    # dispatch), over their tight-loop figure, every other op, view and the model's Python at theirs: the
    # reference forwards' wall less what those are priced at, over the library calls' price
    # (validation.measure.reference_forwards.library_forward_factor). Given, it replaces eager_forward_factor
    # (:func:`gpusim.sim.timeline.eager_factors`); None: eager_forward_factor on every eager cost
    eager_library_forward_factor: float | None = None
    #: field -> (source, ref) for every figure the file gives
    provenance: Mapping[str, tuple[str, str]] = dataclasses.field(
        default_factory=lambda: MappingProxyType({}))

    def replace(self, **changes) -> "HostProfile":
        return dataclasses.replace(self, **changes)

    def __hash__(self):
        return hash((self.name, self.path, self.eager_op_us, self.eager_forward_factor,
                     self.compiled_forward_factor))


def python_us(graph_meta: Mapping, host: HostProfile) -> float:
    """The model's own Python per eager forward on ``host``: capture's counts
    (``module_calls``, ``torch_calls``) times the host's per-call figures. A host without
    the fitted law, or a graph whose torch calls were not counted (recorded before capture
    counted them: the law's two terms were fitted together and mean nothing apart), is
    priced ``eager_module_us`` per module call (the bare call's cost, an under-estimate:
    a real module's forward runs more Python than ``nn.Identity``); without that, the
    model's Python is free."""
    modules = graph_meta.get("module_calls", 0)
    if "torch_calls" not in graph_meta or (host.python_module_call_us is None
                                           and host.python_torch_call_us is None):
        return modules * (host.eager_module_us or 0.0)
    return (modules * (host.python_module_call_us or 0.0)
            + graph_meta.get("torch_calls", 0) * (host.python_torch_call_us or 0.0))


#: figures that are not the host's own time (the GPU's latency after an issue, its gap between graph nodes), or
#: that were fitted on multi-rank runs already (FSDP2's law): left as they are by :func:`at_ranks`
NOT_RANK_SCALED = ("launch_latency_us", "cudagraph_kernel_us", "fsdp_hook_call_us", "fsdp_unit_us",
                   "fsdp_unit_sync_us", "fsdp_unit_sync_doubling_us")


#: the figures that price the model's own Python (bytecode, not torch's C++ dispatch): :func:`python_us`'s law and
#: its fallback
PYTHON_FIGURES = ("python_module_call_us", "python_torch_call_us", "eager_module_us")


def at_ranks(host: HostProfile, ranks_per_host: int) -> HostProfile:
    """``host`` as it runs with ``ranks_per_host`` ranks on it (one process a GPU, NCCL live in each): from 2 ranks
    the model's Python (:data:`PYTHON_FIGURES`) times the host's ``ranks_python_factor`` and every other host time
    figure (µs, :data:`NOT_RANK_SCALED` aside) times its ``ranks_host_factor``, each measured on the host (a figure
    the host lacks: 1; the Python's falls back to ``ranks_host_factor``). One rank, or neither figure: ``host``."""
    fh, fp = host.ranks_host_factor, host.ranks_python_factor
    if ranks_per_host < 2 or (fh is None and fp is None):
        return host
    fh = 1.0 if fh is None else fh
    fp = fh if fp is None else fp
    return host.replace(**{k: getattr(host, k) * (fp if k in PYTHON_FIGURES else fh) for k in FIELDS
                           if k.endswith("_us") and k not in NOT_RANK_SCALED and getattr(host, k) is not None})


def hosts_dir() -> Path:
    here = Path(__file__).resolve().parents[2] / "hosts"
    if here.is_dir() and any(here.glob("*.toml")):
        return here
    from importlib.resources import files
    return Path(str(files("gpusim.hosts")))


def _figure(path, key, v) -> tuple[float, str, str]:
    where = f"{path}: field [host].{key}"
    if not isinstance(v, dict):
        raise HostError(f"{where} must be {{ value = ..., source = ..., ref = ... }}, got {v!r}")
    x, source, ref = split_figure(v, where, SOURCES, HostError)
    zero_ok = key in MAY_BE_ZERO
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) \
            or x < 0 or (x == 0 and not zero_ok):
        kind = "a non-negative" if zero_ok else "a positive"
        raise HostError(f"{where}.value must be {kind} number, got {x!r}; fix the host file")
    return float(x), source, ref


def parse_host(data: dict, path: str) -> HostProfile:
    """Validate a parsed host TOML document and build a HostProfile."""
    for key in ("name", "description"):
        if not isinstance(data.get(key), str) or not data.get(key):
            raise HostError(f"{path}: field {key} is missing or not a string; add it")
    sec = data.get("host")
    if not isinstance(sec, dict):
        raise HostError(f"{path}: section [host] is missing; add it (see hosts/reference.toml)")
    for k in sec:
        if k not in FIELDS:
            raise HostError(f"{path}: field [host].{k} is not a host figure (known: "
                            f"{', '.join(FIELDS)})")
    vals, prov = {}, {}
    for k in FIELDS:
        if k not in sec:
            if k in REQUIRED:
                raise HostError(f"{path}: field [host].{k} is missing; add it")
            continue
        vals[k], source, ref = _figure(path, k, sec[k])
        prov[k] = (source, ref)
    return HostProfile(name=data["name"], description=data["description"], path=str(path),
                       provenance=MappingProxyType(prov), **vals)


def _read(path: Path) -> HostProfile:
    host = parse_host(read_toml(path, HostError), str(path))
    if path.parent == hosts_dir() and host.name != path.stem:
        raise HostError(f"{path}: field name is {host.name!r} but the file is {path.stem}.toml; "
                        "make them equal")
    return host


@functools.lru_cache(maxsize=None)
def _builtin(name: str) -> HostProfile:
    return _read(hosts_dir() / f"{name}.toml")


def host_names() -> list[str]:
    return sorted(p.stem for p in hosts_dir().glob("*.toml"))


def load_host(name_or_path=None) -> HostProfile:
    """A host profile by name (``hosts/<name>.toml``) or path; None: the reference host."""
    if isinstance(name_or_path, HostProfile):
        return name_or_path
    s = REFERENCE if name_or_path is None else str(name_or_path)
    if s.endswith(".toml") or "/" in s:
        p = Path(s)
        if not p.is_file():
            raise HostError(f"host file {s} does not exist")
        return _read(p)
    if s.lower() not in host_names():
        raise HostError(f"unknown host {s!r}; known: {', '.join(host_names())} "
                        "(or pass a path to a host .toml file)")
    return _builtin(s.lower())


def list_hosts() -> list[HostProfile]:
    return [load_host(n) for n in host_names()]


def dump_host(host: HostProfile, path) -> None:
    """Write ``host`` as a host profile TOML (every figure with its provenance)."""
    out = ["# host profile: written by gpusim", f"name = {toml_value(host.name)}",
           f"description = {toml_value(host.description)}", "", "[host]"]
    for k in FIELDS:
        v = getattr(host, k)
        if v is None:
            continue
        source, ref = host.provenance.get(k, ("assumed", "no provenance was given"))
        out.append(figure_line(k, float(v), source, ref))
    from gpusim.util.atomic import atomic_write
    atomic_write(str(path), "\n".join(out) + "\n")


def hosts_table(hosts) -> str:
    rows = [[h.name, f"{h.eager_op_us:.1f}", f"{h.compiled_call_us:.1f}",
             f"{h.cudagraph_call_us:.1f}",
             f"{h.eager_forward_factor:.2f}" if h.eager_forward_factor else "-",
             h.description[:70]] for h in hosts]
    return table(rows, ["name", "eager op", "compiled call", "graph replay", "forward x",
                        "machine"], "lrrrrl") + \
        f"\n\nµs of host time. The default for every GPU: {REFERENCE} (--host NAME|PATH picks another)."
