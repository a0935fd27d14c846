"""Capture across GPUs: the user's builder, written for a GPU run, under torch's fake process group.

``builder()`` returns ``(step, args)`` as it would under ``torchrun``: the model on ``"cuda"``,
``DistributedDataParallel(model, ...)`` or ``fully_shard(block, mp_policy=...)`` per block and at the
root, the optimizer, autocast and GradScaler, ``dist.get_world_size()``. :func:`fake_world` runs it on a
CPU-only install:

- torch's ``"fake"`` process group of world ``nproc_per_node x nnodes``, rank 0 (torch's own backend:
  every collective returns at once, nothing moves), initialised around the builder and torn down after;
  a group the user initialised already is left alone; ``dist.init_process_group`` /
  ``destroy_process_group`` inside the builder are no-ops; ``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` set
  as torchrun sets them;
- ``"cuda"`` is the ``meta`` device (:class:`CudaAsMeta`: factories with ``device="cuda"`` or no device,
  ``.to("cuda")``, ``.cuda()``), and ``torch.cuda.set_device``/``current_device``/``device_count``/
  ``synchronize``/``is_available`` answer as on a node of ``nproc_per_node`` GPUs; autocast and
  GradScaler enable themselves as on a GPU (:class:`~gpusim.capture.amp.GpuAutocast`);
- ``DistributedDataParallel`` is patched on the class object (users bind it at import): constructing
  one returns a :class:`RecordedDDP`, a pass-through module that records the Reducer's configuration
  (``bucket_cap_mb``, ``gradient_as_bucket_view``, ``static_graph``, ``find_unused_parameters``,
  ``broadcast_buffers``, whether ``no_sync`` was used). PyTorch's own DDP cannot be built on fake
  tensors (its constructor verifies parameter shapes across ranks with ``.item()``).
- ``fully_shard`` runs for real (it does on meta tensors under the fake group); afterwards
  :func:`unshard_fsdp` reads each unit off the FSDP state it left (module, parameters, the
  MixedPrecisionPolicy's param and reduce dtypes, ``reshard_after_forward``) and turns the model back
  into a plain one: original classes, FSDP's hooks removed, each DTensor parameter replaced by a full
  parameter **in the unit's param dtype** (what the unit's forward and backward compute in: FSDP2
  all-gathers bf16 copies of its fp32 shards), a forward pre-hook casting the unit's floating inputs
  (``cast_forward_inputs``), and the optimizer re-pointed at the new parameters. The traced optimizer
  then runs on full bf16 parameters; the lowering (:mod:`gpusim.lower.distributed`) prices it on the
  rank's fp32 shard (1/N of the elements, the master dtype's bytes).

Every patch is undone on exit. The plain step is then captured as a single-GPU training step
(:func:`gpusim.capture.train.capture_step`), and :class:`DistConfig` says what the wrappers would do.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

import torch

from gpusim.capture.amp import GpuAutocast
from gpusim.capture.closures import _prefixed, reachable
from gpusim.capture.fakes import CaptureError
from gpusim.util.errors import UserError

#: DDP's defaults (torch/nn/parallel/distributed.py; ``dist._DEFAULT_FIRST_BUCKET_BYTES``)
DDP_BUCKET_CAP_MB = 25
DDP_FIRST_BUCKET_BYTES = 1024 * 1024


@dataclass
class FSDPUnit:
    """One ``fully_shard`` call: the module's name, its parameters (graph keys, elements, master dtype),
    the MixedPrecisionPolicy's dtypes and whether it reshards after forward."""
    module: str
    params: list = field(default_factory=list)        # [(key, numel, dim0, master dtype name)]
    param_dtype: str = "float32"
    reduce_dtype: str = "float32"
    master_dtype: str = "float32"
    reshard_after_forward: bool = True
    is_root: bool = False


