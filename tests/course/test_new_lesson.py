"""`torchcontracts new-lesson` scaffolds a lesson that passes the course's checks and that every tool picks up.

The course is copied into tmp_path (the files git tracks, plus new ones it does not ignore) and the command runs
there, with the package imported from the copy. With no other edit, the copy then runs the new notebook under
nbval, the header, time-estimate, hygiene, manifest and claim-ownership tests, `torchcontracts ledger --only 11`
and `torchcontracts site OUT --only 11 --no-labs`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

NOTEBOOK = "notebooks/11_example_topic.ipynb"
EVERY_LESSON = "test_every_lesson_has_its_notebook_and_package_folder_and_nothing_else_is_there"


def _copy_course(dest: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for rel in filter(None, listed.split("\0")):
        src = ROOT / rel
        if src.is_file():  # a tracked file deleted in the working tree is not copied
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _run(copy: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy / "helpers"), "TORCHCONTRACTS_GPU_RECORD": str(copy / "none.json")}
    return subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_a_scaffolded_lesson_passes_the_course_checks_and_the_tools_pick_it_up(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the course's git checkout to copy it")
    copy = tmp_path / "course"
    _copy_course(copy)

    made = _run(copy, "-m", "torchcontracts", "new-lesson", "11", "example_topic", "An example")
    assert made.returncode == 0, made.stdout + made.stderr
    assert (copy / NOTEBOOK).is_file() and (copy / "helpers/torchcontracts/lessons/l11_example/tryit.py").is_file()
    again = _run(copy, "-m", "torchcontracts", "new-lesson", "11", "other_topic", "Again")
    assert again.returncode == 1 and again.stdout.count("\n") == 1 and "exists already" in again.stdout

    imported = _run(copy, "-c", "import torchcontracts.course as c; print(c.__file__, c.lesson('11').package)")
    assert imported.stdout.startswith(str(copy)) and "l11_example" in imported.stdout, imported.stdout

    checks = _run(
        copy,
        "-m",
        "pytest",
        "-q",
        "-rA",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-c",
        str(copy / "pyproject.toml"),
        "--rootdir",
        str(copy),
        "--nbval",
        "--nbval-current-env",
        NOTEBOOK,
        "tests/course/test_notebook_hygiene.py",
        "tests/course/test_time_estimates.py",
        "tests/course/test_claims.py",
        *(["tests/course/test_course.py::" + EVERY_LESSON] if (copy / "tests/course/test_course.py").exists() else []),
        "tests/publish/test_ledger_cache.py::test_every_claim_is_proved_by_exactly_one_lesson",
        "tests/publish/test_ledger_cache.py::test_the_cached_ledger_covers_all_124_claims",
        "tests/course/test_package.py::test_module_is_short_and_says_why_it_exists",
        "-k",
        "not test_module_is_short or l11_example",
        timeout=300,
    )
    summary = checks.stdout.strip().splitlines()[-1] if checks.stdout.strip() else ""
    assert checks.returncode == 0 and " passed" in summary, checks.stdout[-4000:] + checks.stderr[-2000:]
    passed = {ln.split(" ", 1)[1].split("::", 1)[1] for ln in checks.stdout.splitlines() if ln.startswith("PASSED ")}
    assert {"Cell 0", "Cell 1", "Cell 2"} <= passed, "nbval must run the scaffold's 3 code cells"
    assert {
        "test_notebook_opens_with_the_header_block[11_example_topic.ipynb]",
        "test_lesson_ends_with_what_you_proved[11_example_topic.ipynb]",
        "test_every_notebook_header_states_a_time",
        "test_the_readme_course_map_is_made_from_the_manifest_and_the_headers",
        "test_each_claim_is_judged_in_exactly_one_lesson_and_exists",
        "test_every_claim_is_proved_by_exactly_one_lesson",
        "test_module_is_short_and_says_why_it_exists[lessons/l11_example/tryit.py]",
    } <= passed, sorted(passed)

    ledger = _run(copy, "-m", "torchcontracts", "ledger", "--only", "11", "--quiet", "--out", str(tmp_path / "l.csv"))
    assert ledger.returncode == 0, ledger.stdout + ledger.stderr
    assert "11_example_topic.ipynb" in ledger.stdout and "0/124 claims covered" in ledger.stdout, ledger.stdout

    out = tmp_path / "site"
    site = _run(copy, "-m", "torchcontracts", "site", str(out), "--only", "11", "--no-labs", "--quiet", timeout=300)
    assert site.returncode == 0, site.stdout + site.stderr
    index = (out / "index.html").read_text(encoding="utf-8")
    assert (out / "notebooks" / "11_example_topic.html").is_file() and "An example" in index
    assert "<td><p>11</p></td>" in index and "<td><p>20 min</p></td>" in index  # the course map, from the manifest
