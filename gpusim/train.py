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
import inspect
import operator
from collections import defaultdict

import torch

import sys

from . import capture as _capture_pkg  # noqa: F401  (loads the module)
from .ops import packet_name
from .pycalls import TorchCalls
from .train_ops import foreach_flops

capture = sys.modules[__package__ + ".capture"]   # the module (gpusim.capture is the function)

#: how far :func:`reachable` follows functions that reach other functions
_DEPTH = 3


def reachable(fn) -> tuple[list, list]:
    """``([(name, module)], [(name, optimizer)])`` that ``fn`` reaches: closure cells, the
    globals its code (and its nested functions' code) names, a bound method's object and
    that object's attributes, a ``functools.partial``'s arguments; lists, tuples and dicts
    of these one level deep. A module inside another one found is left to its parent."""
    mods, opts, seen = {}, {}, set()

    def take(name, v, depth):
        if id(v) in seen:
            return
        seen.add(id(v))
        if isinstance(v, torch.nn.Module):
            mods.setdefault(id(v), (name, v))
        elif isinstance(v, torch.optim.Optimizer):
            opts.setdefault(id(v), (name, v))
        elif isinstance(v, (list, tuple)) and depth >= 0:
            for i, x in enumerate(v):
                take(f"{name}.{i}", x, -1)
        elif isinstance(v, dict) and depth >= 0:
            for k, x in v.items():
                take(f"{name}.{k}", x, -1)
        elif callable(v) and depth > 0:
            walk(v, depth - 1)

    def codes(code):
        yield code
        for c in code.co_consts:
            if inspect.iscode(c):
                yield from codes(c)

    def walk(f, depth):
        if isinstance(f, functools.partial):
            for i, a in enumerate(f.args):
                take(f"arg{i}", a, depth)
            for k, a in (f.keywords or {}).items():
                take(k, a, depth)
            f = f.func
        if inspect.ismethod(f):
            obj = f.__self__
            take(type(obj).__name__, obj, depth)
            if not isinstance(obj, torch.nn.Module):
                for k, a in list(vars(obj).items()) if hasattr(obj, "__dict__") else []:
                    take(k, a, 0)
            f = f.__func__
        if isinstance(f, torch.nn.Module):
            return
        code = getattr(f, "__code__", None)
        if code is None:
            return
        for name, cell in zip(code.co_freevars, f.__closure__ or ()):
            try:
                take(name, cell.cell_contents, depth)
            except ValueError:      # an empty cell
                continue
        glb = getattr(f, "__globals__", {})
        for c in codes(code):
            for name in c.co_names:
                if name in glb:
                    take(name, glb[name], depth)
        for i, d in enumerate(getattr(f, "__defaults__", None) or ()):
            take(f"default{i}", d, depth)

    walk(fn, _DEPTH)
    modules = [(n, m) for n, m in mods.values()]
    inner = {id(s) for _, m in modules for s in m.modules() if s is not m}
    modules = [(n, m) for n, m in modules if id(m) not in inner]
    return modules, list(opts.values())


def calls_backward(fn) -> bool:
    """Whether ``fn``'s code (or a function it reaches by name) calls ``backward``: the
    step is a training step even without an optimizer."""
    seen = set()

    def look(f, depth):
        f = getattr(f, "func", f)
        f = getattr(f, "__func__", f)
        code = getattr(f, "__code__", None)
        if code is None or id(code) in seen or depth < 0:
            return False
        seen.add(id(code))
        stack = [code]
        glb = getattr(f, "__globals__", {})
        while stack:
            c = stack.pop()
            if "backward" in c.co_names or "grad" in c.co_names and "autograd" in c.co_names:
                return True
            stack += [k for k in c.co_consts if inspect.iscode(k)]
            if any(look(glb[n], depth - 1) for n in c.co_names
                   if inspect.isfunction(glb.get(n))):
                return True
        return False
    return look(fn, _DEPTH)


def is_training_step(fn) -> bool:
    """A callable (not a module) that reaches an optimizer or calls ``backward``."""
    if isinstance(fn, torch.nn.Module) or not callable(fn):
        return False
    return bool(reachable(fn)[1]) or calls_backward(fn)


# ------------------------------------------------------------------ the state the trace swaps


