"""Einsum as the GEMM ATen runs for it: the equation's indices grouped into batch, rows,
columns and reduction (``sumproduct_pair``, aten/src/ATen/native/Linear.cpp)."""

from __future__ import annotations

from gpusim.graph.opgraph import numel


def einsum_terms(eq: str, ins) -> tuple[list[str], str]:
    """The operand terms and the output term of an einsum equation, with ``...`` spelt out
    as one upper-case-free placeholder per broadcast dim (aligned from the right, as
    torch.einsum does) and an implicit output (no ``->``) as the sorted once-used letters."""
    eq = eq.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    ell = max((len(t.shape) - len(term.replace("...", ""))
               for term, t in zip(terms, ins) if "..." in term), default=0)
    fill = "".join(chr(0x3b1 + i) for i in range(ell))      # greek letters: not in the eq
    def spell(term, nd=None):
        if "..." not in term:
            return term
        k = ell if nd is None else nd - len(term.replace("...", ""))
        return term.replace("...", fill[ell - k:])
    terms = [spell(term, len(t.shape)) for term, t in zip(terms, ins)]
    if not arrow:
        seen = "".join(terms)
        out = fill + "".join(sorted(c for c in set(seen) if seen.count(c) == 1 and c not in fill))
    return terms, spell(out)


def einsum_gemm(ctx):
    """A two-operand einsum runs as one bmm (ATen's ``sumproduct_pair``, Linear.cpp): the
    indices in both operands and the output are the batch, those of the left operand and
    the output the rows, those of the right operand and the output the columns, those in
    both operands and not the output the reduction. Other einsums: every output index a
    row, every contracted one the reduction (one column)."""
    terms, out = einsum_terms(ctx.args[0], ctx.ins)
    sizes = {}
    for term, t in zip(terms, ctx.ins):
        for ch, s in zip(term, t.shape):
            sizes[ch] = max(sizes.get(ch, 1), s)
    dt = ctx.ins[0].dtype
    if len(terms) == 2:
        left, right = set(terms[0]), set(terms[1])
        size = lambda cs: numel(sizes[c] for c in cs)
        return {"b": size(c for c in sizes if c in left and c in right and c in out),
                "m": size(c for c in sizes if c in left and c not in right and c in out),
                "n": size(c for c in sizes if c in right and c not in left and c in out),
                "k": size(c for c in sizes if c in left and c in right and c not in out),
                "unit_dtype": dt}
    contracted = [c for c in sizes if c not in out]
    return {"b": 1, "m": numel(sizes[c] for c in out), "n": 1,
            "k": numel(sizes[c] for c in contracted), "unit_dtype": dt}
