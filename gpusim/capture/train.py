"""Training steps: capture a whole step (forward, loss, backward, optimizer) as users write it.

A step function reaches its model and optimizer through its closure or globals::

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

Those objects are **resident state**, never constants: :func:`reachable` finds the modules
and optimizers a callable reaches (closure cells, the globals its code names, a bound
method's object, a ``functools.partial``'s arguments, and the functions these reach, a few
levels deep), and :func:`trace_step` makes their parameters, buffers and optimizer states
graph inputs: for the duration of the trace each module's tensors are swapped for the
traced inputs (``torch.nn.utils.stateless._reparametrize_module``, what
``torch.func.functional_call`` uses) and each optimizer's ``param_groups`` and ``state``
re-keyed to them; everything is restored after.

The traced step is the *steady-state* one: optimizer states are created at the first step
(Adam's ``exp_avg``/``exp_avg_sq``, SGD's momentum buffers), so when the optimizer has none
yet, one untraced step runs first on fake tensors to create them; they are resident inputs of
the traced step. Gradients are not resident at entry (the state after
``zero_grad(set_to_none=True)``): backward allocates them, and they are returned, so they
stay allocated to the step's end (until the next step's ``zero_grad``).

Tracing is ``make_fx`` without pre-dispatch, under grad mode, on fake tensors moved to the
``meta`` device: autograd runs for real on the fake tensors, so ``loss.backward()`` records
the backward aten ops (``convolution_backward``, ``mm`` of the transposes,
``native_layer_norm_backward``, ...) and ``opt.step()`` the optimizer's ``_foreach_*`` or
``_fused_*`` ops. PyTorch's CUDA default for an optimizer built with neither ``foreach`` nor
``fused`` is the foreach implementation (``torch.optim.optimizer._default_to_fused_or_foreach``),
which a trace off the GPU would not pick: it is set for the trace. A non-capturable optimizer
keeps its step counters on the host (``state["step"]``, a CPU scalar): ops on them are host
work and leave the graph (:func:`drop_host_ops`). Every graph node carries its ``phase``:
``forward`` (everything outside backward and the optimizer), ``backward`` or ``optimizer``.
"""

from __future__ import annotations

import contextlib
import functools
from collections import defaultdict

import torch

from gpusim.capture.amp import GpuAutocast
from gpusim.capture.pycalls import HostReads, TorchCalls
from gpusim.capture.train_amp import LiveAutocast, half_to_float, scaler_patch
from gpusim.capture.train_fx import TrainDispatch, cuda_batch_norm, drop_host_ops, split_conv_backward

#: the module (the package attribute ``gpusim.capture`` is the function)
from gpusim.capture import fakes
from gpusim.capture.fxgraph import fx_to_opgraph
from gpusim.capture.closures import _prefixed, reachable


# ------------------------------------------------------------------ the state the trace swaps


