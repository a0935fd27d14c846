"""A decoder of L identical layers, captured at 2, 3 and 4 of them (:data:`SMALL`) and extended
to L: the graph a capture of all L layers gives, checked, at a tenth of its tracing.

Capture's cost is per traced op (the tracer's dispatch, ~0.5 ms an op), so a 32-layer 7B model
costs 32 layers of it per capture, and ``generate`` captures it six times. Its layers are one
class with one config: each adds the same ops, named by the same rules, one period further on.

**The rule.** Every string in the graph (node names, the names an attribute refers to, input
labels, the tracer's placeholder names, the ``meta`` lists and maps) is read as text with
integers in it (``linear_7``, ``model.layers.3.mlp.up_proj.weight``, ``in12``; a name FX left
without a counter reads as counter 0). Going from k to k+1 layers, the 2- to 3-layer pair
shows (a) which runs of records (nodes, list entries) a layer inserts, each a repeat of the run
just before it, and (b) how much each integer of every other record moves (0 before the layer,
a layer's worth after it). The step k -> k+1 applies the same moves and inserts the same runs,
each integer moved as it moved from the previous repeat; integer ``meta`` counts are affine in
k. Numbers (shapes, bytes, FLOPs) must be the same in every repeat.

**The check.** The rule learnt from 2 -> 3 layers must give the 4-layer capture exactly (every
node, attribute, edge and its order, every ``meta`` entry); only then is it applied up to L.
Anything else (a layer that differs, a count that is not affine, a name the rule misreads)
answers None and the caller captures all L layers. What no check at 4 layers can see, code that
asks how many layers there are and acts on it past 4, is excluded by asking for layers of one
class, one parameter layout and one layer type (``config.layer_types``).

**Another call of the same function** (``generate``'s step at its second context) whose capture
at 3 layers reads as the checked rule's did, string for string, and whose layers repeat their
numbers (shapes, bytes) is extended by that rule from this one capture (:func:`extend_like`):
the rule is about names, and its names were checked.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
import re
from difflib import SequenceMatcher

import networkx as nx
import torch

from gpusim.graph.opgraph import OpGraph

#: the layer counts captured: the rule is learnt from the first two, checked on the third (layer
#: 0 reads the embedding where the others read the layer before: it is no repeat of them)
SMALL = (2, 3, 4)
#: fewer layers than this are captured whole (the small captures would cost about as much)
MIN_LAYERS = 12

_DIGITS = re.compile(r"(0|[1-9][0-9]*)")     # "007" is three numbers: every text comes back
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COUNTED = re.compile(r"_\d+$")


_SCALARS = (bool, int, float)


class NotPeriodic(Exception):
    """The captures at 1, 2, 3 layers are not one rule's repeats."""


# -- the module: its layer list, truncated ----------------------------------------------------

def layer_list(module):
    """``(parent, attribute)`` of the module's one ``ModuleList`` of ``config.num_hidden_layers``
    layers when they are one class, one parameter layout and one layer type; else None."""
    cfg = getattr(module, "config", None)
    n = getattr(cfg, "num_hidden_layers", None)
    if not isinstance(n, int) or n < MIN_LAYERS:
        return None
    types = getattr(cfg, "layer_types", None)
    if types is not None and (not isinstance(types, list) or len(set(types)) > 1):
        return None
    found = [(parent, attr) for _, parent in module.named_modules()
             for attr, child in parent._modules.items()
             if isinstance(child, torch.nn.ModuleList) and len(child) == n]
    if len(found) != 1:
        return None
    layers = list(found[0][0]._modules[found[0][1]])

    def layout(m):
        return (type(m), [(k, tuple(p.shape), p.dtype) for k, p in m.named_parameters()],
                [(k, tuple(b.shape), b.dtype) for k, b in m.named_buffers()])
    first = layout(layers[0])
    return found[0] if all(layout(m) == first for m in layers[1:]) else None


@contextlib.contextmanager
def truncated(module, where, k: int):
    """The module with its first ``k`` layers only (config included), restored on exit."""
    parent, attr = where
    cfg = module.config
    full, n, types = parent._modules[attr], cfg.num_hidden_layers, getattr(cfg, "layer_types", None)
    try:
        parent._modules[attr] = torch.nn.ModuleList(list(full)[:k])
        cfg.num_hidden_layers = k
        if types is not None:
            cfg.layer_types = types[:k]
        yield
    finally:
        parent._modules[attr] = full
        cfg.num_hidden_layers = n
        if types is not None:
            cfg.layer_types = types


