"""Time estimates live in one place, each notebook's header; the README's course map is made from them and the
course manifest (titles, labs, what runs on a CPU and what needs CUDA) by `torchcontracts course-map --write`."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from conftest import ROOT, lab_paths, lesson_paths
from torchcontracts.course import header_minutes, lab_ids, lessons
from torchcontracts.publish.course_map import course_map, readme_with_map


def test_every_notebook_header_states_a_time():
    for path in [*lesson_paths(), *lab_paths()]:
        assert header_minutes(path), path.name


def test_the_readme_course_map_is_made_from_the_manifest_and_the_headers():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme_with_map(readme, ROOT) == readme, (
        "the README's course map is stale: run `torchcontracts course-map --write`"
    )


def test_the_course_map_shows_each_lessons_time_labs_and_cuda_line():
    table = course_map(ROOT)
    for les in lessons():
        row = next(line for line in table.splitlines() if line.startswith(f"| {les.number} | "))
        assert f"[{les.title}]({les.notebook})" in row and row.endswith(f"| {les.cpu} | {les.cuda} |"), row
        assert f"| {header_minutes(ROOT / les.notebook)} min" in row, row
        for lab in les.labs:
            assert f"(labs/{lab}.ipynb)" in row and f"+ {header_minutes(ROOT / 'labs' / f'{lab}.ipynb')} min lab" in row


def test_a_stale_course_map_is_caught(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme_with_map(readme.replace("| 15 min |", "| 16 min |", 1), ROOT) == readme
    with pytest.raises(ValueError, match="markers"):
        readme_with_map("# no map here", ROOT)


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