@dataclass
class DistConfig:
    """What the step's wrappers do, read off the user's builder. ``strategy``: ``"ddp"``, ``"fsdp"`` or
    ``"none"`` (a plain step on every rank: nothing is communicated)."""
    nproc_per_node: int
    nnodes: int = 1
    strategy: str = "none"
    ddp: dict = field(default_factory=dict)
    ddp_params: list = field(default_factory=list)    # [(key, bytes, dtype name)] in registration order
    ddp_buffers: dict = field(default_factory=dict)   # dtype name -> bytes DDP broadcasts before each forward
    units: list = field(default_factory=list)         # [FSDPUnit] in creation order
    hook_calls: int = 0                               # FSDP2: torch calls its hooks make in one step (counted)

    @property
    def world(self) -> int:
        return self.nproc_per_node * self.nnodes


def _dtype_name(dt) -> str:
    return str(dt).removeprefix("torch.")


# ------------------------------------------------------------------ cuda on a CPU-only install


class CudaAsMeta(torch.overrides.TorchFunctionMode):
    """``"cuda"`` device requests become ``meta``: factory calls with ``device="cuda"`` (or no device,
    as under ``torch.device("cuda")``), ``Tensor.to("cuda")`` / ``Module.to`` / ``.cuda()``."""

    def __init__(self, default_meta: bool = True):
        super().__init__()
        self.default_meta = default_meta     # factories without a device too (while the builder runs)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # on the hot path (every torch call while the step is traced): plain calls go straight through
        if func is _TENSOR_CUDA:
            return args[0].to("meta")
        if func is _TENSOR_TO:
            args = tuple(_meta_if_cuda(a) for a in args)
        if kwargs:
            dev = kwargs.get("device")
            if dev is not None:
                kwargs = dict(kwargs, device=_meta_if_cuda(dev))
            elif self.default_meta and func in _FACTORIES:
                kwargs = dict(kwargs, device="meta")
            return func(*args, **kwargs)
        if self.default_meta and func in _FACTORIES:
            return func(*args, device="meta")
        return func(*args)


_TENSOR_CUDA, _TENSOR_TO = torch.Tensor.cuda, torch.Tensor.to


def _meta_if_cuda(d):
    if isinstance(d, torch.device) and d.type == "cuda":
        return torch.device("meta")
    if isinstance(d, str) and d.split(":")[0] == "cuda":
        return "meta"
    if isinstance(d, int) and not isinstance(d, bool):      # .to(0): a CUDA ordinal
        return "meta"
    return d


_FACTORIES = {torch.empty, torch.zeros, torch.ones, torch.full, torch.rand, torch.randn, torch.randint,
              torch.arange, torch.tensor, torch.empty_strided, torch.linspace, torch.eye, torch.randperm,
              torch.zeros_like, torch.ones_like, torch.empty_like, torch.full_like, torch.rand_like,
              torch.randn_like}


def _patch(stack, obj, name, value):
    had = name in vars(obj) if isinstance(obj, type) else hasattr(obj, name)
    old = getattr(obj, name, None)
    setattr(obj, name, value)

    def undo():
        if had:
            setattr(obj, name, old)
        else:
            delattr(obj, name)
    stack.callback(undo)


# ------------------------------------------------------------------ DDP