def capture_repeated(module, fn, args, name: str, capture, rules: dict | None = None,
                     family=None) -> OpGraph | None:
    """``capture(fn, args(), name=name)`` of the whole module, from captures at :data:`SMALL`
    layers (``args()`` is called under each truncation); None when the module's layers are not
    repeats or the captures are not one rule's (the caller then captures it whole).

    ``rules``, ``family``: where a checked rule of this function is kept (``rules[family]``).
    A later call whose capture at 3 layers reads as the same strings as that rule's (the same
    names, references and ``meta``; only numbers such as the cache's length differ) and whose
    layers repeat their numbers is extended by it from that one capture (:func:`extend_like`)."""
    where = layer_list(module)
    if where is None:
        return None
    layers = module.config.num_hidden_layers
    try:
        kept = rules.get(family) if rules is not None and family is not None else None
        three = None
        if kept is not None:
            with truncated(module, where, SMALL[1]):
                three = capture(fn, args(), name=name)
            gc.freeze()
            try:
                return extend_like(kept, three, layers, name)
            except NotPeriodic:
                pass
        small = []
        for k in SMALL:
            if k == SMALL[1] and three is not None:
                small.append(three)
                continue
            with truncated(module, where, k):
                small.append(capture(fn, args(), name=name))
            gc.freeze()     # as generate does: the next capture's collection skips what is kept
        keep = {} if rules is not None and family is not None else None
        out = extend(small, layers, name, keep)
        if keep:
            rules[family] = keep["rule"]
        return out
    except Exception:  # noqa: BLE001 - not repeats, or a truncated model that does not run: capture it whole
        return None


# -- records: a structure of strings and numbers ----------------------------------------------

@functools.lru_cache(maxsize=1 << 16)
def _text(s: str) -> tuple[tuple, tuple]:
    """``"linear_7"`` -> ``(("linear_", ""), (7,))``; an identifier without a counter gets 0."""
    if _IDENT.fullmatch(s) and not _COUNTED.search(s):
        s += "_0"
    parts = _DIGITS.split(s)
    return tuple(parts[0::2]), tuple(int(x) for x in parts[1::2])


@functools.lru_cache(maxsize=1 << 16)
def _render(texts: tuple, nums: tuple) -> str:
    out = texts[0] + "".join(f"{n}{t}" for n, t in zip(nums, texts[1:]))
    return out[:-2] if out.endswith("_0") and _IDENT.fullmatch(out) else out


class _Rec:
    """One record: its shape and strings' texts (``key``, equal in every repeat) and the
    integers in its strings (``nums``)."""
    __slots__ = ("key", "nums", "d")

    def __init__(self, key, nums, d=None):
        self.key, self.nums, self.d = key, nums, d


