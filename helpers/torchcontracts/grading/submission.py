"""The submission reader: load a notebook without trusting it, and tell which lab it is.

Every problem becomes a ``SubmissionError`` whose message is the one-line reason a learner sees.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from torchcontracts.course import lab_ids
from torchcontracts.core.nbio import nbformat

from torchcontracts.labs.format import cell_meta, notebook_lab

__all__ = ["GradeSetupError", "SubmissionError", "course_labs", "identify_lab", "read_submission"]

MAX_BYTES = 50 * 2**20  # a notebook bigger than this is not a lab submission


class SubmissionError(ValueError):
    """This submission cannot be graded; the message is the one-line reason for the gradebook."""


class GradeSetupError(RuntimeError):
    """The course itself is not ready for grading (missing lab, stale labs/, no solutions/)."""


def _read_plain_file(path: Path, course: Path | None) -> bytes:
    """The bytes of a regular file that is not a link, and not one of the course's own notebooks."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        if path.is_symlink():
            raise SubmissionError("the submission is a symbolic link: submit the notebook file itself") from None
        raise SubmissionError(f"cannot read the file: {err.strerror or err}") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SubmissionError("not a notebook: the submission is not a regular file")
        if course is not None:
            for own in [course / folder / f"{lab}.ipynb" for lab in lab_ids() for folder in ("solutions", "labs")]:
                try:
                    if os.path.samestat(info, own.stat()) and own.resolve() != path.resolve():
                        raise SubmissionError(
                            "the submission is the course's own notebook (a link to it), not a learner's file"
                        )
                except OSError:
                    continue
        return fh.read(MAX_BYTES + 1)


def _check_cells(cells: list[Any]) -> None:
    """Every cell a dict with a known type and text source: a malformed one is named, not a grader error."""
    for n, cell in enumerate(cells, 1):
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise SubmissionError(
                f"not a notebook: cell {n} is not a code, markdown or raw cell; "
                "open the file in Jupyter and save it again"
            )
        src = cell.get("source", "")
        if not (isinstance(src, str) or isinstance(src, list) and all(isinstance(x, str) for x in src)):
            raise SubmissionError(
                f"not a notebook: the source of cell {n} is not text; open the file in Jupyter and save it again"
            )
        if not isinstance(cell.get("metadata", {}), dict):
            raise SubmissionError(f"not a notebook: the metadata of cell {n} is not a dict")


def read_submission(path: Path, course: Path | None = None) -> nbformat.NotebookNode:
    """Load a notebook without trusting it; raise ``SubmissionError`` with a one-line reason."""
    raw = _read_plain_file(path, course)
    if not raw.strip():
        raise SubmissionError("empty file: the submission has no content; download the notebook again from Jupyter")
    if len(raw) > MAX_BYTES:
        raise SubmissionError(f"file too large ({len(raw) / 2**20:.0f} MB): clear the outputs and submit again")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        where = f" (line {err.lineno}, column {err.colno})" if isinstance(err, json.JSONDecodeError) else ""
        raise SubmissionError(
            f"not a notebook: the file is not valid JSON{where}; download the .ipynb again from Jupyter"
        ) from None
    if not isinstance(data, dict) or "cells" not in data and "worksheets" not in data:
        raise SubmissionError("not a notebook: the JSON has no cells; submit the .ipynb file Jupyter saved")
    if data.get("nbformat") != 4:
        raise SubmissionError(
            f"unsupported notebook format nbformat {data.get('nbformat')!r}: "
            "open it in Jupyter 4+ and save it again (nbformat 4)"
        )
    if not isinstance(data.get("cells"), list) or not data["cells"]:
        raise SubmissionError("empty notebook: it has no cells; submit the lab notebook you worked in")
    _check_cells(data["cells"])
    if not isinstance(data.get("metadata", {}), dict):
        raise SubmissionError("not a notebook: its metadata is not a dict")
    try:
        return nbformat.from_dict(data)
    except Exception as err:  # noqa: BLE001 - any odd structure gets one line
        raise SubmissionError(f"not a notebook: {type(err).__name__}") from None


def course_labs(root: Path) -> list[str]:
    """The labs this course can grade: the manifest's labs that have a ``labs/<lab>.ipynb``."""
    return sorted(lab for lab in lab_ids() if (root / "labs" / f"{lab}.ipynb").is_file())


def identify_lab(nb: nbformat.NotebookNode, path: Path, root: Path, expected: str | None = None) -> tuple[str, str]:
    """Return (lab id, note); the note says how the lab was guessed when the metadata lacks it."""
    labs = course_labs(root)
    here = ", ".join(labs) or "none (labs/ is empty)"
    lab, note = notebook_lab(nb), ""
    if lab is None:
        ids = {str(cell_meta(c).get("id", "")).split("/")[0] for c in nb.cells} - {""}
        by_name = [x for x in labs if x in path.name or x.split("_")[0] == path.name.split("_")[0]]
        if len(ids) == 1:
            lab, note = ids.pop(), "lab identified from its cell ids (notebook metadata lacks torchcontracts.lab)"
        elif len(by_name) == 1:
            lab, note = by_name[0], "lab guessed from the file name (notebook metadata lacks torchcontracts.lab)"
        else:
            raise SubmissionError(
                "cannot tell which lab this is: no torchcontracts.lab in its metadata and no "
                f"lab cells; labs here: {here}"
            )
    if expected and lab != expected:
        raise SubmissionError(f"wrong lab: this is the notebook of {lab}, expected {expected}")
    if lab not in labs:
        raise SubmissionError(f"unknown lab {lab!r}: this course has {here}")
    return lab, note
