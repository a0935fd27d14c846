"""Every Python snippet in the README runs, as a user would paste it."""

import os
import re

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def snippets():
    with open(README) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def test_readme_has_python_snippets():
    assert snippets()


def test_readme_python_snippets_run():
    for code in snippets():
        exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})


def test_readme_printed_examples_are_real_output():
    """Each printed example (a block after a backticked `gpusim ...:` line, or `$ gpusim`
    lines in a block) is what that command prints now; `python3 -m validation.reports.readme`
    pastes fresh output after a model change."""
    from validation.reports.readme import examples, mismatch, run
    with open(README) as f:
        exs = examples(f.read())
    assert len(exs) >= 3
    for ex in exs:
        diff = mismatch(ex["shown"], run(ex["argv"]), prefix=ex["prompt"])
        assert diff is None, f"gpusim {' '.join(ex['argv'])}: {diff}"