def _enc(x, texts: list, nums: list):
    if isinstance(x, str):
        t, n = _text(x)
        texts.append(t)
        nums.extend(n)
        return "s"
    if isinstance(x, dict):
        return ("d", tuple((_enc(k, texts, nums), _enc(v, texts, nums)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        if all(v is None or type(v) in _SCALARS for v in x):       # a shape: one leaf
            return ("v", type(x).__name__, tuple(x)) if isinstance(x, list) else ("v", "tuple", x)
        return ("l" if isinstance(x, list) else "t", tuple(_enc(v, texts, nums) for v in x))
    if x is None or isinstance(x, (bool, int, float)):
        return ("v", type(x).__name__, x)
    raise NotPeriodic(f"cannot read a {type(x).__name__}")


def encode(x) -> _Rec:
    texts, nums = [], []
    spec = _enc(x, texts, nums)
    return _Rec((spec, tuple(texts)), tuple(nums))


def decode(r: _Rec):
    """The structure back: its key's compiled builder, given the integers."""
    return _decoder(r.key)(r.nums)


def _string_source(t: tuple, k: int) -> str:
    """Source of :func:`_render` of text ``t`` whose integers are ``n[k:]``: the parts joined,
    and where the text can end in ``_0`` as an identifier (its last part empty after an
    underscore), that suffix cut when the last integer is 0 (a name FX left without a counter)."""
    parts = [repr(t[0])] if t[0] else []
    for j, p in enumerate(t[1:]):
        parts.append(f"str(n[{k + j}])")
        if p:
            parts.append(repr(p))
    expr = " + ".join(parts) or "''"
    if len(t) > 1 and t[-1] == "" and t[-2].endswith("_") and _IDENT.fullmatch("0".join(t)):
        return f"(({expr})[:-2] if n[{k + len(t) - 2}] == 0 else {expr})"
    return f"({expr})"


@functools.lru_cache(maxsize=1 << 14)
def _decoder(key):
    """A function of a record's integers that builds its structure (strings rendered inline,
    values ``c[j]``), compiled once per key: decoding thousands of records is then one call each."""
    spec, texts = key
    consts, strings, count = [], [], [0]
    k = 0
    for t in texts:
        strings.append(_string_source(t, k))
        k += len(t) - 1

    def src(x) -> str:
        if x == "s":
            count[0] += 1
            return strings[count[0] - 1]
        if x[0] == "v":
            consts.append(x[2])
            return f"list(c[{len(consts) - 1}])" if x[1] == "list" else f"c[{len(consts) - 1}]"
        if x[0] == "d":
            return "{" + ", ".join(f"{src(a)}: {src(v)}" for a, v in x[1]) + "}"
        items = [src(v) for v in x[1]]
        return "[" + ", ".join(items) + "]" if x[0] == "l" else "(" + "".join(i + ", " for i in items) + ")"
    text = src(spec)
    return eval(f"lambda n: {text}", {"__builtins__": {"list": list, "str": str},  # noqa: S307 - our own source
                                       "c": tuple(consts)})


# -- a sequence of records, one layer longer each step ----------------------------------------

def _sub(a, b):
    return tuple(x - y for x, y in zip(a, b))


class Series:
    """A sequence at k layers and the rule that makes it k+1 (learnt from 1 -> 2 layers)."""

    def __init__(self, one: list[_Rec], two: list[_Rec]):
        keys1, keys2 = [r.key for r in one], [r.key for r in two]
        runs = []
        for tag, i1, i2, j1, j2 in SequenceMatcher(None, keys1, keys2, autojunk=False).get_opcodes():
            if tag == "insert":
                runs.append([j1, j2 - j1])
            elif tag != "equal":
                raise NotPeriodic(f"{tag} at {i1}")
        inserted = set()
        for run in reversed(runs):      # the latest repeat: slide each run right while it repeats
            s, n = run
            while s + n < len(two) and keys2[s] == keys2[s + n] and s + n not in inserted:
                s += 1
            run[0] = s
            inserted.update(range(s, s + n))
        rest = [j for j in range(len(two)) if j not in inserted]
        if [keys2[j] for j in rest] != keys1:
            raise NotPeriodic("the layer is not an insertion")
        for j, i in zip(rest, range(len(one))):
            two[j].d = _sub(two[j].nums, one[i].nums)
        self.copy = []                  # per run: each element's move from its previous repeat
        for s, n in runs:
            prev = range(s - n, s)
            if s - n < 0 or any(p in inserted or keys2[p] != keys2[p + n] for p in prev):
                raise NotPeriodic("a layer's run does not repeat the one before it")
            for p in prev:
                two[p + n].d = two[p].d
            self.copy.append([_sub(two[p + n].nums, two[p].nums) for p in prev])
        self.seq, self.runs = two, [tuple(r) for r in runs]

    def step(self, m: int = 1) -> None:
        """k layers -> k + m: every record moves by m times its move; each run gets m more
        repeats, the t-th of them its latest repeat moved m times and copied t times."""
        ends = {s + n - 1: (r, s, n) for r, (s, n) in enumerate(self.runs)}
        out, runs = [], list(self.runs)
        for i, rec in enumerate(self.seq):
            out.append(_Rec(rec.key, _move(rec.nums, rec.d, m), rec.d))
            if i in ends:
                r, s, n = ends[i]
                latest = out[-n:]
                for t in range(1, m + 1):
                    start = len(out)
                    out.extend(_Rec(e.key, _move(e.nums, c, t), e.d) for e, c in zip(latest, self.copy[r]))
                if m:
                    runs[r] = (start, n)
        self.seq, self.runs = out, runs


def _move(nums: tuple, d: tuple, m: int) -> tuple:
    return tuple(x + m * y for x, y in zip(nums, d)) if m else nums


# -- the OpGraph as records -------------------------------------------------------------------

def _node_records(graph: OpGraph) -> list[_Rec]:
    g = graph.g
    return [encode((n, g.nodes[n], [(p, g.edges[p, n]) for p in g.pred[n]])) for n in g.nodes]


def _meta_series(meta: dict):
    """Per ``meta`` entry: a list of records (lists, maps), an int, or the value itself."""
    out = {}
    for k, v in meta.items():
        if isinstance(v, list):
            out[k] = ("list", [encode(x) for x in v])
        elif isinstance(v, dict):
            out[k] = ("dict", [encode([a, b]) for a, b in v.items()])
        elif isinstance(v, int) and not isinstance(v, bool):
            out[k] = ("int", v)
        else:
            out[k] = ("same", v)
    return out


def _build(nodes: list, meta: dict, name: str) -> OpGraph:
    g = nx.DiGraph()
    for n, attrs, _ in nodes:
        g.add_node(n, **attrs)
    for n, _, preds in nodes:
        for p, data in preds:
            g.add_edge(p, n, **data)
    return OpGraph(g, name, meta=meta)


def same_graph(a: OpGraph, b: OpGraph) -> bool:
    """Node order, each node's attributes in order, edges in order both ways, ``meta``."""
    if list(a.g.nodes) != list(b.g.nodes) or a.meta != b.meta:
        return False
    for n in a.g.nodes:
        if (list(a.g.nodes[n].items()) != list(b.g.nodes[n].items())
                or list(a.g.pred[n].items()) != list(b.g.pred[n].items())
                or list(a.g.succ[n].items()) != list(b.g.succ[n].items())):
            return False
    return list(map(repr, a.meta.items())) == list(map(repr, b.meta.items()))


class _Graphs:
    """The rule for a whole OpGraph: its nodes and each ``meta`` entry."""

    def __init__(self, one: OpGraph, two: OpGraph):
        self.nodes = Series(_node_records(one), _node_records(two))
        m1, m2 = _meta_series(one.meta), _meta_series(two.meta)
        if list(m1) != list(m2):
            raise NotPeriodic("meta keys")
        self.meta = {}
        for k, (kind, v1) in m1.items():
            kind2, v2 = m2[k]
            if kind != kind2:
                raise NotPeriodic(f"meta {k}")
            if kind in ("list", "dict"):
                self.meta[k] = (kind, Series(v1, v2))
            elif kind == "int":
                self.meta[k] = (kind, [v2, v2 - v1])
            elif v1 != v2:
                raise NotPeriodic(f"meta {k}")
            else:
                self.meta[k] = (kind, v2)

    def copy(self) -> "_Graphs":
        """A rule that steps on without moving this one."""
        out = copy.copy(self)
        out.nodes = copy.copy(self.nodes)
        out.meta = {k: (kind, copy.copy(v) if kind != "int" else list(v)) for k, (kind, v) in self.meta.items()}
        return out

    def step(self, m: int = 1) -> None:
        self.nodes.step(m)
        for kind, v in self.meta.values():
            if kind in ("list", "dict"):
                v.step(m)
            elif kind == "int":
                v[0] += m * v[1]

    def graph(self, name: str) -> OpGraph:
        meta = {}
        for k, (kind, v) in self.meta.items():
            if kind == "list":
                meta[k] = [decode(r) for r in v.seq]
            elif kind == "dict":
                meta[k] = dict(decode(r) for r in v.seq)
            elif kind == "int":
                meta[k] = v[0]
            else:
                meta[k] = v
        return _build([decode(r) for r in self.nodes.seq], meta, name)


def extend(small: list[OpGraph], layers: int, name: str, keep: dict | None = None) -> OpGraph:
    """The ``layers``-layer graph from the captures at :data:`SMALL` layers (``small``): the
    rule learnt from the first two, checked on the third. Raises :class:`NotPeriodic`.
    ``keep``: gets ``"rule"``, the checked rule at the second capture's layers, for
    :func:`extend_like`."""
    one, two, three = small
    rule = _Graphs(one, two)
    at_two = (rule.copy(), two.meta)
    rule.step()
    if not same_graph(rule.graph(three.name), three):
        raise NotPeriodic("the rule learnt from the first two captures does not give the third")
    if keep is not None:
        keep["rule"] = at_two
    rule.step(layers - SMALL[2])
    return rule.graph(name)


def extend_like(kept, two: OpGraph, layers: int, name: str) -> OpGraph:
    """The ``layers``-layer graph from one capture at ``SMALL[1]`` layers (``two``) and a rule
    checked on another call of the same function (``kept``, from :func:`extend`): ``two``
    must read as the rule's capture did, string for string (node names, references, input
    labels) with the same ``meta``, and repeat its layers' numbers. Raises :class:`NotPeriodic`."""
    rule, meta = kept
    if not (two.meta == meta and list(map(repr, two.meta.items())) == list(map(repr, meta.items()))):
        raise NotPeriodic("meta differs from the checked rule's")
    recs, ref = _node_records(two), rule.nodes.seq
    if len(recs) != len(ref) or any(a.key[1] != b.key[1] or a.nums != b.nums for a, b in zip(recs, ref)):
        raise NotPeriodic("names differ from the checked rule's")
    for s, n in rule.nodes.runs:
        if any(recs[p].key != recs[p + n].key for p in range(s - n, s)):
            raise NotPeriodic("a layer's numbers differ from the layer before")
    rule = rule.copy()
    rule.nodes.seq = [_Rec(a.key, b.nums, b.d) for a, b in zip(recs, ref)]
    rule.step(layers - SMALL[1])
    return rule.graph(name)