class RecordedDDP(torch.nn.Module):
    """What ``DistributedDataParallel(module, ...)`` returns under :func:`fake_world`: ``module``
    itself in the step (``.module``, ``forward``, ``no_sync``), and the Reducer's configuration."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 init_sync=True, process_group=None, bucket_cap_mb=None, find_unused_parameters=False,
                 check_reduction=False, gradient_as_bucket_view=False, static_graph=False, **kwargs):
        super().__init__()
        self.module = module
        cap = DDP_BUCKET_CAP_MB if bucket_cap_mb is None else bucket_cap_mb
        self.ddp_config = {
            "bucket_cap_mb": cap, "bucket_cap_bytes": int(cap * 1024 * 1024),
            # DDP: the first bucket is 1 MiB only with the default cap (DDPBucketConfig)
            "first_bucket_bytes": DDP_FIRST_BUCKET_BYTES if bucket_cap_mb is None else int(cap * 1024 * 1024),
            "gradient_as_bucket_view": bool(gradient_as_bucket_view), "static_graph": bool(static_graph),
            "find_unused_parameters": bool(find_unused_parameters),
            "broadcast_buffers": bool(broadcast_buffers), "no_sync": False,
            "mixed_precision": kwargs.get("mixed_precision") is not None}

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        self.ddp_config["no_sync"] = True
        yield


def _new_ddp(cls, *args, **kwargs):
    return RecordedDDP(*args, **kwargs)


# ------------------------------------------------------------------ the fake world


@contextlib.contextmanager
def fake_world(nproc_per_node: int, nnodes: int = 1):
    """Run code written for ``torchrun --nproc-per-node N --nnodes M`` on this machine (module
    docstring); every patch undone on exit."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    world = nproc_per_node * nnodes
    with contextlib.ExitStack() as stack:
        ours = dist.is_available() and not dist.is_initialized()
        if ours:
            from torch.testing._internal.distributed.fake_pg import FakeStore
            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
            stack.callback(dist.destroy_process_group)
        elif dist.get_world_size() != world:
            raise UserError(f"a process group of {dist.get_world_size()} ranks is initialised already; "
                            f"gpusim needs to run the builder in a world of {world}: destroy it first")
        env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(nproc_per_node),
               "GROUP_RANK": "0", "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}
        saved_env = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        stack.callback(_restore_env, saved_env)
        _patch(stack, dist, "init_process_group", lambda *a, **k: None)
        _patch(stack, dist, "destroy_process_group", lambda *a, **k: None)
        _patch(stack, DistributedDataParallel, "__new__", _new_ddp)
        for name, value in (("set_device", lambda *a, **k: None), ("current_device", lambda: 0),
                            ("device_count", lambda: nproc_per_node), ("synchronize", lambda *a, **k: None),
                            ("is_current_stream_capturing", lambda: False)):
            _patch(stack, torch.cuda, name, value)
        stack.enter_context(GpuAutocast())
        meta = stack.enter_context(CudaAsMeta())
        yield meta


@contextlib.contextmanager
def _available():
    """``torch.cuda.is_available()`` is True while the builder runs (as on a GPU node); not while the step
    is traced, where torch would then ask the driver (the optimizers' CUDA-graph health check)."""
    with contextlib.ExitStack() as stack:
        _patch(stack, torch.cuda, "is_available", lambda: True)
        yield


def _restore_env(saved):
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


# ------------------------------------------------------------------ FSDP2: read the units, unshard


def unshard_fsdp(step) -> list:
    """Read the FSDP2 units the modules ``step`` reaches carry, and make those modules plain again
    (module docstring). Returns the units (:class:`FSDPUnit`, with parameter keys filled later by
    :func:`read_config`); no units when nothing was sharded."""
    from torch.distributed.fsdp import FSDPModule
    modules, optimizers = reachable(step)
    units, new_of = [], {}
    for _, top in modules:
        for mname, mod in top.named_modules():
            if not isinstance(mod, FSDPModule):
                continue
            state = mod._get_fsdp_state()
            group = state._fsdp_param_group
            mp = state._mp_policy
            unit = FSDPUnit(module=mname or "<root>", is_root=(mod is top))
            unit.param_dtype = _dtype_name(mp.param_dtype) if mp.param_dtype is not None else None
            unit.reduce_dtype = _dtype_name(mp.reduce_dtype) if mp.reduce_dtype is not None else None
            unit.reshard_after_forward = group is not None and group.post_forward_mesh_info is not None
            unit.plain = []
            for fp in (group.fsdp_params if group is not None else []):
                sharded = fp.sharded_param
                master = sharded.dtype
                dtype = mp.param_dtype or master
                unit.master_dtype = _dtype_name(master)
                full = torch.nn.Parameter(torch.empty(fp._orig_size, dtype=dtype, device="meta"),
                                          requires_grad=sharded.requires_grad)
                info = fp._module_info
                for owner, pname in [(info.module, info.param_name)] + list(
                        zip(info.shared_modules, info.shared_param_names)):
                    owner._parameters[pname] = full
                new_of[id(sharded)] = full
                unit.plain.append(full)
            unit.param_dtype = unit.param_dtype or unit.master_dtype
            unit.reduce_dtype = unit.reduce_dtype or unit.param_dtype
            _plain_module(mod, state, mp)
            units.append(unit)
    if units:
        for _, opt in optimizers:
            for grp in opt.param_groups:
                grp["params"] = [new_of.get(id(p), p) for p in grp["params"]]
    # the root is the unit of the outermost module; FSDP2 never reshards it after forward
    for u in units:
        if u.is_root:
            u.reshard_after_forward = False
    return units


