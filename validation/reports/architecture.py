"""docs/architecture.md's diagram, generated from the code: the stage packages of ``gpusim`` in the
order of the import-linter ``stages`` contract (pyproject.toml), the imports between them (grimp, the
graph import-linter checks), and each package's modules.

    python3 -m validation.reports.architecture            # rewrite the generated part of docs/architecture.md
    tests/test_architecture.py checks it is current"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- generated: python3 -m validation.reports.architecture -->", "<!-- end generated -->"


def stage_layers() -> list[list[str]]:
    """The ``stages`` contract's layers, top first, each a list of sibling packages."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in conf if c["id"] == "stages")["layers"]
    return [[s.strip() for s in layer.split("|")] for layer in layers]


def stage_imports() -> set[tuple[str, str]]:
    """``(importer, imported)`` pairs of stage packages, from every module's imports (those
    inside functions too), as import-linter sees them."""
    import grimp
    g = grimp.build_graph("gpusim", include_external_packages=False, cache_dir=None)
    stages = {s for layer in stage_layers() for s in layer}
    out = set()
    for m in g.modules:
        parts = m.split(".")
        if len(parts) < 2 or parts[1] not in stages:
            continue
        for t in g.find_modules_directly_imported_by(m):
            tp = t.split(".")
            if len(tp) > 1 and tp[1] in stages and tp[1] != parts[1]:
                out.add((parts[1], tp[1]))
    return out


def _modules(stage: str) -> str:
    base = ROOT / "gpusim" / stage
    files = [base.with_suffix(".py")] if base.with_suffix(".py").exists() else sorted(base.rglob("*.py"))
    names = [str(p.relative_to(base)) if p.parent != ROOT / "gpusim" else p.name
             for p in files if p.name != "__init__.py" or p.parent != base]
    return ", ".join(n[:-3] for n in names)


def generated() -> str:
    layers = stage_layers()
    edges = stage_imports()
    # a transitive edge (a -> c where a -> b -> c) is implied by the layering: drawn only if direct and
    # no path through another stage carries it, to keep the picture readable
    import networkx as nx
    g = nx.DiGraph(sorted(edges))
    shown = sorted((a, b) for a, b in edges
                   if not any(nx.has_path(g, m, b) for m in g.successors(a) if m != b))
    lines = [BEGIN, "", "```mermaid", "flowchart TD"]
    for layer in layers:
        for s in layer:
            lines.append(f"    {s.replace('__', '')}[\"{s}\"]")
    for a, b in shown:
        lines.append(f"    {a.replace('__', '')} --> {b.replace('__', '')}")
    lines += ["```", "", "| layer (top first) | package | modules |", "|---|---|---|"]
    for i, layer in enumerate(layers, 1):
        for s in layer:
            lines.append(f"| {i} | `gpusim.{s}` | {_modules(s)} |")
    lines += ["", f"{len(edges)} stage-to-stage imports in all; {len(shown)} drawn (the others are implied by a "
              "path through the stages between).", "", END]
    return "\n".join(lines)


def current(text: str) -> str:
    """``text`` with its generated part rewritten."""
    i, j = text.index(BEGIN), text.index(END) + len(END)
    return text[:i] + generated() + text[j:]


def main(argv=None) -> int:
    text = DOC.read_text()
    new = current(text)
    if new != text:
        DOC.write_text(new)
        print(f"{DOC.relative_to(ROOT)}: diagram rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
