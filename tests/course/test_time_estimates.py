"""Time estimates live in one place, each notebook's header; the README's course map must agree with them and with
the course manifest (titles, labs, what runs on a CPU and what needs CUDA)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT, lab_paths, lesson_paths
from torchcontracts.course import header_minutes, lab_ids, lessons

_ROW = re.compile(
    r"^\| (\d\d) \| \[(.+?)\]\((notebooks/[^)]+)\) \| (.*?) \| (\d+(?:-\d+)?) min(?: \+ (\d+(?:-\d+)?) min lab)? \| "
    r"(.*?) \| (.*?) \|$",
    re.MULTILINE,
)
_LINKED_LAB = re.compile(r"\(labs/(lab\d\d_\w+)\.ipynb\)")


def test_every_notebook_header_states_a_time():
    for path in [*lesson_paths(), *lab_paths()]:
        assert header_minutes(path), path.name


def _course_map() -> dict[str, dict]:
    """Lesson number -> the README row's fields."""
    rows = {}
    for m in _ROW.finditer((ROOT / "README.md").read_text(encoding="utf-8")):
        number, title, notebook, lab, minutes, lab_minutes, cpu, cuda = m.groups()
        rows[number] = dict(
            title=title,
            notebook=notebook,
            labs=_LINKED_LAB.findall(lab),
            minutes=minutes,
            lab_minutes=lab_minutes,
            cpu=cpu,
            cuda=cuda,
        )
    return rows


def test_the_readme_course_map_is_the_manifest_with_the_headers_times():
    rows = _course_map()
    assert [les.number for les in lessons()] == list(rows), "the README's course map rows differ from the manifest"
    for les in lessons():
        row = rows[les.number]
        assert (row["title"], row["notebook"], row["cpu"], row["cuda"]) == (les.title, les.notebook, les.cpu, les.cuda)
        assert row["labs"] == list(les.labs), f"lesson {les.number}: README links {row['labs']}"
        assert row["minutes"] == header_minutes(ROOT / les.notebook), f"lesson {les.number}: README says {row}"
        for lab in les.labs:
            assert row["lab_minutes"] == header_minutes(ROOT / "labs" / f"{lab}.ipynb"), f"{lab}: README says {row}"


def test_every_lab_belongs_to_exactly_one_lesson():
    assert sorted(lab_ids()) == sorted(set(lab_ids()))
    assert all(p.exists() for p in lab_paths()), "a lab of the manifest has no notebook in labs/"


@pytest.mark.parametrize(
    "text, want",
    [
        ("**Time:** about 45 minutes (runs in a minute)", "45"),
        ("**Time** about 50 minutes.", "50"),
        ("**Time:** 60 to 90 minutes.", "60-90"),
    ],
)
def test_the_header_parser_reads_the_forms_the_notebooks_use(tmp_path: Path, text, want):
    path = tmp_path / "x.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# X\n{text}")]), path)
    assert header_minutes(path) == want
