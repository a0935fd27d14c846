"""The predictor (gpusim/) and the lab (validation/) meet only through data files: no
predictor module imports the lab, except the CLI's calibrate/validate/accuracy commands,
which load it lazily inside their own functions."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAB_COMMANDS = {"cmd_calibrate", "cmd_validate", "cmd_accuracy"}


def _lab_imports(path: pathlib.Path):
    """``(enclosing function or "<module>", module)`` of each import of the lab."""
    found = []

    class Visitor(ast.NodeVisitor):
        where = ["<module>"]

        def visit_FunctionDef(self, node):
            self.where.append(node.name)
            self.generic_visit(node)
            self.where.pop()

        def _add(self, names):
            found.extend((self.where[-1], n) for n in names
                         if n == "validation" or n.startswith("validation."))

        def visit_Import(self, node):
            self._add([a.name for a in node.names])

        def visit_ImportFrom(self, node):
            if node.module and node.level == 0:
                self._add([node.module])

    Visitor().visit(ast.parse(path.read_text()))
    return found


def test_the_predictor_never_imports_the_lab():
    bad = []
    for path in sorted((ROOT / "gpusim").rglob("*.py")):
        for where, mod in _lab_imports(path):
            if path.name == "cli.py" and where in LAB_COMMANDS:
                continue
            bad.append(f"{path.relative_to(ROOT)}:{where} imports {mod}")
    assert not bad, "\n".join(bad)


def test_the_lab_stays_out_of_the_predictor_package():
    assert not (ROOT / "gpusim" / "validation").exists()
    assert not (ROOT / "gpusim" / "calibrate.py").exists()
