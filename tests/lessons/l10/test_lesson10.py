"""Lesson 10 reads the cached ledger (it never executes the other lessons) and merges a GPU record into its display.

The record here is tests/fixtures/gpu_record.fixture.json: a fixture, labelled as one wherever it shows. In it,
C019 and C024 are `false` on CUDA where the CPU ledger says `gpu-only`; C083 and C086 agree.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from torchcontracts.publish.ledger import execute
from torchcontracts.publish.record import RECORD_ENV

from conftest import ROOT

pytestmark = pytest.mark.slow  # executes notebooks, grades whole submissions or drives a browser

LESSON = ROOT / "notebooks" / "10_claims_ledger.ipynb"
FIXTURE = ROOT / "tests" / "fixtures" / "gpu_record.fixture.json"


def _text(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        parts.append(o.get("text", "") if o.get("output_type") == "stream" else o.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def _html(cell, needle: str) -> str:
    """The cell's HTML output that contains ``needle`` (a table)."""
    return next(o["data"]["text/html"] for o in cell.outputs if needle in o.get("data", {}).get("text/html", ""))


def _cell(nb, needle: str):
    return next(c for c in nb.cells if c.cell_type == "code" and needle in c.source)


@pytest.fixture(scope="module")
def with_fixture_record():
    mp = pytest.MonkeyPatch()
    mp.setenv(RECORD_ENV, str(FIXTURE))
    try:
        nb = nbformat.read(LESSON, as_version=4)
        execute(nb, LESSON.name, cwd=LESSON.parent, cell_timeout=120)
    finally:
        mp.undo()
    return nb


def test_the_lesson_never_executes_other_lessons():
    src = "\n".join(c.source for c in nbformat.read(LESSON, as_version=4).cells if c.cell_type == "code")
    assert "cache_paths()" in src, "lesson 10 reads the package's cached ledger"
    for forbidden in ("build_ledger", "run_lesson", "execute_notebook", "NotebookClient", "subprocess"):
        assert forbidden not in src, f"lesson 10 must read the cached ledger, not run lessons ({forbidden})"


def test_it_says_it_reads_cached_results_and_how_to_rerun(with_fixture_record):
    out = _text(_cell(with_fixture_record, "LEDGER_CSV, LEDGER_META = cache_paths()"))
    assert "CACHED results" in out and "torchcontracts ledger --cache" in out


def test_a_fixture_record_shows_side_by_side_with_the_differing_claims_highlighted(with_fixture_record):
    cell = _cell(with_fixture_record, "record = load_record()")
    text = _text(cell)
    assert "FIXTURE GPU" in text and "[FIXTURE: test data, not a measurement]" in text
    assert "2 of 4 claims judged on both have a different verdict" in text
    page = next(o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {}))
    ids = re.findall(r">\s*(C\d{3}b?)\s*<", page)
    assert ids[:2] == ["C019", "C024"] and sorted(ids) == ["C019", "C024", "C083", "C086"], ids
    styled = {
        int(r)
        for rule in re.findall(r"([^{}]*)\{\s*background-color: #fde2e2", page)
        for r in re.findall(r"_row(\d+)_col", rule)
    }
    assert styled == {0, 1}, f"highlighted rows {styled}; want the two claims that differ"


def test_the_recorded_figure_shows_beside_this_machines_own(with_fixture_record):
    text = _text(_cell(with_fixture_record, 'beside("roofline.hbm_GBps"'))
    assert "this machine (cpu):" in text and "recorded: 1,234 GB/s on FIXTURE GPU (capability 9.0), 2000-01-01" in text


def test_five_computed_lines_count_the_gpu_differences(with_fixture_record):
    lines = _text(_cell(with_fixture_record, "lines = [")).strip().splitlines()
    assert [ln[:3] for ln in lines] == ["1. ", "2. ", "3. ", "4. ", "5. "]
    assert "On the recorded GPU, 2 of 10 gpu-only expectations were confirmed and 0 refuted" in lines[4]
    assert "0 decided verdicts differ by device" in lines[4]


def test_each_gpu_only_expectation_is_checked_against_the_record(with_fixture_record):
    page = _html(_cell(with_fixture_record, "record = load_record()"), "outcome")
    rows = dict(re.findall(r">\s*(C\d{3}b?)\s*<.*?>\s*(confirmed|refuted[^<]*|not in the record yet)\s*<", page, re.S))
    assert rows["C019"] == rows["C024"] == "confirmed", rows  # the fixture says false, as the source expects
    assert rows["C115"] == "not in the record yet", rows


def test_a_refuted_expectation_is_named(tmp_path, monkeypatch):
    """The check can fail: a record where the GPU says the opposite of what the source expects shows 'refuted'."""
    import json

    data = json.loads(FIXTURE.read_text())
    data["claims"]["C019"]["verdict"] = "true"  # the CPU ledger expects false
    wrong = tmp_path / "gpu_record.fixture.json"
    wrong.write_text(json.dumps(data))
    monkeypatch.setenv(RECORD_ENV, str(wrong))
    nb = nbformat.read(LESSON, as_version=4)
    execute(nb, LESSON.name, cwd=LESSON.parent, cell_timeout=120)
    page = _html(_cell(nb, "record = load_record()"), "outcome")
    assert re.search(r">\s*C019\s*<.*?refuted: the GPU says true", page, re.S)
    lines = _text(_cell(nb, "lines = [")).strip().splitlines()
    assert "1 of 10 gpu-only expectations were confirmed and 1 refuted" in lines[4]


def test_without_a_record_it_says_so_in_one_line(tmp_path, monkeypatch):
    """Only the cells section 5 needs: the imports, the table, and the record cell."""
    nb = nbformat.read(LESSON, as_version=4)
    keep = [
        c
        for c in nb.cells
        if c.cell_type == "code"
        and any(
            k in c.source
            for k in ("LEDGER_CSV, LEDGER_META = cache_paths()", "raw = pd.read_csv", "record = load_record()")
        )
    ]
    assert len(keep) == 3
    nb.cells = keep
    monkeypatch.setenv(RECORD_ENV, str(tmp_path / "no_record.json"))
    execute(nb, LESSON.name, cwd=LESSON.parent, cell_timeout=120)
    lines = [ln for ln in _text(nb.cells[-1]).strip().splitlines() if not ln.startswith("<pandas.")]
    assert lines == [
        "No recorded GPU ledger in this copy of the course: `torchcontracts record` on a GPU machine writes one.",
        "10 gpu-only verdicts here; what their basis expects a GPU to show:",
    ]
