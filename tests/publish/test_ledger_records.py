"""With TORCHCONTRACTS_LEDGER_DIR set, a test run leaves each lesson's verdicts in <dir>/<lesson>.jsonl (the
plugin in tests/conftest.py), and only the lesson kernels' verdicts: CI builds each leg's ledger from them."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from torchcontracts.course import lesson
from torchcontracts.publish.ledger import cache_paths, rows_from_records

pytestmark = pytest.mark.slow  # runs one lesson under nbval in a child pytest

LESSON = lesson("01")  # a short lesson with claims


def test_a_test_run_leaves_exactly_the_lessons_verdicts(tmp_path):
    folder = tmp_path / "verdicts"
    env = dict(os.environ, TORCHCONTRACTS_LEDGER_DIR=str(folder))
    env.pop("TORCHCONTRACTS_LEDGER", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:xdist",
            "-q",
            LESSON.notebook,
            "tests/publish/test_ledger_records.py::test_an_in_process_verdict_is_never_a_lessons",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert sorted(p.name for p in folder.iterdir()) == [f"{LESSON.stem}.jsonl"]
    with open(cache_paths()[0], newline="", encoding="utf-8") as fh:
        expected = {r["id"] for r in csv.DictReader(fh) if r["notebook"] == f"{LESSON.stem}.ipynb"}
    rows = rows_from_records(folder)
    assert {r["id"] for r in rows if r["verdict"] != "not covered"} == expected
    assert PROBE not in (folder / f"{LESSON.stem}.jsonl").read_text(encoding="utf-8")


PROBE = "an in-process probe, not a lesson's verdict"


def test_an_in_process_verdict_is_never_a_lessons():
    """Run after lesson 01 in the child above: had the plugin left the variable set, this would land in 01's file."""
    import torchcontracts as tc

    tc.verdict("C001", "true", evidence=PROBE, proof=True)