class _State:
    """The resident tensors of the modules and optimizers a step reaches, as fake ``meta``
    tensors of one FakeTensorMode: ``params``/``buffers`` (name -> fake), the optimizers'
    states (name -> fake), and how to put them in place (:meth:`swapped`)."""

    def __init__(self, modules, optimizers, mode):
        self.mode, self.modules, self.optimizers = mode, modules, optimizers
        prefix = len(modules) > 1
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
                    groups = [dict(grp) for grp in opt.param_groups]
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
                    del groups
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


def _is_fake(t) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


# ------------------------------------------------------------------ phases


class _Phases:
    """Records where in the trace backward and the optimizer step begin and end: the
    number of FX nodes the tracer holds at each boundary."""

    def __init__(self):
        self.marks: list[tuple[int, str]] = []

    def _mark(self, phase):
        from torch.fx.experimental.proxy_tensor import get_proxy_mode
        mode = get_proxy_mode()
        if mode is not None:
            self.marks.append((len(mode.tracer.graph.nodes), phase))

    def __enter__(self):
        self._backward = torch.autograd.backward

        def backward(*a, **k):
            self._mark("backward")
            try:
                return self._backward(*a, **k)
            finally:
                self._mark("forward")
        torch.autograd.backward = backward
        from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                           register_optimizer_step_pre_hook)
        self._hooks = [register_optimizer_step_pre_hook(lambda *a: self._mark("optimizer")),
                       register_optimizer_step_post_hook(lambda *a: self._mark("forward"))]
        return self

    def __exit__(self, *exc):
        torch.autograd.backward = self._backward
        for h in self._hooks:
            h.remove()
        return False

    def of_nodes(self, gm) -> dict[str, str]:
        """FX node name -> phase."""
        out, phase, marks = {}, "forward", sorted(self.marks)
        j = 0
        for i, n in enumerate(gm.graph.nodes):
            while j < len(marks) and marks[j][0] <= i:
                phase = marks[j][1]
                j += 1
            out[n.name] = phase
        return out


# ------------------------------------------------------------------ FX passes


def _vals(x):
    out = []
    for v in (x if isinstance(x, (list, tuple)) else [x]):
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out += _vals(v)
    return out


def _tensors_of(gm, node) -> list:
    ts = []
    for a in _flat_args((node.args, node.kwargs)):
        if a.op == "get_attr":
            t = getattr(gm, a.target, None)
            ts += [t] if isinstance(t, torch.Tensor) else []
        else:
            ts += _vals(a.meta.get("val"))
    return ts + _vals(node.meta.get("val"))


