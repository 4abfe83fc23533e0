"""Every notebook of the course, run in JupyterLab in a real browser (chromium, driven by Playwright).

Lessons (00, 03 and 10 by default, every lesson with TC_BROWSER_ALL=1): Run All ends with no error output, every code cell ran, every widget renders, and each explorer
(lesson 01's stride explorer, lesson 03's allocator explorer) redraws its picture when a dropdown changes.
Labs (lab 01 by default, every lab with TC_BROWSER_ALL=1): Run All raises nothing but NotImplementedError.
A deliberately broken copy of lesson 00 proves the checker reports errors.

Needs /usr/bin/chromium (apt) and the playwright package (pip; never `playwright install`). Without them
the tests skip, unless TC_REQUIRE_BROWSER=1 (as CI sets), when they fail. Screenshots and per-notebook
times land in browser-artifacts/ at the repo root (gitignored).
"""

from __future__ import annotations

import os

import pytest

from browser_support import REQUIRE_ENV, Browser, LabServer, broken_copy, check_notebook, copy_course, missing_browser
from conftest import ROOT, lab_paths, lesson_paths

pytestmark = pytest.mark.slow  # executes notebooks, grades whole submissions or drives a browser

ARTIFACTS = ROOT / "browser-artifacts"
# Every lesson runs cell by cell under nbval already; the browser adds what only a front end shows (widgets
# rendering, explorers redrawing, output that a browser must display). Its default set is the lessons with
# ipywidgets (03's allocator explorer, 10's ledger browser), lesson 00, which command 1 opens, and lab 01;
# TC_BROWSER_ALL=1 runs every lesson and lab (before a release: lessons 01, 02 and 04-09 add about 6 minutes on
# 2 cores, which the 10-minute suite cannot hold; 01's stride explorer also runs headless in
# tests/test_ledger_explorers.py).
BROWSER_ALL_ENV = "TC_BROWSER_ALL"
DEFAULT_LESSONS = ("00", "03", "10")
LESSONS = sorted(
    p.relative_to(ROOT).as_posix()
    for p in lesson_paths()
    if os.environ.get(BROWSER_ALL_ENV, "") not in ("", "0") or p.name[:2] in DEFAULT_LESSONS
)
# Every student lab is also executed by the lab contract test (tests/test_lab_contract.py), which asserts it raises
# nothing but the NotImplementedError of its TODOs; the browser checks lab 01 as the front end shows it.
DEFAULT_LABS = ("lab01",)
LABS = sorted(
    p.relative_to(ROOT).as_posix()
    for p in lab_paths()
    if os.environ.get(BROWSER_ALL_ENV, "") not in ("", "0") or p.name.startswith(DEFAULT_LABS)
)
CASES = [(p, "lesson") for p in LESSONS] + [(p, "lab") for p in LABS]


def _require_browser() -> None:
    why = missing_browser()
    if why is None:
        return
    if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
        pytest.fail(f"{REQUIRE_ENV} is set but the browser test cannot run: {why}", pytrace=False)
    pytest.skip(f"browser test skipped: {why}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab server on a copy of the course, one chromium; both gone (checked) at the end.
    None where the browser is missing: each test then skips, or fails under TC_REQUIRE_BROWSER
    (in the test itself, so it reports as a failure rather than a fixture error)."""
    if missing_browser() is not None:
        yield None
        return
    ARTIFACTS.mkdir(exist_ok=True)
    base = tmp_path_factory.mktemp("browser")
    course = copy_course(ROOT, base / "course")
    server = LabServer(root=course, state=base / "jupyter-state", log=ARTIFACTS / "jupyter-server.log")
    server.log.write_text("")
    server.start()
    browser = None
    timings: list[str] = []
    try:
        browser = Browser()
        yield server, browser, timings
    finally:
        leaked = browser.close() if browser is not None else []
        leaked += server.stop()
        (ARTIFACTS / "timings.txt").write_text("\n".join(timings) + "\n")
    assert not leaked, f"processes outlived the browser test: {leaked}"


def _check(lab, relpath: str, kind: str, label: str | None = None):
    server, browser, timings = lab
    report = check_notebook(server, browser, relpath, kind, ARTIFACTS)
    line = (
        f"{label or relpath}: run all -> idle {report.seconds:.1f} s, whole check {report.total_seconds:.1f} s"
        + f" ({', '.join(f'{k} {v:.1f}' for k, v in report.phases.items())})"
        + (f"; notes: {'; '.join(report.notes)}" if report.notes else "")
        + (f"; problems: {len(report.problems)}" if report.problems else "")
    )
    timings.append(line)
    print(line)
    return report


@pytest.mark.parametrize("relpath,kind", CASES, ids=[p.rsplit("/", 1)[-1].removesuffix(".ipynb") for p, _ in CASES])
def test_notebook_runs_clean_in_jupyterlab(lab, relpath, kind, record_property):
    _require_browser()
    report = _check(lab, relpath, kind)
    record_property("run_all_seconds", round(report.seconds, 1))
    if report.problems:
        pytest.fail(f"{relpath} in the browser: " + " | ".join(report.problems), pytrace=False)


def test_checker_reports_a_broken_lesson(lab):
    """The test of the test: lesson 00 with `raise RuntimeError("deliberately broken")` must be caught."""
    _require_browser()
    server, _, _ = lab
    relpath = "broken/00_start_here.ipynb"
    broken_copy(ROOT / "notebooks" / "00_start_here.ipynb", server.root / relpath)
    report = _check(lab, relpath, "lesson", label=f"{relpath} (deliberately broken)")
    assert any("RuntimeError" in p and "deliberately broken" in p for p in report.problems), (
        f"the checker missed the deliberate RuntimeError; it reported {report.problems}"
    )
    # Run All stops at the error, so the cells after it never ran: the checker says so too.
    assert any("never ran" in p for p in report.problems), report.problems
