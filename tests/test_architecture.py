"""The house rules, checked by tools: the import-linter contracts in pyproject.toml (stages in
pipeline order, no cycles between siblings, the predictor apart from the lab), modules of at most
500 lines in the library and the lab, and the cost stage as small laws found through one registry."""

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 500
MAX_COST_FUNCTION = 60


def _modules():
    for top in ("gpusim", "validation"):
        yield from sorted((ROOT / top).rglob("*.py"))


def test_import_contracts_hold():
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports not found: pip install -e '.[test]' installs import-linter")
    r = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_every_module_is_at_most_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_cost_functions_are_small():
    long = {}
    for p in sorted((ROOT / "gpusim" / "cost").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_COST_FUNCTION:
                    long[f"{p.name}:{node.name}"] = n
    assert not long, f"cost functions over {MAX_COST_FUNCTION} lines: {long}"


def test_stages_are_packages_named_in_the_contract():
    import tomllib
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in conf if c["id"] == "stages")["layers"]
    named = {s.strip() for layer in layers for s in layer.split("|")}
    packages = {p.name for p in (ROOT / "gpusim").iterdir() if (p / "__init__.py").exists()}
    assert packages <= named, packages - named


def test_architecture_doc_is_generated_from_the_code():
    from validation.reports.architecture import DOC, current
    text = DOC.read_text()
    assert current(text) == text, "docs/architecture.md is stale: python3 -m validation.reports.architecture"


def test_the_lab_stays_out_of_the_predictor_package():
    assert not (ROOT / "gpusim" / "validation").exists()
    assert not (ROOT / "gpusim" / "calibrate.py").exists()