def _flat_args(x, out=None):
    out = [] if out is None else out
    if isinstance(x, torch.fx.Node):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _flat_args(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _flat_args(y, out)
    return out


def drop_host_ops(gm) -> int:
    """Erase ops whose every tensor is a host (CPU) tensor and whose results no device op
    uses: the optimizer's step counters (``_foreach_add_(state_steps, 1)``) and the bias
    corrections computed from them run on the host (the traced device is ``meta``).
    Returns how many were erased."""
    erased = 0
    for node in reversed(list(gm.graph.nodes)):
        if node.op != "call_function" or node.users:
            continue
        ts = _tensors_of(gm, node)
        if ts and all(t.device.type == "cpu" for t in ts):
            gm.graph.erase_node(node)
            erased += 1
    for node in list(gm.graph.nodes):       # host constants nothing reads any more
        if node.op == "get_attr" and not node.users:
            gm.graph.erase_node(node)
    return erased


def split_conv_backward(gm) -> None:
    """One ``convolution_backward`` that computes grad_input, grad_weight and grad_bias
    becomes one call per gradient, as cuDNN runs them: backward-data and backward-filter
    kernels (the same op with a one-hot ``output_mask``) and the bias gradient as the
    ``sum`` over batch and space that ATen computes it with (Convolution.cpp)."""
    aten = torch.ops.aten
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.convolution_backward.default:
            continue
        args = list(node.args)
        mask = list(args[10])
        users = {u.args[1]: u for u in node.users if u.target is operator.getitem}
        val = node.meta.get("val")
        with gm.graph.inserting_after(node):
            for i in (2, 1, 0):
                if not mask[i] or i not in users:
                    continue
                if i == 2:
                    go = args[0]
                    dims = [0] + list(range(2, len(go.meta["val"].shape)))
                    new = gm.graph.call_function(aten.sum.dim_IntList, (go, dims))
                    new.meta["val"] = val[2]
                    users[i].replace_all_uses_with(new)
                else:
                    one = [j == i for j in range(3)]
                    new = gm.graph.call_function(aten.convolution_backward.default,
                                                 tuple(args[:10]) + (one,))
                    new.meta["val"] = tuple(v if j == i else None for j, v in enumerate(val))
                    users[i].args = (new, i)
        for u in list(node.users):
            if not u.users:
                gm.graph.erase_node(u)
        if not node.users:
            gm.graph.erase_node(node)
    gm.graph.lint()


# ------------------------------------------------------------------ multi-tensor ops

#: the tensor lists a fused optimizer writes in place (params, exp_avg, exp_avg_sq, max_exp_avg_sq;
#: SGD's momentum buffers), by position; grads (1) and state_steps are read
_FUSED_WRITES = {"_fused_adam_": (0, 2, 3, 4), "_fused_adamw_": (0, 2, 3, 4), "_fused_sgd_": (0, 2),
                 "_fused_adagrad_": (0, 2)}


def add_foreach(g, n, opname, vals, inplace_writer):
    """A ``_foreach_*`` or ``_fused_*`` optimizer op: one node over its tensor lists, with
    ``foreach`` = the first list's element counts and the launch ``depth`` (its tensor lists,
    the output list of an out-of-place op included; a fused optimizer's ``state_steps`` are
    read through a side table, not a list), which :func:`gpusim.train_ops.mta_launches`
    turns into launches. An in-place op writes its first list's storages (and a fused
    optimizer its state lists): later readers see this node."""
    pname = packet_name(opname)
    args = list(n.args) + list(n.kwargs.values())
    lists = [a for a in args if isinstance(a, (list, tuple)) and a
             and all(isinstance(x, torch.fx.Node) and isinstance(vals.get(x.name), torch.Tensor)
                     for x in a)]
    if not lists or lists[0][0].name not in g:
        return
    fused = pname.startswith("_fused_")
    width = len(lists[0])
    tensor_lists = [lst for lst in lists if len(lst) == width]
    steps = [lst for lst in tensor_lists[1:] if all(vals[x.name].dim() == 0 for x in lst)] if fused else []
    tensor_lists = [lst for lst in tensor_lists if not any(lst is s for s in steps)]
    inplace = pname.endswith("_")
    outs = capture._flatten_tensors(n.meta.get("val"), [])
    writes = [i for i in _FUSED_WRITES.get(pname, (0,)) if i < len(tensor_lists)] if inplace else []
    depth = len(tensor_lists) + (0 if inplace else 1)
    reads: dict = {}
    for lst in lists:
        for x in lst:
            t = vals[x.name]
            base = inplace_writer.get(capture._storage_key(t)) or g.nodes[x.name]["base"]
            reads[base] = reads.get(base, 0) + capture._meta(t).ubytes
    written = (sum(capture._meta(vals[x.name]).nbytes for i in writes for x in tensor_lists[i]) if inplace
               else sum(capture._meta(t).nbytes for t in outs))
    numels = [int(vals[x.name].numel()) for x in lists[0]]
    first = vals[lists[0][0].name]
    shape = tuple(int(s) for s in first.shape) if inplace else tuple(tuple(int(s) for s in t.shape) for t in outs)
    in_nodes = [x.name for lst in lists for x in lst]
    g.add_node(n.name, op=opname, kind="pointwise", shape=shape, dtype=capture._dtype_name(first.dtype),
               flops=foreach_flops(pname, sum(numels)), bytes_read=float(sum(reads.values())),
               bytes_written=float(written), inputs=in_nodes, base=n.name, is_output=False,
               unmodelled=False, reads=reads, gemm=None, contiguous=True,
               foreach={"numels": numels, "depth": depth, "fused": fused,
                        "scalarlist": "ScalarList" in opname or "Tensor" in opname.split(".")[-1]})
    for x in set(in_nodes):
        g.add_edge(x, n.name, bytes=capture._meta(vals[x]).ubytes)
    for p, b in reads.items():
        if not g.has_edge(p, n.name):
            g.add_edge(p, n.name, bytes=b)
    for i in writes:
        for x in tensor_lists[i]:
            inplace_writer[capture._storage_key(vals[x.name])] = n.name




# ------------------------------------------------------------------ the trace


def trace_step(fn, args=()):
    """Trace one steady-state training step ``fn(*args)``. Returns ``(gm, flat_inputs,
    names, phases)``: the FX graph of aten ops, its inputs (parameters, buffers, optimizer
    states, then ``args``), their ``p:``/``b:``/``s:`` names, and FX node -> phase."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    modules, optimizers = reachable(fn)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    state = _State(modules, optimizers, mode)

    def fake_arg(a):
        if isinstance(a, torch.Tensor):
            f = mode.from_tensor(a.detach().to("meta"))
            return f.requires_grad_(True) if a.requires_grad else f
        return a
    fargs = torch.utils._pytree.tree_map(fake_arg, tuple(args))
    if state.needs_warmup():
        # the first step creates the optimizer states: run it untraced on fake tensors
        params = dict(state.params)
        with mode, torch.enable_grad(), state.swapped(params, state.buffers):
            fn(*fargs)
            state.collect_states(params)
        for p in state.params.values():
            p.grad = None
    snames, stensors = state.state_inputs()
    pkeys, bkeys = list(state.params), list(state.buffers)
    counts = TorchCalls()
    calls = [0]

    def pure(plist, blist, slist, *a):
        params, buffers = dict(zip(pkeys, plist)), dict(zip(bkeys, blist))
        for p in plist:
            p.grad = None
        with state.swapped(params, buffers, list(slist)), torch.enable_grad(), counts:
            out = fn(*a)
        return out, [p.grad for p in plist if p.grad is not None]

    def count(module, inputs):
        calls[0] += 1
    phases = _Phases()
    hook = torch.nn.modules.module.register_module_forward_pre_hook(count)
    quiet = capture._quiet_fake_tensor_logger()
    try:
        with phases:
            gm = make_fx(pure, tracing_mode="fake", pre_dispatch=False,
                         _allow_non_fake_inputs=True)(
                [state.params[k] for k in pkeys], [state.buffers[k] for k in bkeys],
                stensors, *fargs)
    except capture.CaptureError:
        raise
    except Exception as e:  # noqa: BLE001 - one clear line
        raise capture.CaptureError(capture._explain_trace_failure(e)) from None
    finally:
        hook.remove()
        quiet()
        for p in state.params.values():
            p.grad = None
    drop_host_ops(gm)
    split_conv_backward(gm)
    gm.meta["module_calls"] = calls[0]
    gm.meta["torch_calls"] = counts.calls
    names = [f"p:{k}" for k in pkeys] + [f"b:{k}" for k in bkeys] + [f"s:{k}" for k in snames]
    flat = capture._flatten_tensors(([state.params[k] for k in pkeys],
                                     [state.buffers[k] for k in bkeys], stensors, fargs), [])
    return gm, flat, names, phases.of_nodes(gm)


def capture_step(fn, args=(), name: str | None = None) -> "capture.Captured":
    """Capture the training step ``fn(*args)`` (:func:`trace_step`) as a
    :class:`~gpusim.capture.Captured`; every graph node carries its ``phase``, and
    ``graph.meta["train"]`` says what the step holds (parameters, optimizers)."""
    import time
    t0 = time.perf_counter()
    gm, flat, names, phases = trace_step(fn, args)
    label = name or getattr(fn, "__name__", type(fn).__name__)
    graph = capture.fx_to_opgraph(gm, label, names)
    for n in graph.g.nodes:
        a = graph.g.nodes[n]
        a["phase"] = phases.get(a.get("fx_name", n), "forward")
        if a["kind"] == "input":
            a["phase"] = "input"
    modules, optimizers = reachable(fn)
    graph.meta.update(module_calls=gm.meta["module_calls"], torch_calls=gm.meta["torch_calls"],
                      inputs=len(flat), train={
                          "params": sum(1 for x in names if x.startswith("p:")),
                          "optimizers": [type(o).__name__ for _, o in optimizers],
                          "modules": [n for n, _ in modules]})
    return capture.Captured(gm, flat, names, graph, time.perf_counter() - t0)
