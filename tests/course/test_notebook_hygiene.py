"""Notebooks are committed clean, valid, and open with the header block learners rely on."""

from __future__ import annotations

import re

import nbformat
import pytest

from conftest import all_notebook_paths, lesson_paths, read, solution_paths

HEADER_PARTS = ["Learning objectives", "Time", "Prerequisites", "CPU / CUDA", "Verified with torch"]


@pytest.mark.parametrize("path", all_notebook_paths(), ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs_or_counts(path):
    nb = read(path)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{path.name}: cells {dirty} keep outputs; clear them before committing"


@pytest.mark.parametrize("path", all_notebook_paths(), ids=lambda p: p.name)
def test_notebook_is_valid_nbformat(path):
    nbformat.validate(read(path))


@pytest.mark.parametrize("path", lesson_paths() + solution_paths(), ids=lambda p: p.name)
def test_notebook_opens_with_the_header_block(path):
    first = read(path).cells[0]
    assert first.cell_type == "markdown", f"{path.name}: the first cell must be the markdown header"
    missing = [part for part in HEADER_PARTS if part not in first.source]
    assert not missing, f"{path.name}: header lacks {missing}"


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.name)
def test_lesson_ends_with_what_you_proved(path):
    text = "\n".join(c.source for c in read(path).cells if c.cell_type == "markdown")
    assert "What you proved" in text, f"{path.name}: add a closing 'What you proved' summary"


def test_lesson_numbers_are_unique_and_ordered():
    numbers = [p.name[:2] for p in lesson_paths()]
    assert numbers == sorted(set(numbers)), numbers
    assert all(re.fullmatch(r"\d\d", n) for n in numbers)


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.name)
def test_one_verdict_idiom(path):
    """`tc.verdict(...)` returns None and prints its line: no `_ =` in front, one statement per verdict."""
    for cell in read(path).cells:
        if cell.cell_type == "code":
            assert not re.search(r"^\s*\w+\s*=\s*tc\.verdict\(", cell.source, re.M), (
                f"{path.name}: write tc.verdict(...)"
            )
