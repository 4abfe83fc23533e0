"""`torchcontracts grade` end to end on the real lab01: reference, blank lab, Gradescope file, student copy."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from torchcontracts.grading.sandbox import bwrap_path

pytestmark = pytest.mark.slow  # executes notebooks, grades whole submissions or drives a browser

ROOT = Path(__file__).resolve().parents[2]
LAB = "lab01_strides"


def grade(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """The real command, in a subprocess (slow: a fresh interpreter imports torch)."""
    return subprocess.run(
        [sys.executable, "-m", "torchcontracts", "grade", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def grade_here(capsys, monkeypatch, *args: str, cwd: Path = ROOT) -> tuple[int, str]:
    """The same command in this process (its kernel fork server is shared by the tests)."""
    from torchcontracts.cli import main

    monkeypatch.chdir(cwd)
    code = main(["grade", *args])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_reference_solution_gets_full_marks_with_json_and_gradescope(tmp_path):
    results = tmp_path / "results" / "results.json"
    proc = grade(f"solutions/{LAB}.ipynb", "--json", "--gradescope", str(results))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(proc.stdout)
    assert (got["lab"], got["score"], got["max_score"], got["problems"]) == (LAB, 12, 12, [])
    assert all(re.fullmatch(r"all \d+ checks pass", t["reason"]) for t in got["tasks"])
    assert (got["sandbox"], got["graded"]) == ("bwrap" if bwrap_path() else "none", True)
    assert json.loads(results.read_text())["output"] == f"graded (sandbox: {got['sandbox']})"
    gs = json.loads(results.read_text())
    assert gs["score"] == 12 and gs["execution_time"] > 0
    assert sum(t["score"] for t in gs["tests"]) == pytest.approx(12)
    assert sum(t["max_score"] for t in gs["tests"]) == pytest.approx(12)
    assert {t["visibility"] for t in gs["tests"] if "hidden check" in t["name"]} == {"after_published"}
    assert {t["visibility"] for t in gs["tests"] if "hidden check" not in t["name"]} == {"visible"}
    assert all(set(t) == {"name", "score", "max_score", "visibility", "output"} for t in gs["tests"])


def test_blank_lab_scores_zero_with_not_implemented_for_each_task(capsys, monkeypatch):
    code, out = grade_here(capsys, monkeypatch, f"labs/{LAB}.ipynb")
    assert code == 0, out
    head, *lines = out.splitlines()
    assert f"{LAB}: 0/12 points" in head
    task_lines = [ln for ln in lines if ln.startswith("  t")]
    assert len(task_lines) == 5 and all(ln.endswith(": not implemented") for ln in task_lines)
    assert "Traceback" not in out


def test_unknown_file_and_unreadable_notebook_give_one_line_reasons(capsys, monkeypatch, tmp_path):
    code, out = grade_here(capsys, monkeypatch, str(tmp_path / "nope.ipynb"))
    assert code == 2 and out.strip() == f"grade: {tmp_path / 'nope.ipynb'} does not exist"
    odd = tmp_path / "homework.ipynb"
    odd.write_text(nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])))
    code, out = grade_here(capsys, monkeypatch, str(odd))
    assert code == 1
    assert (
        f"cannot tell which lab this is: no torchcontracts.lab in its metadata and no lab cells; labs here: {LAB}"
        in out
    )


@pytest.fixture(scope="module")
def student_copy(tmp_path_factory) -> Path:
    """The course as students get it: no solutions/."""
    copy = tmp_path_factory.mktemp("student") / "course"
    shutil.copytree(ROOT / "labs", copy / "labs")
    return copy


def test_student_copy_without_solutions_still_works_for_students(student_copy, capsys, monkeypatch):
    from torchcontracts.cli import main
    from torchcontracts.lessons.l01_tensors.lab01_strides import lab

    monkeypatch.chdir(student_copy)
    assert main(["labs", "check"]) == 0

    def contiguous_strides(shape):
        out, step = [], 1
        for n in reversed(shape):
            out.append(step)
            step *= max(n, 1)
        return tuple(reversed(out))

    assert lab.check(contiguous_strides)
    assert re.search(r"(\d+)/\1 public checks pass", capsys.readouterr().out)


def test_grading_without_solutions_says_hidden_checks_are_unavailable(student_copy, capsys, monkeypatch):
    code, out = grade_here(capsys, monkeypatch, f"labs/{LAB}.ipynb", cwd=student_copy)
    assert code == 2
    assert out.strip() == (
        f"grade: hidden checks unavailable: grading needs solutions/{LAB}.ipynb "
        "(or pass --public-only to grade the public checks only)"
    )


def test_public_only_grading_in_a_student_copy_runs_public_checks(student_copy, tmp_path, capsys, monkeypatch):
    sub = tmp_path / "mine.ipynb"
    shutil.copy(ROOT / "solutions" / f"{LAB}.ipynb", sub)
    code, out = grade_here(capsys, monkeypatch, str(sub), "--public-only", "--json", cwd=student_copy)
    assert code == 0, out
    got = json.loads(out)
    assert got["score"] == 12 and got["problems"] == ["public checks only: hidden checks were not run"]
    assert all(not c["hidden"] for t in got["tasks"] for c in t["checks"])


def test_misused_options_get_one_line_errors(capsys, monkeypatch, tmp_path):
    code, out = grade_here(capsys, monkeypatch, f"labs/{LAB}.ipynb", "--lab", "lab99_nope")
    assert code == 2 and out.strip().startswith("grade: unknown lab 'lab99_nope': this course has lab01_strides")
    code, out = grade_here(capsys, monkeypatch, "labs", "--gradescope", str(tmp_path / "r.json"))
    assert code == 2 and out.strip() == (
        "grade: --gradescope writes one submission's results; for a folder use --out gradebook.csv"
    )
    code, out = grade_here(capsys, monkeypatch, str(tmp_path), cwd=tmp_path)
    assert code == 2 and out.strip() == (
        "grade: no course folder found here: run this from the course root "
        "(it holds labs/ and solutions/), or pass --course DIR"
    )