class _State:
    """The resident tensors of the modules and optimizers a step reaches, as fake ``meta``
    tensors of one FakeTensorMode: ``params``/``buffers`` (name -> fake), the optimizers'
    states (name -> fake), and how to put them in place (:meth:`swapped`)."""

    def __init__(self, modules, optimizers, mode):
        self.mode, self.modules, self.optimizers = mode, modules, optimizers
        prefix = _prefixed(modules)
        self.params, self.buffers, self.fake_of = {}, {}, {}
        self.module_maps = []
        for mname, m in modules:
            names = {}
            for k, p in m.named_parameters():
                key = f"{mname}.{k}" if prefix else k
                self.params[key] = self._fake(p, p.requires_grad)
                self.fake_of[id(p)] = key
                names[k] = ("p", key)
            for k, b in m.named_buffers():
                key = f"{mname}.{k}" if prefix else k
                self.buffers[key] = self._fake(b, False)
                names[k] = ("b", key)
            self.module_maps.append((m, names))
        for oname, opt in optimizers:       # parameters no module holds
            for gi, grp in enumerate(opt.param_groups):
                for i, p in enumerate(grp["params"]):
                    if id(p) not in self.fake_of:
                        key = f"{oname}.group{gi}.{i}"
                        self.params[key] = self._fake(p, True)
                        self.fake_of[id(p)] = key
        self.states: dict = {}              # (opt index, param key) -> {state name: tensor}
        for oi, (_, opt) in enumerate(optimizers):
            for p, st in opt.state.items():
                if id(p) in self.fake_of:
                    self.states[(oi, self.fake_of[id(p)])] = {
                        k: self._state_tensor(v) for k, v in st.items()}

    def _fake(self, t, grad):
        f = self.mode.from_tensor(t.detach().to("meta"))
        return f.requires_grad_(True) if grad else f

    def _state_tensor(self, v):
        if not isinstance(v, torch.Tensor):
            return v
        if v.dim() == 0 and v.device.type == "cpu":
            # a host step counter: stays a real CPU tensor (its .item() is read on the host)
            return torch.tensor(max(1.0, float(v.detach().to("cpu").item()))
                                if not v.is_meta and not _is_fake(v) else 1.0, dtype=v.dtype)
        return self.mode.from_tensor(v.detach().to("meta"))

    def needs_warmup(self) -> bool:
        return any(any((oi, self.fake_of[id(p)]) not in self.states for g in opt.param_groups
                       for p in g["params"] if p.requires_grad)
                   for oi, (_, opt) in enumerate(self.optimizers))

    def state_inputs(self) -> tuple[list[str], list]:
        """The optimizers' device state tensors (host step counters stay constants)."""
        names, tensors = [], []
        for (oi, key), st in self.states.items():
            for k, v in st.items():
                if isinstance(v, torch.Tensor) and v.device.type != "cpu":
                    names.append(f"{self.optimizers[oi][0]}.{key}.{k}")
                    tensors.append(v)
        return names, tensors

    @contextlib.contextmanager
    def swapped(self, params: dict, buffers: dict, states: list | None = None):
        with _meta_fused():
            with self._swapped(params, buffers, states):
                yield

    @contextlib.contextmanager
    def _swapped(self, params: dict, buffers: dict, states: list | None = None):
        """Modules and optimizers hold ``params``/``buffers`` (and the state tensors
        ``states``, in :meth:`state_inputs` order) while inside; restored after."""
        from torch.nn.utils.stateless import _reparametrize_module
        saved = []
        it = iter(states or [])
        if states is not None:
            for st in self.states.values():
                for k, v in st.items():
                    if isinstance(v, torch.Tensor) and v.device.type != "cpu":
                        st[k] = next(it)
        with contextlib.ExitStack() as stack:
            for m, names in self.module_maps:
                mapping = {k: (params if kind == "p" else buffers)[key]
                           for k, (kind, key) in names.items()}
                stack.enter_context(_reparametrize_module(m, mapping, tie_weights=True))
            try:
                for oi, (_, opt) in enumerate(self.optimizers):
                    saved.append((opt, [grp["params"] for grp in opt.param_groups],
                                  [(grp.get("foreach"), grp.get("fused")) for grp in opt.param_groups],
                                  opt.state))
                    new_state = defaultdict(dict)
                    for grp in opt.param_groups:
                        keys = [self.fake_of[id(p)] for p in grp["params"]]
                        grp["params"] = [params[k] for k in keys]
                        for k in keys:
                            if (oi, k) in self.states:
                                new_state[params[k]] = self.states[(oi, k)]
                        if grp.get("foreach") is None and not grp.get("fused"):
                            grp["foreach"] = True       # the CUDA default
                    opt.state = new_state
                yield
            finally:
                for opt, plists, flags, state in saved:
                    for grp, pl, (fe, fu) in zip(opt.param_groups, plists, flags):
                        grp["params"] = pl
                        grp["foreach"] = fe
                        if "fused" in grp:
                            grp["fused"] = fu
                    opt.state = state

    def collect_states(self, params: dict) -> None:
        """After a warm-up step: the states each optimizer created, keyed by param name."""
        key_of = {id(t): k for k, t in params.items()}
        for oi, (_, opt) in enumerate(self.optimizers):
            for p, st in opt.state.items():
                if id(p) in key_of:
                    self.states[(oi, key_of[id(p)])] = {
                        k: self._state_tensor(v) if _is_fake(v) and v.device.type == "cpu" else v
                        for k, v in st.items()}