def _plain_module(mod, state, mp) -> None:
    """The module's own class again, FSDP's hooks removed, and (``cast_forward_inputs``) a pre-hook
    that casts its floating inputs to the param dtype as FSDP's pre-forward does."""
    from torch.distributed.fsdp import FSDPModule
    base = next(c for c in type(mod).__mro__[1:] if not issubclass(c, FSDPModule))
    mod.__class__ = base
    for hooks in (mod._forward_pre_hooks, mod._forward_hooks):
        for k in [k for k, h in hooks.items() if getattr(h, "__self__", None) is state]:
            del hooks[k]
            mod._forward_pre_hooks_with_kwargs.pop(k, None)
            mod._forward_hooks_with_kwargs.pop(k, None)
    if mp.cast_forward_inputs and mp.param_dtype is not None:
        dt = mp.param_dtype

        def cast(module, args, kwargs):
            def c(t):
                return t.to(dt) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
            return (torch.utils._pytree.tree_map(c, args), torch.utils._pytree.tree_map(c, kwargs))
        mod.register_forward_pre_hook(cast, with_kwargs=True, prepend=True)


# ------------------------------------------------------------------ the configuration


def read_config(step, units: list, nproc_per_node: int, nnodes: int) -> DistConfig:
    """The :class:`DistConfig` of ``step`` after :func:`unshard_fsdp`: DDP's recorded configuration
    and its parameters in registration order, or the FSDP units, each parameter named by the key the
    training capture gives it (``p:<key>`` inputs of the graph)."""
    modules, _ = reachable(step)
    prefix = _prefixed(modules)
    key_of = {}
    for mname, m in modules:
        for k, p in m.named_parameters():
            key_of.setdefault(id(p), f"{mname}.{k}" if prefix else k)
    cfg = DistConfig(nproc_per_node, nnodes)
    ddps = [m for _, top in modules for m in top.modules() if isinstance(m, RecordedDDP)]
    if ddps and units:
        raise UserError("the step uses both DistributedDataParallel and fully_shard; gpusim models one "
                        "data-parallel wrapper per step (HSDP / DDP over FSDP is not modelled)")
    if ddps:
        d = ddps[0]
        cfg.strategy, cfg.ddp = "ddp", dict(d.ddp_config)
        cfg.ddp_params = [(key_of[id(p)], p.numel() * p.element_size(), _dtype_name(p.dtype))
                          for p in d.module.parameters() if p.requires_grad and id(p) in key_of]
        if d.ddp_config["broadcast_buffers"]:
            for b in d.module.buffers():
                dt = _dtype_name(b.dtype)
                cfg.ddp_buffers[dt] = cfg.ddp_buffers.get(dt, 0) + b.numel() * b.element_size()
    elif units:
        cfg.strategy = "fsdp"
        for u in units:
            u.params = [(key_of[id(p)], p.numel(), p.shape[0] if p.dim() else 1, u.master_dtype)
                        for p in u.plain if id(p) in key_of]
            del u.plain
        cfg.units = units
    return cfg


class _StandIn(torch.nn.Module):
    """A unit with ``n`` parameters of ``(world, 2)`` and a forward that uses each once."""

    def __init__(self, n: int, world: int, dtype, blocks=()):
        super().__init__()
        self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(world, 2, dtype=dtype, device="cpu"))
                                          for _ in range(n)])
        self.blocks = torch.nn.ModuleList(blocks)

    def forward(self, x):
        for p in self.ps:
            x = x + p.sum()
        for b in self.blocks:
            x = b(x)
        return x


