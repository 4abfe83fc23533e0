"""Time estimates live in one place, each notebook's header; the README's course map must agree with them."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
_HEADER = re.compile(r"\*\*Time:?\*\*:?\s*(?:about\s+)?(\d+)(?:\s*(?:to|-|–)\s*(\d+))?\s*min", re.IGNORECASE)
_ROW = re.compile(r"^\| (\d\d) \| .*?\| (\d+(?:-\d+)?) min(?: \+ (\d+(?:-\d+)?) min lab)? \|", re.MULTILINE)


def header_minutes(path: Path) -> str:
    """'45' or '60-90', from the notebook's first cell."""
    first = nbformat.read(path, as_version=4).cells[0].source
    found = _HEADER.search(first)
    assert found, f"{path.name}: its first cell has no '**Time:** about N minutes' line"
    return found.group(1) + (f"-{found.group(2)}" if found.group(2) else "")


def test_every_notebook_header_states_a_time():
    for path in [*sorted((ROOT / "notebooks").glob("*.ipynb")), *sorted((ROOT / "labs").glob("*.ipynb"))]:
        assert header_minutes(path)


def test_the_readme_course_map_agrees_with_the_notebook_headers():
    rows = {n: (lesson, lab) for n, lesson, lab in _ROW.findall((ROOT / "README.md").read_text())}
    assert rows, "the README's course map has no rows with times"
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        number = path.name[:2]
        assert number in rows, f"lesson {number} is missing from the README's course map"
        lesson, lab = rows[number]
        assert lesson == header_minutes(path), f"lesson {number}: README says {lesson} min"
        labs = sorted((ROOT / "labs").glob(f"lab{number}_*.ipynb"))
        if labs:
            assert lab == header_minutes(labs[0]), f"lab {number}: README says {lab} min"


@pytest.mark.parametrize("text, want", [("**Time:** about 45 minutes (runs in a minute)", "45"),
                                        ("**Time** about 50 minutes.", "50"), ("**Time:** 60 to 90 minutes.", "60-90")])
def test_the_header_parser_reads_the_forms_the_notebooks_use(tmp_path, text, want):
    path = tmp_path / "x.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# X\n{text}")]), path)
    assert header_minutes(path) == want