@contextlib.contextmanager
def _meta_fused():
    """The traced ``meta`` device stands for the GPU where torch asks for fused and foreach
    kernels: fused optimizers check their parameters' device
    (``_device_dtype_check_for_fused``), and ``clip_grad_norm_`` takes its foreach path
    (``_foreach_norm``, ``_foreach_mul_``) only where foreach kernels exist."""
    import torch.nn.utils.clip_grad as cg
    import torch.optim.optimizer as o
    saved = [(o, "_get_fused_kernels_supported_devices", o._get_fused_kernels_supported_devices)]
    o._get_fused_kernels_supported_devices = lambda: saved[0][2]() + ["meta"]
    for name in ("_has_foreach_support", "_device_has_foreach_support"):
        if hasattr(cg, name):
            orig = getattr(cg, name)
            saved.append((cg, name, orig))
            setattr(cg, name, functools.partial(_foreach_on_meta, orig))
    try:
        yield
    finally:
        for obj, name, orig in saved:
            setattr(obj, name, orig)


def _foreach_on_meta(orig, tensors_or_device, device=None):
    dev = device if device is not None else tensors_or_device
    if getattr(dev, "type", dev) == "meta":
        return True
    return orig(tensors_or_device) if device is None else orig(tensors_or_device, device)


@contextlib.contextmanager
def _fake_steps():
    """In the first (warm-up) step the optimizers' host step counters are fake: their
    value, read by ``torch.optim``'s ``_get_value`` for the bias corrections, is 1."""
    import sys as _sys
    mods = [m for name, m in list(_sys.modules.items())
            if name.startswith("torch.optim") and m is not None and hasattr(m, "_get_value")]
    saved = [(m, m._get_value) for m in mods]
    for m, orig in saved:
        m._get_value = functools.partial(_step_value, orig)
    try:
        yield
    finally:
        for m, orig in saved:
            m._get_value = orig


def _step_value(orig, x):
    return 1.0 if _is_fake(x) else orig(x)


def _is_fake(t) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


# ------------------------------------------------------------------ phases


class _Phases:
    """Labels the traced FX nodes with the phase that made them: at each boundary (backward
    begins or ends, an optimizer step begins or ends) the nodes the tracer made since the
    last boundary get the phase that was running (``node.meta["phase"]``).

    It also labels the *model region* (``node.meta["region"]``: ``"model"`` or ``"step"``),
    what ``torch.compile(model)`` inside the step would compile: the ops made inside a call
    of one of ``models`` (the modules with parameters the step reaches; a loss module is not
    one), and in backward the ops made once the gradient of that call's
    outputs exists (AOTAutograd's compiled backward runs then; the loss's backward before
    it and the optimizer after it stay eager)."""

    def __init__(self, models=()):
        self.models = {id(m) for m in models}     # the modules torch.compile(model) compiles
        self.phase = "forward"
        self.region = "step"
        self.depth = 0              # nested module calls
        self.pending: list = []     # made after a backward, before we know what follows

    def _mark(self, phase, region=None):
        from torch.fx.experimental.proxy_tensor import get_proxy_mode
        mode = get_proxy_mode()
        if mode is not None:
            self.label(mode.tracer.graph, phase)
        self.phase = "after_backward" if phase == "forward" and self.phase == "backward" else phase
        if region is not None:
            self.region = region

    def label(self, graph, next_phase: str = "forward") -> None:
        """Nodes without a phase, newest first, get the current one. Work between a
        backward and an optimizer step (gradient clipping, unscaling) is the optimizer's;
        between a backward and another forward (gradient accumulation), the forward's."""
        for n in reversed(graph.nodes):
            if "phase" in n.meta:
                break
            n.meta["phase"] = self.phase
            n.meta["region"] = self.region
            if self.phase == "after_backward":
                self.pending.append(n)
        if self.phase == "after_backward" and next_phase != "after_backward":
            for n in self.pending:
                n.meta["phase"] = "optimizer" if next_phase == "optimizer" else "forward"
            self.pending = []

    def _enter_module(self, module, inputs):
        if id(module) not in self.models:
            return
        if self.depth == 0:
            self._mark(self.phase if self.phase != "after_backward" else "forward", "model")
        self.depth += 1

    def _exit_module(self, module, inputs, output):
        if id(module) not in self.models:
            return
        self.depth -= 1
        if self.depth == 0:
            self._mark(self.phase, "step")
            for t in torch.utils._pytree.tree_leaves(output):
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t.register_hook(self._output_grad)

    def _output_grad(self, grad):
        """The gradient of a model call's output exists: its compiled backward follows."""
        if self.phase == "backward":
            self._mark("backward", "model")

    def __enter__(self):
        self._backward = torch.autograd.backward

        def backward(*a, **k):
            self._mark("backward", "step")
            try:
                return self._backward(*a, **k)
            finally:
                self._mark("forward", "step")
        torch.autograd.backward = backward
        from torch.nn.modules.module import (register_module_forward_hook,
                                             register_module_forward_pre_hook)
        from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                           register_optimizer_step_pre_hook)
        self._hooks = [register_optimizer_step_pre_hook(lambda *a: self._mark("optimizer")),
                       register_optimizer_step_post_hook(lambda *a: self._mark("forward")),
                       register_module_forward_pre_hook(self._enter_module),
                       register_module_forward_hook(self._exit_module)]
        return self

    def __exit__(self, *exc):
        torch.autograd.backward = self._backward
        for h in self._hooks:
            h.remove()
        return False


