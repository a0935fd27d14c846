"""The fused graph: Graphviz DOT (``--dot F.dot``, and ``F.svg`` when Graphviz's ``dot``
is installed), and a hand-drawn kernel-level SVG for the report when it is not.

DOT: ops as nodes, inputs as small boxes, each fused kernel a cluster coloured by its
bound, edges labelled with the bytes they carry (dashed when fusion keeps them on chip).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import networkx as nx

from gpusim.graph.opgraph import group_io
from gpusim.util.fmt import fmt_bytes, fmt_shape, fmt_us
from gpusim.graph.opgraph import quotient
from gpusim.graph.ops import packet_name
from gpusim.report.viz.common import (BOUND_COLOURS, BOUND_TINTS, INK, MUTED, arrow_marker, check_target, esc,
                     kernel_tip, ops_text, short, svg_open, text_w, write_atomic)

# drawing hundreds of boxes inline makes a page nobody can read; the DOT file has them all
GRAPH_SVG_MAX_KERNELS = 120
DOT_TIMEOUT_S = 60


def _q(s) -> str:
    """A DOT double-quoted ID (node names contain ':' and '.')."""
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def _qlabel(*lines: str) -> str:
    """A quoted DOT label of several lines (``\\n`` is DOT's centred line break)."""
    esc = [str(x).replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") for x in lines]
    return '"' + "\\n".join(esc) + '"'


def _graph_and_kernels(pred=None, result=None):
    if result is not None:
        return result.graph, result.fused, result
    if pred is not None:
        return pred.graph, pred, None
    raise ValueError("give a Prediction (pred=) or a SearchResult (result=)")


def dot_document(pred=None, result=None, title: bool = True) -> str:
    """Graphviz DOT of the graph: compute nodes with name and op, inputs as small boxes,
    every kernel of more than one op as a ``cluster_N`` coloured by its bound (single-op
    kernels are nodes filled with their bound's colour), edges labelled with bytes.
    ``title=False`` leaves out the heading and legend (the report has its own)."""
    graph, p, res = _graph_and_kernels(pred, result)
    g, df = graph.g, graph.dataflow
    owner = {op: i for i, k in enumerate(p.kernels) for op in k.ops}
    heading = (f"{graph.name} on {p.spec.display_name}, {p.mode}: {len(p.kernels)} kernels, "
               f"{fmt_us(p.device_us)} device, {fmt_us(p.end_to_end_us)} end to end")
    fused = any(len(k.ops) > 1 for k in p.kernels)
    legend = ("colour = what bounds the kernel: memory blue, compute orange, latency purple"
              + ("; a box around ops = one fused kernel; dashed edges stay on chip" if fused else
                 "; one kernel per op"))
    o = [f"digraph {_q(graph.name)} {{",
         f'  graph [rankdir=TB, fontname="Helvetica", fontsize=13, labelloc=t, '
         f'label={_qlabel(heading, legend) if title else _qlabel("")}, nodesep=0.25, '
         f'ranksep=0.4, bgcolor="white"];',
         '  node [fontname="Helvetica", fontsize=10, shape=box, style="rounded,filled", '
         f'fillcolor="white", color="{MUTED}", margin="0.12,0.05"];',
         f'  edge [fontname="Helvetica", fontsize=8.5, color="#7a828c", fontcolor="{MUTED}", '
         'arrowsize=0.6];']
    for n in df.nodes:
        if n not in owner and g.nodes[n]["kind"] == "input":
            a = g.nodes[n]
            label = _qlabel(n, f"{fmt_shape(a.get('shape'))} {a.get('dtype', '')}".strip())
            o.append(f'  {_q(n)} [shape=box, style=filled, fillcolor="#f1f3f5", color="#b8bec6", '
                     f'fontsize=8, height=0.2, margin="0.06,0.02", label={label}];')
    cluster = 0
    for i, k in enumerate(p.kernels):
        colour, tint = BOUND_COLOURS.get(k.bound, MUTED), BOUND_TINTS.get(k.bound, "#fff")
        if len(k.ops) > 1:
            label = _qlabel(k.name, f"{fmt_us(k.us)} · {k.bound}-bound",
                            f"{fmt_bytes(k.bytes_read)} in → {fmt_bytes(k.bytes_written)} out")
            o.append(f"  subgraph cluster_{cluster} {{")
            o.append(f'    graph [style="rounded,filled", fillcolor="{tint}", color="{colour}", '
                     f'penwidth=1.6, fontsize=10, fontcolor="{INK}", label={label}];')
            for op in k.ops:
                o.append(f"    {_dot_node(g, op, None)}")
            o.append("  }")
            cluster += 1
        else:
            o.append(f"  {_dot_node(g, k.ops[0], k)}")
    for u, v, data in df.edges(data=True):
        b = data.get("bytes", 0)
        inside = u in owner and owner[u] == owner.get(v)
        attrs = [f"label={_qlabel(fmt_bytes(b))}"]
        if inside:
            colour = BOUND_COLOURS.get(p.kernels[owner[u]].bound, MUTED)
            attrs += ["style=dashed", f'color="{colour}"']
        o.append(f"  {_q(u)} -> {_q(v)} [{', '.join(attrs)}];")
    if res is not None and res.partition.folded:
        o.append(f"  // batch norms folded into their convolution: {', '.join(res.partition.folded)}")
    o.append("}")
    return "\n".join(o) + "\n"


def _dot_node(g, n: str, k) -> str:
    """A compute node; ``k`` (a single-op kernel) adds its time and bound's colour."""
    a = g.nodes[n]
    op = packet_name(a["op"])
    lines = [n, f"{op} {fmt_shape(a.get('shape'))}" if op != n else fmt_shape(a.get("shape"))]
    attrs = []
    if k is not None:
        lines.append(f"{fmt_us(k.us)} · {k.bound}")
        attrs += [f'fillcolor="{BOUND_TINTS.get(k.bound, "#fff")}"',
                  f'color="{BOUND_COLOURS.get(k.bound, MUTED)}"']
    if a.get("is_output"):
        attrs.append("peripheries=2")
    if a.get("unmodelled"):
        attrs.append('style="rounded,filled,dashed"')
    return f"{_q(n)} [label={_qlabel(*lines)}{', ' if attrs else ''}{', '.join(attrs)}];"


def _svg_path_for(path: str) -> str | None:
    svg = os.path.splitext(path)[0] + ".svg"
    return None if os.path.abspath(svg) == os.path.abspath(path) else svg


def render_dot(dot_text: str) -> str | None:
    """SVG text rendered by Graphviz's ``dot``, or None when it is not installed/fails."""
    exe = shutil.which("dot")
    if not exe:
        return None
    try:
        r = subprocess.run([exe, "-Tsvg"], input=dot_text.encode("utf-8"), capture_output=True,
                           timeout=DOT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"gpusim: warning: Graphviz dot failed ({e}); no SVG drawn", file=sys.stderr)
        return None
    if r.returncode != 0:
        msg = r.stderr.decode("utf-8", "replace").strip().splitlines()
        print(f"gpusim: warning: Graphviz dot failed ({msg[0] if msg else r.returncode}); "
              "no SVG drawn", file=sys.stderr)
        return None
    return r.stdout.decode("utf-8", "replace")


def dot_output(pred=None, result=None, path: str = "graph.dot"):
    """Write :func:`dot_document` to ``path``, and ``path`` with .svg when Graphviz is
    installed; returns the DOT path."""
    svg_path = _svg_path_for(path) if shutil.which("dot") else None
    check_target(path)
    if svg_path:
        check_target(svg_path)
    text = dot_document(pred, result)
    write_atomic(path, text)
    if svg_path:
        svg = render_dot(text)
        if svg is not None:
            write_atomic(svg_path, svg)
            print(f"wrote {svg_path}", file=sys.stderr)
    return path


def kernel_graph(graph, kernels) -> tuple[nx.DiGraph, list[float]]:
    """``(q, from_inputs)``: the kernels' quotient graph (:func:`gpusim.graph.opgraph.quotient`,
    node ``i`` is ``kernels[i]``), each edge ``(i, j)`` carrying ``bytes``, what kernel
    ``j`` reads of kernel ``i``'s tensors, and each kernel's bytes read from graph inputs
    (a fused kernel loads a tensor once: :func:`gpusim.graph.opgraph.group_io`)."""
    q = quotient(graph, [k.ops for k in kernels])
    owner = {op: i for i, k in enumerate(kernels) for op in k.ops}
    from_inputs = [0.0] * len(kernels)
    for j, k in enumerate(kernels):
        reads, _ = group_io(graph, k.ops)
        for prod, b in reads.items():
            i = owner.get(prod)
            if i is None:
                from_inputs[j] += b
            elif i != j:
                if not q.has_edge(i, j):    # read through a view the quotient does not hold
                    q.add_edge(i, j)
                q.edges[i, j]["bytes"] = q.edges[i, j].get("bytes", 0.0) + b
    return q, from_inputs


def graph_svg(pred=None, result=None, uid: str = "kg") -> str:
    """The kernel graph as a layered drawing: one box per kernel (its ops, time, bound
    and bytes read from graph inputs), arrows labelled with the bytes passed between
    kernels. A stand-in for Graphviz that needs nothing installed."""
    graph, p, _ = _graph_and_kernels(pred, result)
    ks = p.kernels
    if len(ks) > GRAPH_SVG_MAX_KERNELS:
        return (f'<p class="note">{len(ks)} kernels: too many to draw inline; write the '
                f'graph with <code>--dot</code> and open it in Graphviz.</p>')
    q, from_inputs = kernel_graph(graph, ks)
    edges = {(i, j): b for i, j, b in q.edges(data="bytes", default=0.0)}
    layer = {}
    for i in nx.topological_sort(q):
        layer[i] = max((layer[u] + 1 for u in q.predecessors(i)), default=0)
    n_layers = max(layer.values(), default=-1) + 1
    rows = [[i for i in range(len(ks)) if layer[i] == r] for r in range(n_layers)]
    lines = {i: _box_lines(graph, ks[i], from_inputs[i]) for i in range(len(ks))}
    bw = {i: min(320.0, max(text_w(t, 11) * (1.08 if n == 0 else 1.0)
                            for n, t in enumerate(lines[i])) + 24) for i in lines}
    bh, vgap, hgap, margin = 12 + 14 * 4, 44, 26, 24
    widest = max((sum(bw[i] for i in r) + hgap * (len(r) - 1) for r in rows), default=200)
    width = max(640.0, widest + 2 * margin + 120)   # room on the right for skip edges
    cx: dict = {}
    for r, row in enumerate(rows):
        # order by the mean position of predecessors to keep edges short and uncrossed
        row.sort(key=lambda i: (sum(cx[u] for u in q.predecessors(i)) /
                                max(1, q.in_degree(i)) if q.in_degree(i) else 0, i))
        total = sum(bw[i] for i in row) + hgap * (len(row) - 1)
        x = (width - 120) / 2 - total / 2
        for i in row:
            cx[i] = x + bw[i] / 2
            x += bw[i] + hgap
    ytop = {i: margin + layer[i] * (bh + vgap) for i in cx}
    height = margin * 2 + n_layers * (bh + vgap) - vgap
    arrows, right_edge = [], max((cx[i] + bw[i] / 2 for i in cx), default=0.0)
    lanes: list[int] = []          # per lane: the last layer a skip edge in it reaches
    for (i, j), b in sorted(edges.items(), key=lambda e: (layer[e[0][0]], layer[e[0][1]], e[0])):
        if layer[j] - layer[i] == 1:
            x1, y1, x2, y2 = cx[i], ytop[i] + bh, cx[j], ytop[j]
            path = (f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + vgap / 2:.1f} {x2:.1f},"
                    f"{y2 - vgap / 2:.1f} {x2:.1f},{y2 - 1:.1f}")
            lx, ly = (x1 + x2) / 2 + 6, (y1 + y2) / 2 + 4
        else:
            # around the layers in between, on the right; edges whose spans overlap
            # take separate lanes so that they stay apart
            lane = next((n for n, end in enumerate(lanes) if end <= layer[i]), len(lanes))
            if lane == len(lanes):
                lanes.append(0)
            lanes[lane] = layer[j]
            mids = [k for k in cx if layer[i] <= layer[k] <= layer[j]]
            bx = max(cx[k] + bw[k] / 2 for k in mids) + 34 + 22 * lane
            right_edge = max(right_edge, bx + 60)
            x1, y1 = cx[i] + bw[i] / 2, ytop[i] + bh / 2
            x2, y2 = cx[j] + bw[j] / 2 + 1, ytop[j] + bh / 2
            path = f"M{x1:.1f},{y1:.1f} C{bx:.1f},{y1:.1f} {bx:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
            lx, ly = (x1 + 6 * bx + x2) / 8 + 4, (y1 + y2) / 2 + 4
        arrows.append(f'<path d="{path}" fill="none" stroke="#7a828c" stroke-width="1.2" '
                      f'marker-end="url(#{uid}-arrow)"><title>{esc(ks[i].name)} → '
                      f'{esc(ks[j].name)}: {fmt_bytes(b)}</title></path>')
        arrows.append(f'<text x="{lx:.1f}" y="{ly:.1f}" font-size="10" fill="{MUTED}" '
                      f'stroke="#fff" stroke-width="3" paint-order="stroke">{fmt_bytes(b)}</text>')
    width = max(width, right_edge + margin)
    o = [svg_open(width, height, f"Kernel graph of {graph.name}"),
         f'<defs>{arrow_marker(uid + "-arrow", "#7a828c")}</defs>',
         f'<rect width="{width:.0f}" height="{height:.0f}" fill="#fff"/>'] + arrows
    for i, k in enumerate(ks):
        x, y, w = cx[i] - bw[i] / 2, ytop[i], bw[i]
        colour, tint = BOUND_COLOURS.get(k.bound, MUTED), BOUND_TINTS.get(k.bound, "#fff")
        sw = 2.2 if len(k.ops) > 1 else 1.2
        o.append(f'<g><title>{esc(kernel_tip(k, "", graph))}</title><rect x="{x:.1f}" y="{y:.1f}" '
                 f'width="{w:.1f}" height="{bh}" rx="7" fill="{tint}" stroke="{colour}" '
                 f'stroke-width="{sw}"/>')
        for li, t in enumerate(lines[i]):
            weight = ' font-weight="600"' if li == 0 else ""
            fill = INK if li < 2 else MUTED
            fit = int((w - 14) / (text_w("x") * (1.08 if li == 0 else 1.0)))
            o.append(f'<text x="{cx[i]:.1f}" y="{y + 19 + 14 * li:.1f}" text-anchor="middle" '
                     f'fill="{fill}"{weight}>{esc(short(t, fit))}</text>')
        o.append("</g>")
    o.append("</svg>")
    return "\n".join(o)


def _box_lines(graph, k, inputs_b: float) -> list[str]:
    ops = ops_text(k, graph)
    first = k.name if len(k.ops) == 1 else f"{k.name}  (fused ×{len(k.ops)})"
    extra = []
    if inputs_b:
        extra.append(f"reads {fmt_bytes(inputs_b)} of inputs")
    if any(graph.g.nodes[n].get("is_output") for n in k.ops):
        extra.append("graph output")
    return [first, ops, f"{fmt_us(k.us)} · {k.bound}-bound · {fmt_shape(k.shape)}",
            " · ".join(extra) or "\u00a0"]
