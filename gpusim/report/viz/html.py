"""The self-contained HTML report (``gpusim report``): one page with inline CSS and SVG,
no external assets and no matplotlib: summary cards, timeline, top kernels, roofline,
fused graph and sortable kernel tables."""

from __future__ import annotations

import math

from gpusim.util.fmt import fmt_bytes, fmt_shape, fmt_si, fmt_us
from gpusim.report.viz.common import BOUND_COLOURS, BOUNDS, MUTED, esc, ops_text, runs_of
from gpusim.report.viz.graph import dot_document, graph_svg, render_dot
from gpusim.sim.memory import fit_line
from gpusim.report.rollup import DEFAULT_DEPTH
from gpusim.report.viz.roofline_svg import roofline_svg
from gpusim.report.viz.timeline import timeline_svg

CSS = """
:root { --ink:#1f2328; --muted:#656d76; --line:#e4e7eb; --bg:#f6f7f9; --mem:#2f6fd0;
        --cmp:#e8743b; --lat:#8e6cc9; --good:#1a7f37; --bad:#c93c37; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
       font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif; }
main { max-width:1240px; margin:0 auto; padding:24px 28px 48px; }
header h1 { margin:0; font-size:24px; font-weight:650; letter-spacing:-0.01em; }
header h1 span { color:var(--muted); font-weight:450; }
header p { margin:4px 0 0; color:var(--muted); }
section { background:#fff; border:1px solid var(--line); border-radius:10px; padding:18px 20px;
          margin-top:18px; }
section h2 { margin:0 0 4px; font-size:16px; font-weight:650; }
p.note, .note { color:var(--muted); margin:2px 0 12px; font-size:13px; }
.cards { display:grid; grid-template-columns:1fr 1fr 1fr; gap:14px; background:none; border:0;
         padding:0; }
.card { background:#fff; border:1px solid var(--line); border-radius:10px; padding:14px 18px; }
.card h3 { margin:0 0 6px; font-size:13px; font-weight:600; color:var(--muted);
           text-transform:uppercase; letter-spacing:.04em; }
.big { font-size:28px; font-weight:650; font-variant-numeric:tabular-nums; }
.big small { font-size:14px; color:var(--muted); font-weight:450; }
.kv { display:grid; grid-template-columns:auto 1fr; gap:1px 12px; margin-top:6px;
      font-variant-numeric:tabular-nums; }
.kv dt { color:var(--muted); } .kv dd { margin:0; text-align:right; }
.verdict { display:inline-block; margin-top:8px; padding:3px 10px; border-radius:999px;
           font-weight:600; font-size:13px; }
.verdict.good { background:#dafbe1; color:var(--good); }
.verdict.bad { background:#ffebe9; color:var(--bad); }
.verdict.even { background:#eaeef2; color:var(--muted); }
.mix { display:flex; height:8px; border-radius:4px; overflow:hidden; margin-top:10px;
       background:var(--line); }
.mix span { display:block; height:100%; }
.legend { color:var(--muted); font-size:12px; margin-top:4px; }
.dot { display:inline-block; width:8px; height:8px; border-radius:50%; margin:0 4px 0 9px; }
.bars { display:grid; grid-template-columns:minmax(180px,300px) 1fr 150px; gap:5px 12px;
        align-items:center; font-variant-numeric:tabular-nums; }
.bars .name { white-space:nowrap; overflow:hidden; text-overflow:ellipsis; }
.bars .track { background:#f0f2f4; border-radius:4px; height:16px; }
.bars .fill { height:16px; border-radius:4px; }
.bars .val { text-align:right; color:var(--muted); }
.fig { overflow-x:auto; }
.pic { text-align:center; }
.pic svg { max-width:100%; height:auto; }
table { border-collapse:collapse; width:100%; font-size:13px; font-variant-numeric:tabular-nums; }
th, td { padding:5px 7px; border-bottom:1px solid var(--line); text-align:right;
         white-space:nowrap; }
th { position:sticky; top:0; background:#fafbfc; font-weight:600; cursor:pointer;
     user-select:none; }
th[data-dir="asc"]::after { content:" ▲"; font-size:9px; }
th[data-dir="desc"]::after { content:" ▼"; font-size:9px; }
td.l, th.l { text-align:left; }
td.name { white-space:normal; max-width:260px; overflow-wrap:anywhere; }
td.ops { white-space:normal; max-width:300px; color:var(--muted); }
tbody tr:nth-child(even) { background:#fbfcfd; } tbody tr:hover { background:#f2f6fc; }
.badge { display:inline-block; padding:1px 8px; border-radius:999px; font-size:12px;
         font-weight:600; }
.badge.memory { background:#dfe9fb; color:#1d4f9c; }
.badge.compute { background:#fde6d8; color:#a44b17; }
.badge.latency { background:#ede5f8; color:#5e3f96; }
details summary { cursor:pointer; color:var(--muted); margin:10px 0 6px; }
pre { background:#f6f8fa; border:1px solid var(--line); border-radius:6px; padding:10px;
      overflow:auto; max-height:360px; font-size:12px; }
ul.notes { margin:6px 0 0; padding-left:20px; }
footer { color:var(--muted); font-size:12px; margin-top:18px; }
@media (max-width: 900px) { .cards { grid-template-columns:1fr; } }
"""