# ------------------------------------------------------------------ the trace


def trace_step(fn, args=()):
    """Trace one steady-state training step ``fn(*args)``. Returns ``(gm, flat_inputs,
    names, phases)``: the FX graph of aten ops, its inputs (parameters, buffers, optimizer
    states, then ``args``), their ``p:``/``b:``/``s:`` names, and FX node -> phase."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    modules, optimizers = reachable(fn)
    # a shape environment as make_fx's own: host reads (HostReads) need one
    mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())
    state = _State(modules, optimizers, mode)

    def fake_arg(a):
        if isinstance(a, torch.Tensor):
            f = mode.from_tensor(a.detach().to("meta"))
            return f.requires_grad_(True) if a.requires_grad else f
        return a
    fargs = torch.utils._pytree.tree_map(fake_arg, tuple(args))
    pkeys, bkeys = list(state.params), list(state.buffers)
    if state.needs_warmup():
        # the first step creates the optimizer states: run each optimizer's step once on
        # fake tensors with zero gradients (no forward or backward is needed for that)
        params = dict(state.params)
        try:
            with mode, state.swapped(params, state.buffers), _fake_steps():
                for p in params.values():
                    if p.requires_grad:
                        p.grad = torch.zeros_like(p)
                for _, opt in optimizers:
                    opt.step()
                state.collect_states(params)
        except Exception as e:  # noqa: BLE001 - one clear line
            raise fakes.CaptureError(
                f"could not run the optimizer's first step to create its states: "
                f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}") from None
        finally:
            for p in state.params.values():
                p.grad = None
    snames, stensors = state.state_inputs()
    counts = TorchCalls(where=lambda: phases.region)
    calls = [0]
    step_modules = [0]      # nn.Module calls outside the model's region (the loss module)

    def pure(plist, blist, slist, *a):
        params, buffers = dict(zip(pkeys, plist)), dict(zip(bkeys, blist))
        for p in plist:
            p.grad = None
        with state.swapped(params, buffers, list(slist)), torch.enable_grad(), TrainDispatch(), \
                counts, live:
            out = fn(*a)
        return out, [p.grad for p in plist if p.grad is not None]

    def count(module, inputs):
        calls[0] += 1
        step_modules[0] += phases.region == "step"
    phases = _Phases([m for _, m in modules if any(True for _ in m.parameters())])
    live = LiveAutocast()
    hook = torch.nn.modules.module.register_module_forward_pre_hook(count)
    quiet = fakes._quiet_fake_tensor_logger()
    try:
        with phases, HostReads(), GpuAutocast(), scaler_patch(phases._mark):
            gm = make_fx(pure, tracing_mode="fake", pre_dispatch=False,
                         _allow_non_fake_inputs=True)(
                [state.params[k] for k in pkeys], [state.buffers[k] for k in bkeys],
                stensors, *fargs)
    except fakes.CaptureError:
        raise
    except Exception as e:  # noqa: BLE001 - one clear line
        raise fakes.CaptureError(fakes._explain_trace_failure(e)) from None
    finally:
        hook.remove()
        quiet()
        for p in state.params.values():
            p.grad = None
    phases.label(gm.graph)
    drop_host_ops(gm)
    if live.casts:
        half_to_float(gm)
    split_conv_backward(gm)
    cuda_batch_norm(gm)
    gm.meta["module_calls"] = calls[0]
    gm.meta["torch_calls"] = counts.calls
    # the Python that still runs when the model is compiled: the step's own calls outside the
    # model's region (zero_grad, the loss, the optimizer's per-parameter loop)
    gm.meta["step_calls"] = {"module_calls": step_modules[0], "torch_calls": counts.by.get("step", 0)}
    gm.meta["autocast_casts"] = live.casts
    alive = {n.name for n in gm.graph.nodes}
    gm.meta["py_deaths"] = {k: v for k, v in live.deaths.items() if k in alive and v in alive}
    names = [f"p:{k}" for k in pkeys] + [f"b:{k}" for k in bkeys] + [f"s:{k}" for k in snames]
    flat = fakes._flatten_tensors(([state.params[k] for k in pkeys],
                                     [state.buffers[k] for k in bkeys], stensors, fargs), [])
    gm.meta["regions"] = {n.name: n.meta.get("region") or "step" for n in gm.graph.nodes}
    return gm, flat, names, {n.name: n.meta.get("phase", "forward") for n in gm.graph.nodes}


def capture_step(fn, args=(), name: str | None = None) -> "fakes.Captured":
    """Capture the training step ``fn(*args)`` (:func:`trace_step`) as a
    :class:`~gpusim.capture.tracing.Captured`; every graph node carries its ``phase``, and
    ``graph.meta["train"]`` says what the step holds (parameters, optimizers)."""
    import time
    t0 = time.perf_counter()
    gm, flat, names, phases = trace_step(fn, args)
    label = name or getattr(fn, "__name__", type(fn).__name__)
    graph = fx_to_opgraph(gm, label, names)
    if gm.meta.get("py_deaths"):        # autocast's cached weight copies
        from gpusim.capture.lifetimes import python_frees
        graph.meta["py_free"] = python_frees(gm, graph, gm.meta["py_deaths"])
    for n in graph.g.nodes:
        a = graph.g.nodes[n]
        a["phase"] = phases.get(a.get("fx_name", n), "forward")
        a["region"] = gm.meta["regions"].get(a.get("fx_name", n), "step")
        if a["kind"] == "input":
            a["phase"] = "input"
    modules, optimizers = reachable(fn)
    nbytes = {k: int(t.numel() * t.element_size()) for k, t in zip(names, flat)}
    grads = sum(nbytes[k] for k, t in zip(names, flat) if k.startswith("p:") and t.requires_grad)
    graph.meta.update(module_calls=gm.meta["module_calls"], torch_calls=gm.meta["torch_calls"],
                      step_calls=gm.meta["step_calls"],
                      inputs=len(flat), train={
                          "params": sum(1 for x in names if x.startswith("p:")),
                          "optimizers": [type(o).__name__ for _, o in optimizers],
                          "weights_bytes": sum(b for k, b in nbytes.items() if k[:2] in ("p:", "b:")),
                          "state_bytes": sum(b for k, b in nbytes.items() if k.startswith("s:")),
                          "grad_bytes": grads,
                          "modules": [n for n, _ in modules]})
    return fakes.Captured(gm, flat, names, graph, time.perf_counter() - t0)


