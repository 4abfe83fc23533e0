"""The course manifest (torchcontracts.course) is the one list of lessons, and the package's layout follows it.

* every notebook, lab, solution and lesson folder is in the manifest, and every manifest row has them;
* no tool or test enumerates lessons another way (a glob over notebooks/, a hard-coded lesson table, a lab-to-lesson
  regex): the grep below fails on the old ways, so a new lesson needs only its notebook and its manifest row;
* the package's folders import downwards only, and no lesson folder imports another.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conftest import ROOT
from torchcontracts.course import LESSONS, lab_ids, lesson, lesson_of_lab, lessons, package_of_lab

PKG = ROOT / "helpers" / "torchcontracts"


def test_every_lesson_has_its_notebook_and_package_folder_and_nothing_else_is_there():
    assert [les.number for les in LESSONS] == sorted({les.number for les in LESSONS}), "numbers unique and ordered"
    assert len({les.package for les in LESSONS}) == len(LESSONS)
    on_disk = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert on_disk == sorted(les.notebook for les in LESSONS), "notebooks/ and the manifest disagree"
    folders = sorted(p.name for p in (PKG / "lessons").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted(les.package for les in LESSONS), "lessons/ folders and the manifest disagree"
    for les in LESSONS:
        assert (PKG / "lessons" / les.package / "tryit.py").exists(), f"{les.package} has no tryit.py"


def test_every_lab_is_a_manifest_lab_with_its_solution_and_checks():
    for folder in ("labs", "solutions"):
        on_disk = sorted(p.stem for p in (ROOT / folder).glob("*.ipynb"))
        assert on_disk == sorted(lab_ids()), f"{folder}/ and the manifest disagree"
    for lab in lab_ids():
        module = PKG / (package_of_lab(lab).removeprefix("torchcontracts.").replace(".", "/") + ".py")
        assert module.exists(), f"{lab}: its checks belong in {module.relative_to(ROOT)}"


def test_lookups_name_what_is_known():
    assert lesson("04").slug == "async_and_timing" and lesson_of_lab("lab05_reproducible_training").number == "06"
    assert [les.number for les in lessons(["0"])] == [f"{n:02d}" for n in range(10)]
    with pytest.raises(KeyError, match="known"):
        lesson("99")
    with pytest.raises(KeyError, match="known"):
        lesson_of_lab("lab99_nothing")


# The old ways to enumerate lessons or map labs to lessons. The manifest and this test are the only places allowed.
OLD_WAYS = {
    "a glob over notebooks/": re.compile(r"""["']notebooks["']\)?\s*\)?\.r?glob\(|\[0-9\]\[0-9\]_\*\.ipynb"""),
    "a glob over labs/ or solutions/": re.compile(
        r"""["'](labs|solutions)["']\)\.r?glob\(["'][^"']*ipynb|lab\[0-9\]"""
    ),
    "a hard-coded lesson table": re.compile(r"LESSON_STEMS|range\(1, 10\)|\"01_tensor_contracts\"\s*[,:]"),
    "a lab-to-lesson mapping": re.compile(r"def lab_lesson|_LAB_LINK|labchecks\.\{|exercises\.lesson\{"),
}
ALLOWED = {"helpers/torchcontracts/course.py", "helpers/torchcontracts/_moved.py", "tests/course/test_course.py"}


def _sources() -> list[Path]:
    paths = [*PKG.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]
    return [p for p in paths if p.relative_to(ROOT).as_posix() not in ALLOWED and "__pycache__" not in p.parts]


def test_no_tool_or_test_enumerates_lessons_another_way():
    found = []
    for path in _sources():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for what, pattern in OLD_WAYS.items():
                if pattern.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {what}: {line.strip()[:100]}")
    assert not found, "read torchcontracts.course instead:\n" + "\n".join(found)


def test_the_grep_catches_each_old_way():
    samples = [
        'sorted((ROOT / "notebooks").glob("*.ipynb"))',
        'root.glob("notebooks/[0-9][0-9]_*.ipynb")',
        '(ROOT / "labs").glob("*.ipynb")',
        "LESSON_STEMS = {}",
        "for n in range(1, 10):",
        'importlib.import_module(f"torchcontracts.labchecks.{lab}")',
    ]
    for sample in samples:
        assert any(p.search(sample) for p in OLD_WAYS.values()), sample


# --- layout: imports go downwards ------------------------------------------------------------------------------

LAYERS = {"core": 0, "checks": 1, "labs": 2, "lessons": 3, "grading": 3, "publish": 4}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return {n for n in names if n.startswith("torchcontracts.")}


def test_package_folders_import_downwards_and_lesson_folders_not_each_other():
    bad = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).parts
        if len(rel) < 2 or rel[0] not in LAYERS:
            continue
        for name in _imports(path):
            target = name.split(".")[1]
            if target in LAYERS and LAYERS[target] > LAYERS[rel[0]]:
                bad.append(f"{'/'.join(rel)} imports {name} (upwards)")
            if rel[0] == "lessons" and target == "lessons" and name.split(".")[2:3] != [rel[1]]:
                bad.append(f"{'/'.join(rel)} imports {name} (another lesson)")
            if rel[0] == "grading" and name.startswith(("torchcontracts.lessons", "torchcontracts.labs.build")):
                bad.append(f"{'/'.join(rel)} imports {name} (the grader loads labs through labs.load)")
    assert not bad, "\n".join(sorted(bad))
