"""The README's printed examples are real output: each is re-run by a test and compared,
and ``python3 -m validation.reports.readme`` pastes fresh output in after a change to the model.

An example is a fenced block with no language. Its command is either the backticked
``gpusim ...`` that opens the paragraph before it, or ``$ gpusim ...`` lines inside it,
each followed by the lines of its output that the README shows. A line
``(... N more rows ...)`` stands for N lines of output left out.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys

FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```\n", re.S | re.M)
LEAD = re.compile(r"^`(gpusim [^`]+)`.*:\s*$", re.S)
ELIDED = re.compile(r"^\(\.\.\. (\d+) more rows")
#: gpusim's own run time (``fusion search (auto:exact, 0.01 s)``) is not a prediction
OWN_TIME = re.compile(r"\b\d+(\.\d+)? s\)")


def _same(a: str, b: str) -> bool:
    return OWN_TIME.sub("s)", a) == OWN_TIME.sub("s)", b)


def examples(text: str) -> list[dict]:
    """``[{"argv", "shown": [lines], "start", "end", "prompt"}]`` for every printed
    example of ``text``: ``start``/``end`` delimit the lines the example may replace."""
    out = []
    for m in FENCE.finditer(text):
        lang, body = m.group(1), m.group(2)
        if lang:
            continue
        lines = body.rstrip("\n").split("\n")
        if lines and lines[0].startswith("$ gpusim "):
            cur = None
            for line in lines:
                if line.startswith("$ gpusim "):
                    cur = {"argv": shlex.split(line[2:])[1:], "shown": [], "prompt": True}
                    out.append(cur)
                elif cur is not None:
                    cur["shown"].append(line)
            continue
        para = text[:m.start()].rstrip("\n").split("\n\n")[-1]
        lead = LEAD.search(para)
        if lead:
            out.append({"argv": shlex.split(lead.group(1))[1:], "shown": lines,
                        "prompt": False, "span": (m.start(2), m.end(2))})
    return out


def run(argv: list[str]) -> list[str]:
    """What ``gpusim ARGV`` prints on stdout, as lines."""
    from gpusim.cli.commands import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(list(argv))
    lines = buf.getvalue().rstrip("\n").split("\n")
    return lines if rc in (0, None) else lines + [f"(exit {rc})"]


def mismatch(shown: list[str], printed: list[str], prefix: bool) -> str | None:
    """The first README line that differs from what the command printed, or None.
    ``prefix``: the README shows only the first lines of the output."""
    i = 0
    for line in shown:
        m = ELIDED.match(line)
        if m:
            i += int(m.group(1))
            continue
        if i >= len(printed) or not _same(printed[i], line):
            got = printed[i] if i < len(printed) else "<end of output>"
            return f"README: {line!r}\nprinted: {got!r}"
        i += 1
    if not prefix and i != len(printed):
        return f"README shows {i} lines, the command printed {len(printed)}"
    return None


def refresh(path: str) -> int:
    """Paste fresh output into every whole-output example of the README at ``path``
    (``(... N more rows ...)`` lines are kept where the output is long)."""
    text = open(path).read()
    n = 0
    for ex in reversed(examples(text)):
        if ex["prompt"]:
            continue
        printed = run(ex["argv"])
        keep = [ln for ln in ex["shown"] if ELIDED.match(ln)]
        if keep:     # keep the README's cut: its head, the elision, and the tail
            head = ex["shown"].index(keep[0])
            tail = len(ex["shown"]) - head - 1
            skipped = len(printed) - head - tail
            printed = printed[:head] + [ELIDED.sub(f"(... {skipped} more rows", keep[0])] + \
                printed[len(printed) - tail:]
        a, b = ex["span"]
        text = text[:a] + "\n".join(printed) + "\n" + text[b:]
        n += 1
    with open(path, "w") as f:
        f.write(text)
    return n


if __name__ == "__main__":
    print(f"refreshed {refresh(sys.argv[1] if len(sys.argv) > 1 else 'README.md')} examples")
