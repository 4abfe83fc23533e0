"""The package stays small and documented, and every helper a notebook calls exists (d2l's lesson)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys

import pytest

import torchcontracts

from conftest import ROOT, read

PACKAGE = ROOT / "helpers" / "torchcontracts"
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_is_short_and_says_why_it_exists(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert ast.get_docstring(tree), f"{path.name}: add a one-line module docstring saying why it exists"
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= 400, f"{path.name} has {lines} lines: split it by concern"


def _notebook_imports():
    for folder in ("notebooks", "solutions", "labs"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            for cell in read(path).cells:
                if cell.cell_type != "code":
                    continue
                src = "\n".join(l for l in cell.source.splitlines() if not l.lstrip().startswith(("%", "!")))
                try:
                    tree = ast.parse(src)
                except SyntaxError:
                    continue
                for node in ast.walk(tree):
                    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torchcontracts"):
                        for alias in node.names:
                            yield path.name, node.module, alias.name
                    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "tc":
                        yield path.name, "torchcontracts", node.attr


def test_every_torchcontracts_name_a_notebook_uses_exists():
    missing = []
    for nb, module, name in _notebook_imports():
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{nb}: {module}.{name}")
    assert not missing, missing


def test_python_dash_m_and_the_console_script_agree():
    proc = subprocess.run(
        [sys.executable, "-m", "torchcontracts", "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "doctor" in proc.stdout and "grade" in proc.stdout
    assert torchcontracts.__version__