JS = """
(function () {
  function key(cell) {
    var v = cell.getAttribute("data-v");
    return v === null ? cell.textContent.trim().toLowerCase() : parseFloat(v);
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.querySelectorAll("th");
    heads.forEach(function (th, col) {
      th.addEventListener("click", function () {
        var asc = th.getAttribute("data-dir") !== "asc";
        heads.forEach(function (h) { h.removeAttribute("data-dir"); });
        th.setAttribute("data-dir", asc ? "asc" : "desc");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a.cells[col]), y = key(b.cells[col]);
          return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  document.body.setAttribute("data-ok", "1");
})();
"""


def _page(title: str, body: str, script: bool = False) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body><main>\n{body}\n"
            f"</main>{'<script>' + JS + '</script>' if script else ''}</body></html>\n")


def _bound_mix(p) -> str:
    total = p.device_us or 1.0
    spans = []
    for b in BOUNDS:
        t = sum(k.us for k in p.kernels if k.bound == b)
        if t:
            spans.append(f'<span style="width:{t / total * 100:.2f}%;background:'
                         f'{BOUND_COLOURS[b]}" title="{b}-bound: {fmt_us(t)} '
                         f'({t / total:.0%})"></span>')
    legend = "".join(
        f'<span class="dot" style="background:{BOUND_COLOURS[b]}"></span>{b} '
        f'{sum(k.us for k in p.kernels if k.bound == b) / total:.0%}'
        for b in BOUNDS if any(k.bound == b for k in p.kernels))
    return (f'<div class="mix">{"".join(spans)}</div>'
            f'<div class="legend">device time by bound:{legend}</div>')


def _run_card(title: str, p) -> str:
    rows = [("device time", fmt_us(p.device_us)), ("host time", f"{fmt_us(p.timeline.host_us)}/call"),
            ("GPU idle (call 1)", fmt_us(p.idle_us)), ("kernels", str(len(p.kernels))),
            ("bytes moved", fmt_bytes(p.bytes)), ("FLOPs", fmt_si(p.flops, "FLOP"))]
    kv = "".join(f"<dt>{esc(a)}</dt><dd>{esc(b)}</dd>" for a, b in rows)
    return (f'<div class="card"><h3>{esc(title)}</h3><div class="big">'
            f'{esc(fmt_us(p.end_to_end_us))} <small>end to end, per call</small></div>'
            f'<dl class="kv">{kv}</dl>{_bound_mix(p)}</div>')


def _verdict(res) -> tuple[str, str]:
    s, u, f = res.speedup_end_to_end, res.unfused, res.fused
    if s > 1.005:
        return "good", f"fusion helps: {s:.2f}× faster end to end"
    if s < 0.995:
        why = (" — the host overhead of the fused call outweighs the bytes saved"
               if f.device_us < u.device_us else "")
        return "bad", f"fusion hurts: {1 / s:.2f}× slower end to end{why}"
    return "even", "fusion makes no difference end to end"


def _speedup_card(res) -> str:
    cls, text = _verdict(res)
    u, f = res.unfused, res.fused
    saved = u.bytes - f.bytes
    rows = [("device", f"{res.speedup_device:.2f}×"),
            ("kernels", f"{len(u.kernels)} → {len(f.kernels)}"),
            ("bytes moved", f"{fmt_bytes(u.bytes)} → {fmt_bytes(f.bytes)}"),
            ("bytes saved", f"{fmt_bytes(saved)} ({saved / u.bytes:.0%})" if u.bytes else "-"),
            ("search", f"{res.algo}, {res.seconds:.2f} s")]
    kv = "".join(f"<dt>{esc(a)}</dt><dd>{esc(b)}</dd>" for a, b in rows)
    return (f'<div class="card"><h3>Speed-up</h3><div class="big">{res.speedup_end_to_end:.2f}× '
            f'<small>end to end</small></div><dl class="kv">{kv}</dl>'
            f'<span class="verdict {cls}">{esc(text)}</span></div>')


