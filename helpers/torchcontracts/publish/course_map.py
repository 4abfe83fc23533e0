"""The README's course map, made from the course manifest and the notebooks' headers (never edited by hand).

``torchcontracts course-map`` prints it; ``--write`` puts it between the README's ``course-map`` markers, and
``torchcontracts new-lesson`` does so too. tests/course/test_time_estimates.py fails when the README's copy is stale,
so a contributor edits only the notebook (its header's time) and the manifest row (title, labs, CPU / CUDA).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from torchcontracts.course import Lesson, header_minutes, lessons

__all__ = ["BEGIN", "END", "course_map", "readme_with_map", "run"]

BEGIN, END = "<!-- course-map: made by `torchcontracts course-map --write` -->", "<!-- /course-map -->"
HEAD = (
    "| # | lesson | lab | time (from each notebook's header) | CPU | needs CUDA for |\n"
    "| --- | --- | --- | --- | --- | --- |"
)


def _points(lab: str) -> str:
    try:
        from torchcontracts.labs.load import load

        return f"{load(lab).total_points:g} pts"
    except Exception:  # noqa: BLE001 - a lab whose checks do not load yet: the map still shows it
        return "pts unknown"


def _lab_cell(les: Lesson) -> str:
    if not les.labs:
        return f"- ({les.lab_note})" if les.lab_note else "-"
    cells = []
    for lab in les.labs:
        number, _, name = lab.partition("_")
        extra = ", ".join(x for x in (_points(lab), les.lab_note) if x)
        cells.append(f"[{number} {name.replace('_', ' ')}](labs/{lab}.ipynb) ({extra})")
    return "; ".join(cells)


def _time_cell(root: Path, les: Lesson) -> str:
    text = f"{header_minutes(root / les.notebook)} min"
    for lab in les.labs:
        text += f" + {header_minutes(root / 'labs' / f'{lab}.ipynb')} min lab"
    return text


def course_map(root: Path, rows: Sequence[Lesson] | None = None) -> str:
    """The course map as a markdown table, one row per lesson of the manifest (or of ``rows``, e.g. with a row not written yet)."""
    rows = [
        f"| {les.number} | [{les.title}]({les.notebook}) | {_lab_cell(les)} | {_time_cell(root, les)} | {les.cpu} | "
        f"{les.cuda} |"
        for les in (lessons() if rows is None else rows)
    ]
    return "\n".join([HEAD, *rows])


def readme_with_map(readme: str, root: Path, rows: Sequence[Lesson] | None = None) -> str:
    """The README text with the map between its markers; ValueError when the markers are missing."""
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"the README has no course-map markers ({BEGIN} ... {END})")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{course_map(root, rows)}\n{END}{tail}"


def run(args: argparse.Namespace) -> int:
    from torchcontracts.labs.format import find_root

    root = find_root()
    if not args.write:
        print(course_map(root))
        return 0
    readme = root / "README.md"
    try:
        new = readme_with_map(readme.read_text(encoding="utf-8"), root)
    except (OSError, ValueError) as err:
        print(f"course-map: {err}")
        return 1
    if new != readme.read_text(encoding="utf-8"):
        readme.write_text(new, encoding="utf-8")
        print("course-map: README.md updated")
    else:
        print("course-map: README.md is up to date")
    return 0
