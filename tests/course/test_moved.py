"""The old module paths (before the manifest and lesson folders) still import, as the same module objects, and
nothing in the course uses them any more."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

from conftest import ROOT, lab_paths, lesson_paths, solution_paths
from torchcontracts._moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_new_module(old):
    new = importlib.import_module(f"torchcontracts.{MOVED[old]}")
    assert importlib.import_module(f"torchcontracts.{old}") is new
    assert new.__spec__.name == new.__name__ == f"torchcontracts.{MOVED[old]}", "the alias must not rename the module"


def test_an_old_lab_notebooks_setup_line_still_imports_in_a_fresh_interpreter():
    code = (
        "from torchcontracts.labchecks.lab01_strides import lab\n"
        "from torchcontracts.check import Case, Check, compare\n"
        "import torchcontracts.lessons.l01_tensors.lab01_strides as new\n"
        "assert lab is new.lab and Check is __import__('torchcontracts.checks', fromlist=['Check']).Check\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-500:]


def test_an_unknown_old_name_still_fails_plainly():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("torchcontracts.labchecks.lab99_nothing")


def test_the_course_itself_uses_only_the_new_paths():
    old = re.compile(
        r"torchcontracts\.(" + "|".join(re.escape(k) for k in sorted(MOVED, key=len, reverse=True)) + r")\b(?!\.)"
    )
    old_pkg = re.compile(r"torchcontracts\.(labchecks|exercises)\b")
    found = []
    paths = [*(ROOT / "helpers").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]
    paths += [*lesson_paths(), *solution_paths(), *lab_paths()]
    for path in paths:
        if path.name in ("_moved.py", "test_moved.py", "test_course.py") or "__pycache__" in path.parts:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "shim" in line or "old path" in line:  # where the course says the old paths still import
                continue
            if old_pkg.search(line) or (
                old.search(line) and not any(f"torchcontracts.{new}" in line for new in MOVED.values())
            ):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not found, "use the new module paths:\n" + "\n".join(found)