def fsdp_hook_calls(units: list, world: int) -> int:
    """The torch calls FSDP2's hooks make in one steady-state step (forward and backward), beyond the plain
    model's: counted, not clocked, by running ``fully_shard`` for real on stand-in units of the same parameter
    counts, mixed-precision policies and ``reshard_after_forward`` (tiny CPU tensors, under the fake process
    group that :func:`fake_world` holds). FSDP2 issues them from Python per unit and parameter (unshard, wait,
    copy-out views, reshard, ``foreach_reduce``): host work the traced plain step does not have."""
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from gpusim.capture.pycalls import TorchCalls
    if not units or not dist.is_initialized():
        return 0

    def dt(name):
        return getattr(torch, name) if name else None

    def build(shard: bool):
        root_u = next((u for u in units if u.is_root), None)
        blocks = [(_StandIn(len(u.params), world, dt(u.master_dtype)), u) for u in units if not u.is_root]
        root = _StandIn(len(root_u.params) if root_u else 0, world, dt(units[0].master_dtype), [b for b, _ in blocks])
        if shard:
            for b, u in blocks:
                fully_shard(b, reshard_after_forward=u.reshard_after_forward, mp_policy=MixedPrecisionPolicy(
                    param_dtype=dt(u.param_dtype), reduce_dtype=dt(u.reduce_dtype)))
            ru = root_u or units[0]
            fully_shard(root, mp_policy=MixedPrecisionPolicy(param_dtype=dt(ru.param_dtype),
                                                             reduce_dtype=dt(ru.reduce_dtype)))
        return root

    def calls(shard: bool) -> int:
        model = build(shard)
        x = torch.zeros(4, 2, device="cpu")
        n = 0
        for _ in range(2):              # the first step initialises FSDP's state: count the second
            counter = TorchCalls()
            with counter:
                model(x).float().sum().backward()
            n = counter.calls
        return n
    try:
        return max(0, calls(True) - calls(False))
    except Exception:  # noqa: BLE001 - a count we cannot make is priced as none, said in the docs
        return 0


def capture_distributed(builder, nproc_per_node: int = 1, nnodes: int = 1, name: str | None = None):
    """Call ``builder()`` in a :func:`fake_world` of ``nproc_per_node x nnodes`` ranks and capture rank
    0's step. Returns ``(Captured, DistConfig)``; the graph's meta carries ``grad_of`` (parameter key
    -> the node of its gradient) for the lowering."""
    from gpusim.capture.train import capture_step
    if nproc_per_node < 1 or nnodes < 1:
        raise UserError(f"nproc_per_node and nnodes must be >= 1, got {nproc_per_node} and {nnodes}")
    with fake_world(nproc_per_node, nnodes) as mode:
        try:
            with _available():
                built = builder()
        except (UserError, CaptureError):
            raise
        except Exception as e:  # noqa: BLE001 - one clear line
            raise CaptureError(f"the builder failed under gpusim's fake {nproc_per_node * nnodes}-rank world: "
                               f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}") from None
        if not (isinstance(built, tuple) and len(built) == 2):
            raise UserError("the builder must return (step, args)")
        step, args = built
        mode.default_meta = False       # the step's own CPU tensors stay on the host
        units = unshard_fsdp(step)
        cfg = read_config(step, units, nproc_per_node, nnodes)
        if cfg.strategy == "fsdp":
            cfg.hook_calls = fsdp_hook_calls(cfg.units, cfg.world)
        cap = capture_step(step, tuple(args), name=name)
    if cfg.strategy == "ddp":       # what the step did with the wrapper (no_sync) is known once traced
        cfg.ddp["no_sync"] = any(m.ddp_config["no_sync"] for _, top in reachable(step)[0]
                                 for m in top.modules() if isinstance(m, RecordedDDP))
    cap.graph.meta["grad_of"] = grad_nodes(cap)
    return cap, cfg


def grad_nodes(cap) -> dict:
    """``{parameter key: graph node of its gradient}``: the traced step returns ``(out, [grads])``
    flattened, the gradients of the parameters that got one last, in parameter order; matched to the
    parameters that require grad by shape, from the end."""
    out = next(n for n in cap.gm.graph.nodes if n.op == "output")
    flat = [x for x in out.args[0] if hasattr(x, "meta")]
    params = [(k[2:], t) for k, t in zip(cap.input_names, cap.flat_inputs)
              if k.startswith("p:") and t.requires_grad]
    found, gi = {}, len(flat) - 1
    for key, t in reversed(params):
        val = flat[gi].meta.get("val") if gi >= 0 else None
        if val is not None and tuple(val.shape) == tuple(t.shape):
            if flat[gi].name in cap.graph.g:
                found[key] = flat[gi].name
            gi -= 1
    return found
