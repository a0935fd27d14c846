"""What the host spends per top-level torch call inside an eager decoder forward, by op class (issue 34,
docs/eager_token.md §6): a probe ``gpusim calibrate --host-only`` runs every round and keeps in its raw timings
(``decode_host``; the scaled figures in ``fit.inforward``). Not adopted into the profile: docs/eager_token.md §6.

    python3 -m validation.measure.decode_host_probe [--device cuda|cpu] [--rounds 3] [--tiny] [--out FILE.json]

Why: an eager decode token is host-bound (700-1,000 launches), and the recorded traces of one show the classes of
top-level calls costing 3-7x each other inside a forward (a 3-D ``linear`` 3x a ``mul``, SDPA 7x, casts 1.6x, views
0.1-0.25x) where calibrate's tight loops on tiny tensors price them alike. So the probe times the classes where they
run: inside a forward.

What it runs: two synthetic decoder-layer stacks written here (not a scored model), batch 1, one new token, bf16 on
CUDA (fp32 on CPU), a 512-token cache per layer: ``rms`` (Llama/Qwen-style: RMSNorm as HF writes it, rotary
embedding computed once a forward and applied per layer, unbiased -- or, every other layer, biased as Qwen's -- q/k/v
projections on ``[1, 1, H]``, the cache's ``cat``, GQA SDPA at q_len 1, SiLU MLP, residual adds) and ``ln``
(Phi-style: LayerNorm, biased projections, partial rotary, multi-head SDPA, GELU MLP). Each stack is called
``forwards`` times back to back (warm-up first): unclocked (the wall per forward), then under :class:`ClassClock`, a
``TorchFunctionMode`` that times every top-level torch call (:class:`OpClock`, also host_breakdown's clock) and
files it under its class (:func:`call_class`). A class's figure is its calls' mean time per call in one forward, the
median over the forwards. Beside them, tight loops on tiny tensors (loop of 50 against 1, as calibrate times
``eager_op_us``): a tensor-tensor ``mul`` and ``add``, ``torch.add(y, 1.0)`` (calibrate's ``eager_op_us``), and one
op of each class at its tiny calibrate shape, so the in-forward over tight-loop ratio of each class is on record.

Classes (what one top-level call of the class launches): ``pointwise`` (tensor operands only: one elementwise kernel),
``scalar`` (an elementwise op with a Python number as operand, which PyTorch wraps into a tensor on every call),
``cast`` (``to`` a dtype), ``cat``, ``reduction`` (``mean``, ``sum``), ``linear`` / ``linear_bias`` (``F.linear`` of a
3-D input without / with a bias: one GEMM kernel), ``attention`` (SDPA), ``norm`` (``layer_norm``), ``view`` (no kernel:
``view``, ``transpose``, slicing, ``unsqueeze``, ...), ``other`` (rotary's frequency product, ``size`` and the like).
Output: one JSON object: ``env``, ``rounds`` (each: per stack, per class ``{us, calls}``, the unclocked and clocked
walls, the clock's own cost per call; and the tight loops), ``figures`` (per class, the fastest round's: the host
without contention, as ``fastest_rounds`` takes calibrate's figures) -- :func:`probe_figures`.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

CLASSES = ("pointwise", "scalar", "cast", "cat", "reduction", "linear", "linear_bias", "attention", "norm",
           "view", "other")
VIEWS = {"view", "transpose", "reshape", "unsqueeze", "squeeze", "expand", "__getitem__", "permute", "flatten",
         "narrow", "contiguous", "t", "chunk", "split", "view_as"}
CASTS = {"to", "float", "half", "bfloat16", "type_as"}
REDUCTIONS = {"mean", "sum", "amax", "var"}
POINTWISE = {"mul", "add", "sub", "div", "neg", "rsqrt", "pow", "silu", "gelu", "tanh", "exp", "sigmoid", "sin",
             "cos", "__mul__", "__rmul__", "__add__", "__radd__", "__sub__", "__rsub__", "__truediv__",
             "__neg__", "__pow__", "mul_", "add_"}


def call_class(func, args, kwargs) -> str:
    """The class of one top-level torch call (see the module's docstring)."""
    name = getattr(func, "__name__", "")
    if name == "linear":
        bias = args[2] if len(args) > 2 else (kwargs or {}).get("bias")
        return "linear_bias" if bias is not None else "linear"
    if name == "scaled_dot_product_attention":
        return "attention"
    if name == "layer_norm":
        return "norm"
    if name == "cat":
        return "cat"
    if name in CASTS:
        return "cast"
    if name in REDUCTIONS:
        return "reduction"
    if name in VIEWS:
        return "view"
    if name in POINTWISE:
        num = any(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args[1:])
        return "scalar" if num else "pointwise"
    return "other"


class OpClock(TorchFunctionMode):
    """Times every top-level torch call (functions, methods, properties) made while active; :meth:`record` sees each."""

    def __init__(self):
        super().__init__()
        self.depth, self.inside_s, self.calls = 0, 0.0, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.depth:
            return func(*args, **kwargs)
        self.depth += 1
        t = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            dt = time.perf_counter() - t
            self.depth -= 1
            self.inside_s += dt
            self.calls += 1
            self.record(func, args, kwargs, dt)

    def record(self, func, args, kwargs, dt: float) -> None:
        """One top-level call's seconds, after it returned (here: nothing more than the totals)."""


class ClassClock(OpClock):
    """Times every top-level torch call made while active and files it under :func:`call_class`."""

    def __init__(self):
        super().__init__()
        self.us = {c: 0.0 for c in CLASSES}
        self.n = {c: 0 for c in CLASSES}

    def record(self, func, args, kwargs, dt: float) -> None:
        c = call_class(func, args, kwargs)
        self.us[c] += dt * 1e6
        self.n[c] += 1


class RMSNorm(torch.nn.Module):
    def __init__(self, h, dtype, dev):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(h, dtype=dtype, device=dev))
        self.eps = 1e-6

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope(x, cos, sin, rot):
    if rot == x.shape[-1]:
        return (x * cos) + (rotate_half(x) * sin)
    xr, xp = x[..., :rot], x[..., rot:]
    return torch.cat(((xr * cos) + (rotate_half(xr) * sin), xp), dim=-1)