def _top_kernels(p, n: int = 10) -> str:
    top = sorted(p.kernels, key=lambda k: -k.us)[:n]
    total = p.device_us or 1.0
    mx = top[0].us if top else 1.0
    rows = []
    for k in top:
        rows.append(f'<div class="name" title="{esc(ops_text(k, p.graph))}">{esc(k.name)}</div>'
                    f'<div class="track"><div class="fill" style="width:{k.us / mx * 100:.1f}%;'
                    f'background:{BOUND_COLOURS.get(k.bound, MUTED)}"></div></div>'
                    f'<div class="val">{k.us:,.1f} µs · {k.us / total:.0%}</div>')
    return f'<div class="bars">{"".join(rows)}</div>'


def kernel_table(p, table_id: str) -> str:
    """The per-kernel table (sortable in the browser by clicking a heading)."""
    head = [("#", ""), ("kernel", "l"), ("ops", "l"), ("shape", "l"), ("unit", "l"),
            ("FLOPs", ""), ("bytes in", ""), ("bytes out", ""), ("FLOP/B", ""),
            ("bound", "l"), ("µs", ""), ("% device", "")]
    total = p.device_us or 1.0
    th = "".join(f'<th class="{c}">{esc(h)}</th>' for h, c in head)
    rows = []
    for i, k in enumerate(p.kernels):
        ai = k.intensity
        ai_txt, ai_v = ("∞", 1e300) if math.isinf(ai) else (f"{ai:.3g}", ai)
        cells = [(str(i), i, ""), (k.name, None, "l name"), (ops_text(k, p.graph), None, "l ops"),
                 (fmt_shape(k.shape), None, "l"), (k.unit, None, "l"),
                 (fmt_si(k.flops), k.flops, ""), (fmt_bytes(k.bytes_read), k.bytes_read, ""),
                 (fmt_bytes(k.bytes_written), k.bytes_written, ""), (ai_txt, ai_v, ""),
                 (None, None, "l"), (f"{k.us:,.2f}", k.us, ""), (f"{k.us / total:.1%}", k.us, "")]
        tds = []
        for text, v, cls in cells:
            dv = f' data-v="{v:.6g}"' if v is not None else ""
            if text is None:
                text_html = f'<span class="badge {esc(k.bound)}">{esc(k.bound)}</span>'
            else:
                text_html = esc(text)
            tds.append(f'<td class="{cls}"{dv}>{text_html}</td>')
        rows.append("<tr>" + "".join(tds) + "</tr>")
    return (f'<div class="fig"><table class="sortable" id="{esc(table_id)}"><thead><tr>{th}'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')


def module_section(res, depth: int) -> str:
    """The per-module roll-up (:func:`gpusim.report.rollup.rollup`) of the eager and the fused
    run side by side; empty when the graph carries no module paths (a captured function)."""
    from gpusim.report.rollup import ROOT, rollup
    u, f = res.unfused, res.fused
    if not any(f.graph.g.nodes[n].get("module") for n in f.graph.compute_nodes):
        return ""
    eager = {r.path: r for r in rollup(u, depth)}
    fused = {r.path: r for r in rollup(f, depth)}
    head = [("module", "l"), ("params", ""), ("FLOPs", ""), ("eager µs", ""),
            ("fused µs", ""), ("speed-up", ""), ("% fused", ""), ("act. peak", "")]
    th = "".join(f'<th class="{c}">{esc(h)}</th>' for h, c in head)
    rows = []
    for path in list(fused) + [p for p in eager if p not in fused]:
        e, x = eager.get(path), fused.get(path)
        us_e, us_f = (e.us if e else 0.0), (x.us if x else 0.0)
        ref = x or e
        sp = f"{us_e / us_f:.2f}×" if us_e and us_f else "-"
        cells = [(path or ROOT, None, "l name"), (fmt_si(ref.params) if ref.params else "-",
                                                 ref.params, ""),
                 (fmt_si(ref.flops), ref.flops, ""), (f"{us_e:,.2f}", us_e, ""),
                 (f"{us_f:,.2f}", us_f, ""), (sp, us_e / us_f if us_e and us_f else 0, ""),
                 (f"{x.share:.1%}" if x else "-", x.share if x else 0, ""),
                 (fmt_bytes(x.peak_bytes) if x and x.kernels else "-",
                  x.peak_bytes if x else 0, "")]
        rows.append("<tr>" + "".join(
            f'<td class="{c}"{f" data-v={chr(34)}{v:.6g}{chr(34)}" if v is not None else ""}>'
            f'{esc(t)}</td>' for t, v, c in cells) + "</tr>")
    return ('<section id="modules"><h2>Modules</h2><p class="note">Predicted time per '
            f'nn.Module to depth {depth}, eager and fused; a fused kernel counts in the deepest '
            'module holding all its ops, so fusion across a boundary moves time to the parent. '
            'Each column of times sums to its run\'s kernel total. Act. peak: activations '
            'allocated at the peak while the module runs (fused run).</p>'
            f'<div class="fig"><table class="sortable" id="modules-table"><thead><tr>{th}</tr>'
            f'</thead><tbody>{"".join(rows)}</tbody></table></div></section>')


def _strip_xml_prolog(svg: str) -> str:
    i = svg.find("<svg")
    return svg[i:] if i >= 0 else svg


def _graph_section(res) -> str:
    dot = dot_document(result=res)
    svg = render_dot(dot_document(result=res, title=False)) if len(res.fused.kernels) <= 400 else None
    if svg is not None:
        pic, how = _strip_xml_prolog(svg), ("Drawn by Graphviz: ops as nodes, each fused kernel a "
                                            "cluster coloured by its bound, edges labelled with bytes; "
                                            "dashed edges stay on chip")
    else:
        pic, how = graph_svg(result=res), ("One box per kernel (fused groups have a thick border), "
                                           "coloured by its bound; arrows carry the bytes one "
                                           "kernel writes and the next reads. Install Graphviz for "
                                           "the op-level drawing.")
    n = len(res.fused.kernels)
    if n > 30:
        # a tall drawing would bury the tables below it
        pic = f"<details><summary>Show the graph ({n} kernels)</summary>{pic}</details>"
    return (f'<section id="graph"><h2>Fused graph</h2><p class="note">{esc(how)}</p>'
            f'<div class="fig pic">{pic}</div><details><summary>Graphviz DOT source</summary>'
            f'<pre>{esc(dot)}</pre></details></section>')


def report_html(result, info: dict | None = None) -> str:
    """The HTML report of a :class:`~gpusim.fusion.search.SearchResult` as one string.

    ``info`` adds facts to the header: ``model``, ``dtype``, ``sizes`` (a dict); ``depth``
    sets the module levels of the per-module table (default 3).
    """
    info = info or {}
    u, f = result.unfused, result.fused
    spec = f.spec
    model = info.get("model") or result.graph.name
    title = f"gpusim report: {model} on {spec.display_name}"
    facts = [f"fused run in {f.mode} mode", f"search {result.algo}"]
    if result.optimal_over:
        facts.append(("optimal" if result.optimal else "best found") + f" over {result.optimal_over}")
    if info.get("dtype"):
        facts.append(str(info["dtype"]))
    if info.get("sizes"):
        facts.append(" ".join(f"{k}={v}" for k, v in info["sizes"].items()))
    facts.append(f"spec {spec.name} ({spec.source})")
    notes = list(result.notes)
    if f.unmodelled_ops:
        notes.append(f"{len(f.unmodelled_ops)} op(s) outside the cost model, estimated as "
                     "memory-bound copies: " + ", ".join(f.unmodelled_ops[:8]))
    body = [
        f'<header><h1>{esc(model)} <span>on {esc(spec.display_name)}</span></h1>'
        f'<p>{esc(" · ".join(facts))}</p></header>',
        f'<section class="cards" id="summary">{_run_card("Unfused (eager PyTorch)", u)}'
        f'{_run_card(f"Fused ({f.mode})", f)}{_speedup_card(result)}</section>',
        '<section id="timeline"><h2>Timeline</h2><p class="note">The first simulated call of '
        'each run: the host dispatches kernels (top lane of each), the GPU runs them in order '
        '(bottom lane). Hatched: the GPU waits for the host. End to end is the steady-state time '
        'per call when calls run back to back. Hover for details.</p>'
        f'<div class="fig pic">{timeline_svg(result=result, uid="tl")}</div></section>',
        _memory_section(result),
        f'<section id="top"><h2>Top kernels</h2><p class="note">Fused run, by predicted time '
        f'(share of {fmt_us(f.device_us)} device time).</p>{_top_kernels(f)}</section>',
        '<section id="roofline"><h2>Roofline</h2><p class="note">Each dot is a kernel at its '
        'arithmetic intensity and achieved FLOP/s; dots under the slope are limited by memory, '
        'under a flat roof by compute, and far below both by fixed per-kernel costs (latency). '
        'Rings are the unfused kernels; arrows move each fused group from its unfused parts '
        'to the fused kernel.</p>'
        f'<div class="fig pic">{roofline_svg(result=result, uid="rf")}</div></section>',
        _graph_section(result),
        module_section(result, info.get("depth") or DEFAULT_DEPTH),
        '<section id="kernels"><h2>Kernels</h2><p class="note">Fused run; click a heading to '
        'sort.</p>' + kernel_table(f, "kernels-fused") +
        '<details><summary>Unfused run (eager, one kernel per op)</summary>' +
        kernel_table(u, "kernels-unfused") + '</details></section>',
    ]
    if notes:
        body.append('<section id="notes"><h2>Notes</h2><ul class="notes">' +
                    "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul></section>")
    body.append(f'<footer>gpusim · {esc(spec.display_name)} spec <code>{esc(spec.name)}</code> '
                f'({esc(spec.source)}): DRAM {esc(fmt_si(spec.bandwidth, "B/s"))}, '
                f'{", ".join(esc(f"{k} {v:g} TFLOP/s") for k, v in spec.peak_tflops.items())}. '
                'Predicted times, not measurements.</footer>')
    return _page(title, "\n".join(body), script=True)


def memory_svg(runs, width: int = 760, height: int = 220) -> str:
    """Memory over kernel order: one step line per run (allocated activation bytes above
    weights and inputs while each kernel runs), its peak marked."""
    pad_l, pad_r, pad_t, pad_b = 64, 12, 12, 30
    top = max([max(p.memory.timeline, default=0) for _, p in runs] + [1])
    colours = ["#888", "#1f77b4", "#d62728"]
    w, hgt = width - pad_l - pad_r, height - pad_t - pad_b
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" role="img" aria-label="memory over time">']
    for frac in (0, 0.5, 1):
        y = pad_t + hgt * (1 - frac)
        parts.append(f'<line x1="{pad_l}" x2="{width - pad_r}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="#ddd"/><text x="{pad_l - 4}" y="{y + 4:.1f}" font-size="11" '
                     f'text-anchor="end">{esc(fmt_bytes(top * frac))}</text>')
    for j, (label, p) in enumerate(runs):
        tl = p.memory.timeline
        if not tl:
            continue
        n = len(tl)
        pts = []
        for i, v in enumerate(tl):
            x0, x1 = pad_l + w * i / n, pad_l + w * (i + 1) / n
            y = pad_t + hgt * (1 - v / top)
            pts += [f"{x0:.1f},{y:.1f}", f"{x1:.1f},{y:.1f}"]
        c = colours[j % len(colours)]
        parts.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{" ".join(pts)}">'
                     f'<title>{esc(label)}: peak {esc(fmt_bytes(p.memory.peak_bytes))}</title></polyline>')
        k = p.memory.peak_kernel
        parts.append(f'<circle cx="{pad_l + w * (k + 0.5) / n:.1f}" '
                     f'cy="{pad_t + hgt * (1 - tl[k] / top):.1f}" r="3" fill="{c}"/>')
        parts.append(f'<text x="{pad_l + 8 + 200 * j}" y="{height - 8}" font-size="11" fill="{c}">'
                     f'{esc(label)}: peak {esc(fmt_bytes(p.memory.peak_bytes))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _memory_section(res) -> str:
    f = res.fused
    m = f.memory
    return ('<section id="memory"><h2>Memory</h2><p class="note">Activation memory allocated '
            'while each kernel runs (kernel order, each run scaled to its own kernel count), '
            f'above weights ({esc(fmt_bytes(m.weights_bytes))}) and inputs '
            f'({esc(fmt_bytes(m.inputs_bytes))}); dots mark each peak. Fused run: '
            f'{esc(fit_line(m, f.spec))}.</p>'
            f'<div class="fig pic">{memory_svg(res.rows)}</div></section>')


def timeline_page(pred=None, result=None, title: str | None = None) -> str:
    """A small HTML page holding only :func:`timeline_svg` (docs, sharing)."""
    runs = runs_of(pred, result)
    p = runs[-1][1]
    title = title or f"gpusim timeline: {p.graph.name} on {p.spec.display_name}"
    sub = ""
    if result is not None:
        cls, text = _verdict(result)
        sub = (f'<p class="note">Simulated first call, unfused (eager) vs fused '
               f'({result.fused.mode}). <span class="verdict {cls}">{esc(text)}</span></p>')
    body = (f'<section id="timeline"><h2>{esc(title)}</h2>{sub}<div class="fig pic">'
            f'{timeline_svg(pred, result)}</div></section>')
    return _page(title, body)
