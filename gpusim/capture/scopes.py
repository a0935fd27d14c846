"""Which ``nn.Module`` made each node: capture tags each graph node with the module that was
running when the tracer created it (:class:`ModuleScopes`: global forward pre/post hooks keep
a stack of module paths, and every hook marks the tracer's last node, so the nodes between two
marks belong to the module on top of the stack then). A node's ``module`` is the qualified name
of the innermost module (``layer1.0.conv1``; ``""`` is the top-level forward itself). The
per-module roll-up of a prediction reads these tags (:mod:`gpusim.report.rollup`)."""

from __future__ import annotations

import networkx as nx

class ModuleScopes:
    """Context manager for :func:`gpusim.capture.tracing.trace_fx`: tags each FX node created
    while tracing with the module path active at its creation (``node.meta["module"]``,
    via :meth:`tag` after the trace)."""

    def __init__(self, root):
        import torch
        self.names: dict[int, str] = {}
        if isinstance(root, torch.nn.Module):
            for name, m in root.named_modules(remove_duplicate=False):
                self.names.setdefault(id(m), name)     # a shared module: its first name
        self.stack: list[str] = []
        self.marks: list[tuple] = []                   # (last node or None, path after)

    def _path(self, module) -> str:
        name = self.names.get(id(module))
        if name is not None:
            return name
        parent = self.stack[-1] if self.stack else ""
        return f"{parent}.{type(module).__name__}" if parent else type(module).__name__

    def _mark(self) -> None:
        from torch.fx.experimental.proxy_tensor import get_proxy_mode
        try:
            mode = get_proxy_mode()
        except AssertionError:      # two proxy modes at once: no mark (rows stay coarser)
            return
        if mode is None:
            return
        last = next(iter(reversed(mode.tracer.graph.nodes)), None)
        self.marks.append((last, self.stack[-1] if self.stack else ""))

    def _pre(self, module, inputs):
        self.stack.append(self._path(module))
        self._mark()

    def _post(self, module, inputs, output):
        if self.stack:
            self.stack.pop()
        self._mark()

    def __enter__(self):
        import torch
        hooks = torch.nn.modules.module
        self._handles = [hooks.register_module_forward_pre_hook(self._pre),
                         hooks.register_module_forward_hook(self._post)]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        return False

    def tag(self, gm) -> None:
        """Write ``meta["module"]`` on every node of the traced ``gm``."""
        after = {}
        cur = ""
        for node, path in self.marks:
            if node is None:
                cur = path
            else:
                after[node] = path
        for n in gm.graph.nodes:
            n.meta["module"] = cur
            cur = after.get(n, cur)


def tag_opgraph(gm, graph, pnames) -> None:
    """Copy the FX nodes' modules onto ``graph``'s nodes (``module``) and name its
    parameters (``graph.meta["params"]``: the input nodes that are ``nn.Parameter``s)."""
    g = graph.g
    for n in gm.graph.nodes:
        if n.name in g and "module" in n.meta:
            g.nodes[n.name]["module"] = n.meta["module"]
    for n in nx.topological_sort(g):    # nodes capture adds itself (a constant's host copy)
        a = g.nodes[n]
        if "module" not in a and a.get("inputs"):
            a["module"] = g.nodes[a["inputs"][0]].get("module", "")
    graph.meta["params"] = [p[2:] for p in pnames if p.startswith("p:") and p[2:] in g]