class Layer(torch.nn.Module):
    """One decoder layer at decode shapes: ``kind`` ``rms`` (Llama/Qwen: RMSNorm, GQA, SiLU MLP) or ``ln``
    (Phi: LayerNorm, biased projections, partial rotary, GELU MLP in parallel with attention)."""

    def __init__(self, kind, h, heads, kv, inter, ctx, dtype, dev, qkv_bias=False):
        super().__init__()
        self.kind, self.heads, self.kv, self.d = kind, heads, kv, h // heads
        bias = kind == "ln"
        lin = lambda i, o, b: torch.nn.Linear(i, o, bias=b, dtype=dtype, device=dev)  # noqa: E731
        self.q = lin(h, h, bias or qkv_bias)
        self.k = lin(h, kv * self.d, bias or qkv_bias)
        self.v = lin(h, kv * self.d, bias or qkv_bias)
        self.o = lin(h, h, bias)
        if kind == "rms":
            self.n1, self.n2 = RMSNorm(h, dtype, dev), RMSNorm(h, dtype, dev)
            self.gate, self.up, self.down = lin(h, inter, False), lin(h, inter, False), lin(inter, h, False)
        else:
            self.n1 = torch.nn.LayerNorm(h, dtype=dtype, device=dev)
            self.fc1, self.fc2 = lin(h, inter, True), lin(inter, h, True)
        self.rot = self.d if kind == "rms" else self.d // 2
        self.kc = torch.randn(1, kv, ctx, self.d, dtype=dtype, device=dev)
        self.vc = torch.randn(1, kv, ctx, self.d, dtype=dtype, device=dev)

    def attend(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, -1, self.d).transpose(1, 2)
        k = self.k(x).view(b, s, -1, self.d).transpose(1, 2)
        v = self.v(x).view(b, s, -1, self.d).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q, k = rope(q, cos, sin, self.rot), rope(k, cos, sin, self.rot)
        k = torch.cat([self.kc, k], dim=-2)      # DynamicCache's append (the cache itself is not kept)
        v = torch.cat([self.vc, v], dim=-2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=self.kv != self.heads)
        return self.o(a.transpose(1, 2).reshape(b, s, -1))

    def forward(self, x, cos, sin):
        if self.kind == "rms":
            x = x + self.attend(self.n1(x), cos, sin)
            h = self.n2(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))
        h = self.n1(x)
        return x + self.attend(h, cos, sin) + self.fc2(F.gelu(self.fc1(h), approximate="tanh"))


