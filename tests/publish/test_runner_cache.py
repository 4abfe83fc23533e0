"""A lesson executed once in a test run is read back, not executed again (publish.runner's cache)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from torchcontracts.publish import runner


def _lesson(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "99_cache_probe.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nbformat.write(nb, path)
    return path


def test_a_clean_run_is_read_back_and_a_changed_or_failing_lesson_runs_again(tmp_path, monkeypatch):
    monkeypatch.setenv(runner.CACHE_ENV, str(tmp_path / "cache"))
    counter = tmp_path / "runs.txt"
    src = f"with open({str(counter)!r}, 'a') as f: f.write('x')\nprint('ran')"
    path = _lesson(tmp_path, src)
    first = runner.run_lesson(path)
    again = runner.run_lesson(path)
    assert not first.error and not again.error
    assert counter.read_text() == "x", "the second run should have been read back"
    assert again.nb.cells[0].outputs[0]["text"] == "ran\n"
    monkeypatch.setenv("TORCHCONTRACTS_GPU_RECORD", str(tmp_path / "other.json"))  # another environment: run
    runner.run_lesson(path)
    assert counter.read_text() == "xx"
    broken = _lesson(tmp_path, src + "\nraise ValueError('no')")
    assert runner.run_lesson(broken).error and runner.run_lesson(broken).error
    assert counter.read_text() == "xxxx", "a failing lesson is never kept"


def test_without_the_variable_every_run_executes(tmp_path, monkeypatch):
    monkeypatch.delenv(runner.CACHE_ENV, raising=False)
    counter = tmp_path / "runs.txt"
    path = _lesson(tmp_path, f"with open({str(counter)!r}, 'a') as f: f.write('x')")
    runner.run_lesson(path)
    runner.run_lesson(path)
    assert counter.read_text() == "xx"


pytestmark = pytest.mark.slow  # starts kernels
