"""Eager host time inside a forward by the class of each call (issue 34, docs/eager_token.md §6).

Not adopted: no committed host profile carries the figures (measured on one H200 lease, they priced its generate
records no better than ``eager_library_forward_factor``); a profile given them (``validation.fit.fit_inforward``)
is priced as below.

calibrate's tight loops price every eager op at one figure (``eager_op_us``: ``torch.add(y, 1.0)``, or
``eager_library_op_us`` for a library call), times one in-forward factor. Inside a real forward the classes differ
3-7x: a 3-D ``linear`` costs ~3x a tensor-tensor ``mul``, SDPA ~7x, an op with a Python number (wrapped into a tensor
on every call) ~2x. A host profile that carries ``inforward_*_us`` (:data:`gpusim.hw.host.INFORWARD`, measured by
``validation.measure.decode_host_probe`` inside synthetic decoder layers, which ``gpusim calibrate`` runs) prices
each eager kernel's dispatch and each view at its class's in-forward figure instead, with no factor on it: the
figure was taken inside a forward. Programs of few kernels (a loop over a few ops, where the tight-loop figures
hold) ramp from the tight-loop figure to the in-forward one as :func:`gpusim.sim.timeline.eager_forward_factor`
ramps its factor.

Classes of an eager kernel's captured op (:func:`host_class`): ``attention`` (SDPA), ``linear`` / ``linear_bias``
(``linear`` without / with a bias, ``mm``/``bmm``/``matmul`` / ``addmm``), ``norm`` (``layer_norm``, ``rms_norm``),
``cast`` (``to`` a dtype), ``cat``, ``reduction``, ``scalar`` (an elementwise op with a Python number: an overload on
a scalar, or a binary op captured with one tensor operand), ``pointwise`` (elementwise on tensors only), and ``other``
(indexing, factories, convolutions, ...: no class of its own; a non-library one at ``pointwise``'s figure, an
assumption, a library one at the tight-loop figure times the host's in-forward factor, as without the figures).
"""

from __future__ import annotations

from gpusim.graph.opgraph import LIBRARY_KINDS

#: binary elementwise ops whose second operand may be a Python number (wrapped into a tensor each call)
BINARY = frozenset({"add", "sub", "mul", "div", "rsub", "true_divide", "floor_divide", "remainder", "pow",
                    "eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum", "masked_fill", "fmod"})
CASTS = frozenset({"to", "_to_copy", "type_as", "float", "half", "bfloat16", "double"})
REDUCTIONS = frozenset({"mean", "sum", "amax", "amin", "max", "min", "var", "std", "prod", "norm", "var_mean"})
GEMMS = frozenset({"mm", "bmm", "matmul"})
BIASED = frozenset({"addmm", "baddbmm", "addbmm"})
NORMS = frozenset({"layer_norm", "rms_norm", "native_layer_norm"})
#: class -> the host profile's figure
FIELD = {c: f"inforward_{c}_us" for c in ("pointwise", "scalar", "cast", "cat", "reduction", "linear",
                                          "linear_bias", "attention", "norm", "view")}


def has_inforward(host) -> bool:
    """Whether ``host`` carries every in-forward class figure (one missing: none is used)."""
    return host is not None and all(getattr(host, f, None) is not None for f in FIELD.values())


def _split(op: str) -> tuple[str, str]:
    parts = str(op).split(".")
    base = parts[1] if parts[0] == "aten" and len(parts) > 1 else parts[0]
    return base.rstrip("_"), parts[2] if parts[0] == "aten" and len(parts) > 2 else ""


def host_class(node: dict) -> str:
    """The class of one captured op (a node of :class:`gpusim.graph.opgraph.OpGraph`), as the module says."""
    base, overload = _split(node.get("op", ""))
    kind = node.get("kind", "")
    tensors = len(node.get("inputs") or ())
    if kind == "attention" or base.startswith("scaled_dot_product"):
        return "attention"
    if base == "linear":
        return "linear_bias" if tensors >= 3 else "linear"
    if base in GEMMS:
        return "linear"
    if base in BIASED:
        return "linear_bias"
    if base in NORMS:
        return "norm"
    if base in CASTS:
        return "cast"
    if base in ("cat", "stack"):
        return "cat"
    if kind == "reduction" and base in REDUCTIONS:
        return "reduction"
    if kind == "pointwise":
        if "Scalar" in overload or (base in BINARY and tensors == 1):
            return "scalar"
        return "pointwise"
    return "other"


def kernel_classes(graph, kernels) -> list[str]:
    """:func:`host_class` of each lowered kernel's first op (``kernels``: the lowering's, with ``ops``)."""
    out = []
    for k in kernels:
        ops = getattr(k, "ops", ()) or ()
        out.append(host_class(graph.g.nodes[ops[0]]) if ops and ops[0] in graph.g else "other")
    return out


def inforward_us(cls: str, kind: str, host) -> float | None:
    """The in-forward figure of a kernel of class ``cls`` (and ``kind``) on ``host``; None where it has none (an
    ``other`` library call: the caller keeps the tight-loop figure and the in-forward factor)."""
    if cls == "other":
        return None if kind in LIBRARY_KINDS else host.inforward_pointwise_us
    return getattr(host, FIELD[cls])