class Stack(torch.nn.Module):
    """``layers`` decoder layers of one kind, the rotary embedding computed once a forward as HF does."""

    def __init__(self, kind, layers, h, heads, kv, inter, ctx, dtype, dev):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            [Layer(kind, h, heads, kv, inter, ctx, dtype, dev, qkv_bias=kind == "rms" and i % 2 == 1)
             for i in range(layers)])
        rot = self.layers[0].rot
        self.inv_freq = 1.0 / (10000 ** (torch.arange(0, rot, 2, device=dev, dtype=torch.float32) / rot))
        self.norm = RMSNorm(h, dtype, dev) if kind == "rms" else torch.nn.LayerNorm(h, dtype=dtype, device=dev)
        self.pos = torch.tensor([[ctx]], device=dev)

    def forward(self, x):
        inv = self.inv_freq[None, :, None].float().expand(self.pos.shape[0], -1, 1)
        freqs = (inv @ self.pos[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


#: (layers, hidden, heads, kv heads, intermediate, context) of the two stacks: Llama-3.2-1B's and Phi-1.5's widths
#: on the GPU; tiny on the CPU (--tiny), where the probe is only exercised
SIZES = {"rms": (8, 2048, 32, 8, 8192, 512), "ln": (8, 2048, 32, 32, 8192, 512)}
TINY = {"rms": (2, 64, 4, 2, 128, 16), "ln": (2, 64, 4, 4, 128, 16)}


def _sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def time_stack(m, x, dev, forwards: int) -> dict:
    """The stack's unclocked wall per forward and its classes' in-forward cost per call (median over forwards)."""
    with torch.no_grad():
        for _ in range(5):
            m(x)
        _sync(dev)
        walls = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(forwards):
                m(x)
            _sync(dev)
            walls.append((time.perf_counter() - t) / forwards * 1e6)
        per = {c: [] for c in CLASSES}
        calls, clocked = {}, []
        for _ in range(forwards):
            clock = ClassClock()
            t = time.perf_counter()
            with clock:
                m(x)
            clocked.append((time.perf_counter() - t) * 1e6)
            for c in CLASSES:
                if clock.n[c]:
                    per[c].append(clock.us[c] / clock.n[c])
            calls = dict(clock.n, total=clock.calls)
            inside = clock.inside_s * 1e6
        _sync(dev)
    return {"wall_us": min(walls), "wall_median_us": statistics.median(walls),
            "clocked_wall_us": statistics.median(clocked), "clocked_inside_us": inside,
            "classes": {c: {"us": statistics.median(v), "calls": calls[c]} for c, v in per.items() if v},
            "calls": calls["total"]}


def tight_loops(dev: str) -> dict:
    """Wall per op of loops of 50 against 1 on tiny tensors (calibrate's way), one op per class."""
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    y, z = torch.randn(1, device=dev), torch.randn(1, device=dev)
    x3, w, b = torch.randn(1, 1, 64, device=dev, dtype=dt), torch.randn(64, 64, device=dev, dtype=dt), \
        torch.randn(64, device=dev, dtype=dt)
    q = torch.randn(1, 2, 1, 32, device=dev, dtype=dt)
    kk = torch.randn(1, 2, 16, 32, device=dev, dtype=dt)
    ops = {"add_scalar": lambda: torch.add(y, 1.0), "mul_tensor": lambda: torch.mul(y, z),
           "add_tensor": lambda: torch.add(y, z), "cast": lambda: x3.to(torch.float32),
           "cat": lambda: torch.cat([kk, q], dim=-2), "reduction": lambda: x3.mean(-1, keepdim=True),
           "linear": lambda: F.linear(x3, w), "linear_bias": lambda: F.linear(x3, w, b),
           "attention": lambda: F.scaled_dot_product_attention(q, kk, kk),
           "norm": lambda: F.layer_norm(x3, (64,)), "view": lambda: x3.view(1, 1, 2, 32)}

    def wall(f, k):
        for _ in range(3):
            f()
        _sync(dev)
        best = None
        for _ in range(7):
            t = time.perf_counter()
            for _ in range(k):
                f()
            _sync(dev)
            us = (time.perf_counter() - t) * 1e6
            best = us if best is None else min(best, us)
        return best
    with torch.no_grad():
        return {name: (wall(f, 50) - wall(f, 1)) / 49 for name, f in ops.items()}


def probe_round(dev: str = "cuda", tiny: bool = False, forwards: int = 20) -> dict:
    """One round: both stacks timed, then the tight loops."""
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    out = {"stacks": {}}
    for kind, (layers, h, heads, kv, inter, ctx) in (TINY if tiny else SIZES).items():
        torch.manual_seed(0)
        m = Stack(kind, layers, h, heads, kv, inter, ctx, dtype, dev).eval()
        x = torch.randn(1, 1, h, dtype=dtype, device=dev)
        out["stacks"][kind] = dict(time_stack(m, x, dev, forwards), layers=layers, hidden=h)
        del m, x
    out["tight"] = tight_loops(dev)
    return out


def module_calls(kind: str, layers: int) -> int:
    """``nn.Module`` calls in one forward of a stack of ``kind`` with ``layers`` layers (counted on a tiny copy)."""
    dims = TINY[kind]
    m = Stack(kind, layers, *dims[1:], torch.float32, "cpu").eval()
    n = [0]
    hook = torch.nn.modules.module.register_module_forward_pre_hook(lambda *_: n.__setitem__(0, n[0] + 1))
    try:
        with torch.no_grad():
            m(torch.randn(1, 1, dims[1]))
    finally:
        hook.remove()
    return n[0]


def stack_scale(stack: dict, kind: str, law: tuple[float, float] | None) -> float:
    """The clock's correction for one stack: clocked calls run slower than unclocked ones (the mode's Python
    between them; on the H200 leases the calls' clocked sum alone exceeds the unclocked forward), so each class's
    clocked figure is scaled by (the unclocked wall less the model's Python at the host's law, ``law`` =
    (``python_module_call_us``, ``python_torch_call_us``)) over the clocked calls' sum. None: 1 (raw)."""
    if law is None:
        return 1.0
    py = module_calls(kind, stack["layers"]) * law[0] + stack["calls"] * law[1]
    return max(stack["wall_us"] - py, 0.0) / stack["clocked_inside_us"]


def probe_figures(rounds: list[dict], law: tuple[float, float] | None = None) -> dict:
    """Per class, the in-forward µs per call pooled over the stacks (weighted by their calls; each stack's figures
    times :func:`stack_scale` where ``law`` is given), the fastest round's; and each round's, and the scales, so the
    figures' spread over rounds and stacks is on record."""
    per_round, scales = [], []
    for r in rounds:
        sc = {k: stack_scale(s, k, law) for k, s in r["stacks"].items()}
        fig = {}
        for c in CLASSES:
            pts = [(s["classes"][c]["us"] * sc[k], s["classes"][c]["calls"]) for k, s in r["stacks"].items()
                   if c in s["classes"]]
            if pts:
                fig[c] = sum(u * n for u, n in pts) / sum(n for _, n in pts)
        per_round.append(fig)
        scales.append(sc)
    return {"fastest": {c: min(f[c] for f in per_round if c in f) for c in per_round[0]},
            "rounds": per_round, "scales": scales}


#: the provenance line of each figure (calibrate's COMMENTS)
COMMENTS = {
    f"inforward_{c}_us": "two synthetic decoder-layer stacks (8 Llama-style and 8 Phi-style layers of width 2048, "
    "batch 1, one new token over a 512-token cache, bf16), every top-level torch call clocked "
    f"(validation/measure/decode_host_probe.py): mean µs per {what} call in one forward, median over 20 forwards, "
    "each stack's scaled by its unclocked wall less the model's Python at this host's law over its clocked calls' sum "
    "(stack_scale), pooled over the stacks, the fastest round's"
    for c, what in (("pointwise", "elementwise (tensor operands only)"), ("scalar", "elementwise-with-a-Python-number"),
                    ("cast", "dtype cast"), ("cat", "cat"), ("reduction", "mean/sum"),
                    ("linear", "3-D F.linear without bias"), ("linear_bias", "3-D F.linear with bias"),
                    ("attention", "SDPA (q_len 1)"), ("norm", "layer_norm"),
                    ("view", "view (view, transpose, slice, unsqueeze, reshape)"))}


#: the name of each class's figure in calibrate's raw timings (fit.inforward)
FIELD_OF = {c: f"inforward_{c}_us" for c in CLASSES if c not in ("other",)}


def host_figures(round_: dict, law: tuple[float, float] | None = None) -> dict:
    """The host profile's ``inforward_*_us`` figures from one probe round (calibrate's rounds merged by
    ``fastest_rounds`` first: each leaf the fastest round's), scaled to the unclocked walls by ``law``
    (:func:`stack_scale`)."""
    fig = probe_figures([round_], law)["fastest"]
    return {FIELD_OF[c]: float(v) for c, v in fig.items() if c in FIELD_OF}


def inforward_figures(raw_host: dict, host) -> dict:
    """calibrate's ``inforward_*_us`` from its merged raw timings (``decode_host``) and the host profile it fitted
    (its Python law scales the clocked figures, :func:`stack_scale`); {} where the probe did not run."""
    r = raw_host.get("decode_host")
    if not r or not r.get("stacks") or host.python_torch_call_us is None:
        return {}
    return host_figures(r, (host.python_module_call_us or 0.0, host.python_torch_call_us))


def decode_host_probe(dev: str = "cuda", rounds: int = 1, tiny: bool = False) -> dict:
    """``rounds`` rounds of the probe, the raw timings and :func:`probe_figures`."""
    rs = [probe_round(dev, tiny) for _ in range(max(1, rounds))]
    return {"rounds": rs, "figures": probe_figures(rs)}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    dev = argv[argv.index("--device") + 1] if "--device" in argv else ("cuda" if torch.cuda.is_available() else "cpu")
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 3
    out = argv[argv.index("--out") + 1] if "--out" in argv else None
    res = decode_host_probe(dev, rounds, tiny="--tiny" in argv or dev == "cpu")
    res["env"] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
                  "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    text = json.dumps(res, indent=1)
    if out:
        with open(out, "w") as f:
            f.write(text)
    for kind, s in res["rounds"][0]["stacks"].items():
        print(kind, f"wall {s['wall_us']:.0f} us, clocked {s['clocked_wall_us']:.0f} (inside {s['clocked_inside_us']:.0f}),"
              f" {s['calls']} calls:", {c: (round(v["us"], 2), v["calls"]) for c, v in s["classes"].items()})
    print("tight", {k: round(v, 2) for k, v in res["rounds"][0]["tight"].items()})
    print("figures", {k: round(v, 2) for k, v in res["figures"]["fastest"].items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
