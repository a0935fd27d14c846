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
