"""What a step function reaches through its closure and globals: its modules, optimizers and the call of ``backward`` that makes it a training step (:func:`reachable`, :func:`is_training_step`), and an inference callable that reaches modules captured as a pure function of their weights (:func:`closure_wrap`)."""

from __future__ import annotations
import contextlib
import functools
import inspect
import torch


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


def _prefixed(modules) -> bool:
    """Names carry the module's variable name when several modules hold tensors."""
    return sum(1 for _, m in modules if next(m.parameters(), None) is not None
               or next(m.buffers(), None) is not None) > 1


def closure_wrap(fn, args, rebuild=None):
    """For inference capture (:func:`gpusim.capture.tracing._wrap`): a callable that reaches modules
    through its closure or globals (``lambda x: model(x)``) as a pure function of
    ``(params, buffers, *args)``, as a module is captured: its parameters are weights,
    not constants copied from the host. None when it reaches no module. ``rebuild``
    (:func:`gpusim.capture.pytrees.split_inputs`) gives back the arguments from their
    traced tensors (a Hugging Face cache, passed as its tensors)."""
    from torch.nn.utils.stateless import _reparametrize_module
    modules, _ = reachable(fn)
    if not modules:
        return None
    prefix = _prefixed(modules)
    params, buffers, maps = {}, {}, []
    for mname, m in modules:
        names = {}
        for k, p in m.named_parameters():
            params[f"{mname}.{k}" if prefix else k] = p
            names[k] = ("p", f"{mname}.{k}" if prefix else k)
        for k, b in m.named_buffers():
            buffers[f"{mname}.{k}" if prefix else k] = b
            names[k] = ("b", f"{mname}.{k}" if prefix else k)
        maps.append((m, names))

    def pure(p, b, *a):
        with contextlib.ExitStack() as stack:
            for m, names in maps:
                stack.enter_context(_reparametrize_module(
                    m, {k: (p if kind == "p" else b)[key] for k, (kind, key) in names.items()},
                    tie_weights=True))
            return fn(*(rebuild(*a) if rebuild is not None else a))
    names = [f"p:{k}" for k in params] + [f"b:{k}" for k in buffers]
    return pure, (params, buffers, *args), names
