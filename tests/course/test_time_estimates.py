"""Time estimates live in one place, each notebook's header; the README's course map must agree with them."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
_HEADER = re.compile(r"\*\*Time:?\*\*:?\s*(?:about\s+)?(\d+)(?:\s*(?:to|-|–)\s*(\d+))?\s*min", re.IGNORECASE)
_ROW = re.compile(r"^\| (\d\d) \| .*?\| (\d+(?:-\d+)?) min(?: \+ (\d+(?:-\d+)?) min lab)? \|", re.MULTILINE)
_LAB_LINK = re.compile(r"\(labs/(lab\d\d_\w+)\.ipynb\)")


def header_minutes(path: Path) -> str:
    """'45' or '60-90', from the notebook's first cell."""
    first = nbformat.read(path, as_version=4).cells[0].source
    found = _HEADER.search(first)
    assert found, f"{path.name}: its first cell has no '**Time:** about N minutes' line"
    return found.group(1) + (f"-{found.group(2)}" if found.group(2) else "")


def test_every_notebook_header_states_a_time():
    for path in [*sorted((ROOT / "notebooks").glob("*.ipynb")), *sorted((ROOT / "labs").glob("*.ipynb"))]:
        assert header_minutes(path)


def _course_map() -> dict[str, tuple[str, str, str | None]]:
    """Lesson number -> (lesson minutes, lab minutes, the lab the row links to), from the README's rows.

    A lab belongs to the lesson whose row links it (lab05 to lesson 06, lab06 to 08, lab07 to 09), not to the
    lesson with its number."""
    text = (ROOT / "README.md").read_text()
    rows = {}
    for line in text.splitlines():
        found = _ROW.match(line)
        if found:
            link = _LAB_LINK.search(line)
            rows[found.group(1)] = (found.group(2), found.group(3), link.group(1) if link else None)
    return rows


def test_the_readme_course_map_agrees_with_the_notebook_headers():
    rows = _course_map()
    assert rows, "the README's course map has no rows with times"
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        number = path.name[:2]
        assert number in rows, f"lesson {number} is missing from the README's course map"
        lesson, lab, lab_id = rows[number]
        assert lesson == header_minutes(path), f"lesson {number}: README says {lesson} min"
        if lab_id:
            assert lab == header_minutes(ROOT / "labs" / f"{lab_id}.ipynb"), f"{lab_id}: README says {lab} min"


def test_every_lab_appears_in_exactly_one_course_map_row():
    linked = [lab for _, _, lab in _course_map().values() if lab]
    labs = sorted(p.stem for p in (ROOT / "labs").glob("*.ipynb"))
    assert sorted(linked) == labs, f"README rows link {sorted(linked)}, labs/ holds {labs}"


@pytest.mark.parametrize(
    "text, want",
    [
        ("**Time:** about 45 minutes (runs in a minute)", "45"),
        ("**Time** about 50 minutes.", "50"),
        ("**Time:** 60 to 90 minutes.", "60-90"),
    ],
)
def test_the_header_parser_reads_the_forms_the_notebooks_use(tmp_path, text, want):
    path = tmp_path / "x.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# X\n{text}")]), path)
    assert header_minutes(path) == want
