"""``torchcontracts new-lesson NN slug "Title"``: scaffold a lesson that runs, passes the course's tests and is listed.

It writes the lesson's package folder (``helpers/torchcontracts/lessons/lNN_<first word of slug>/`` with
``__init__.py`` and ``tryit.py``: one Try-it exercise), its notebook ``notebooks/NN_slug.ipynb`` (the header block,
an example claim cell, "What you proved", a Try-it cell), appends its ``Lesson(...)`` row to ``LESSONS`` in
``course.py`` and its row to the README's course map. An existing number, slug or folder is refused in one line.

The example claim cell judges no claim. Each of the course's 124 claims belongs to exactly one lesson
(``data/claim_places.csv``), so an example that asserted a verdict for one would judge it twice, and a new claim id
would break the course data. The cell measures, computes ``proof`` and asserts it, with ``tc.claim`` and
``tc.verdict`` written out but commented and holding the placeholder id ``Cnnn``: the ledger gets no record from
it, and the claim tests see no verdict call. A contributor gives a claim to the lesson in ``claim_places.csv``,
writes its id there and uncomments the two lines.
"""

from __future__ import annotations

import argparse
import json
import re
from importlib import metadata
from pathlib import Path

__all__ = ["add_arguments", "new_lesson", "run"]

_NUMBER = re.compile(r"\d\d")
_SLUG = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
MINUTES = 20  # the header's first estimate; the contributor corrects it


class ScaffoldError(ValueError):
    """A lesson that cannot be scaffolded; the message is one line."""


def _torch_version() -> str:
    try:
        return ".".join(metadata.version("torch").split("+")[0].split(".")[:2])
    except metadata.PackageNotFoundError:
        return "2.x"


def _header(number: str, title: str) -> str:
    return (
        f"# {number} · {title}\n\n"
        "**Learning objectives**\n"
        "- Say what a learner can do after this lesson, one line each (edit these).\n"
        "- Test a claim with a measurement: state it, measure, and assert a verdict computed from the measurement.\n\n"
        f"**Time:** about {MINUTES} minutes.\n\n"
        "**Prerequisites:** lesson 00 (how claims, verdicts and Try-it exercises work).\n\n"
        "**CPU / CUDA:** everything here runs on a CPU.\n\n"
        f"Verified with torch {_torch_version()} on CPU."
    )


_IMPORTS = """import torch

import torchcontracts as tc  # noqa: F401 - the claim cells call tc.claim and tc.verdict once they judge a claim"""

_CLAIM_INTRO = """## 1. A claim cell (example)

**Predict.** Does `x.transpose(0, 1)` copy `x`, or is it a view over the same memory?

The next cell is an EXAMPLE of a claim cell, written by `torchcontracts new-lesson`: it measures, computes a proof
from the measurement and asserts it. It judges no claim of the course yet, so the ledger gets nothing from it."""

_CLAIM_CELL = """# EXAMPLE claim cell (torchcontracts new-lesson). Each of the course's claims belongs to one lesson
# (data/claim_places.csv). To judge one here: give it to lesson {number} there, write its id instead of Cnnn in the
# two commented lines, uncomment them, and make the measurement the one that claim is about.
# tc.claim("Cnnn")
x = torch.arange(6.0).reshape(2, 3)
t = x.transpose(0, 1)
shares = t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
proof = shares and t.stride() == (1, 3)  # False if torch had copied x
evidence = f"x.transpose(0, 1) shares x's storage ({{shares}}) and reads it with strides {{t.stride()}}: a view"
print("EXAMPLE, no claim judged yet:", evidence)
assert proof, evidence
# tc.verdict("Cnnn", "true", evidence=evidence, proof=proof)"""

_PROVED = """## What you proved
- A transpose is a view: it shares its tensor's storage and only swaps the strides (replace with this lesson's
  findings, one line per claim it judges)."""

_TRYIT_INTRO = """## Try it

One short exercise, not graded. Write the function, run the cell, and the check answers at once.

**{number}.1** Write `numel(shape)`: how many elements a tensor of this shape holds. Predict first: how many does
shape `()` hold, and how many does `(0, 5)`?"""

_TRYIT_CELL = """from torchcontracts.lessons.{package}.tryit import EXERCISES


def numel(shape):
    raise NotImplementedError  # your code


EXERCISES["{number}.1"].check(numel);"""

_TRYIT_PY = '''"""Lesson {number}'s "Try it" exercises (from `torchcontracts new-lesson`: make it yours)."""

from __future__ import annotations

from typing import Any

import torch

from torchcontracts.checks import Case, Check, Comparison
from torchcontracts.checks.tryit import Exercise, exercises_by_id

__all__ = ["EXERCISES"]


def _shapes(seed: int) -> list[Case]:
    return [Case(f"shape {{shape}}", (shape,)) for shape in [(2, 3), (4,), (), (0, 5), (2, 3, 4)]]


def _judge(case: Case, out: Any) -> list[Comparison]:
    expected = torch.empty(case.args[0]).numel()
    is_int = isinstance(out, int) and not isinstance(out, bool)
    ok = is_int and out == expected
    status = "right" if ok else ("wrong answer" if is_int else "return an int")
    return [Comparison.plain("answer", ok, status, expected=expected, got=out)]


EXERCISES = exercises_by_id(
    [
        Exercise(
            "{number}.1",
            "how many elements does a shape hold?",
            "numel",
            (Check("{number}.1", "sizes multiply, and () holds one", _shapes, _judge),),
            hint="multiply the sizes; the product of no sizes is 1",
        )
    ]
)
'''


def _notebook(number: str, title: str, package: str) -> str:
    from torchcontracts.core.nbio import nbformat

    new_code_cell, new_markdown_cell, new_notebook = (
        nbformat.v4.new_code_cell,
        nbformat.v4.new_markdown_cell,
        nbformat.v4.new_notebook,
    )

    nb = new_notebook(
        cells=[
            new_markdown_cell(_header(number, title)),
            new_code_cell(_IMPORTS),
            new_markdown_cell(_CLAIM_INTRO),
            new_code_cell(_CLAIM_CELL.format(number=number)),
            new_markdown_cell(_PROVED),
            new_markdown_cell(_TRYIT_INTRO.format(number=number)),
            new_code_cell(_TRYIT_CELL.format(package=package, number=number)),
        ],
        metadata={
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
    )
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


def _manifest_row(number: str, slug: str, title: str, package: str) -> str:
    q = lambda s: json.dumps(s, ensure_ascii=False)  # noqa: E731 - a Python string literal in double quotes
    return f"    Lesson({q(number)}, {q(slug)}, {q(title)}, {q(package)}),\n"


def _append_row(course_py: str, row: str) -> str:
    """``course.py`` with ``row`` added as the last element of the ``LESSONS`` tuple."""
    start = course_py.index("LESSONS: tuple[Lesson, ...] = (")
    end = course_py.index("\n)\n", start)  # the tuple's closing parenthesis, alone on its line
    return course_py[: end + 1] + row + course_py[end + 1 :]


def new_lesson(root: Path, number: str, slug: str, title: str) -> list[Path]:
    """Scaffold lesson ``number`` in the course at ``root``; return the files written or changed.

    :class:`ScaffoldError` (one line) for a bad or taken number, slug or folder; nothing is written then.
    """
    from torchcontracts import course

    title = " ".join(title.split())
    if not _NUMBER.fullmatch(number):
        raise ScaffoldError(f"new-lesson: the number must be two digits, like 11, not {number!r}")
    if not _SLUG.fullmatch(slug):
        raise ScaffoldError(f"new-lesson: the slug must be lower_case_words, like example_topic, not {slug!r}")
    if not title:
        raise ScaffoldError("new-lesson: give the lesson a title")
    package = f"l{number}_{slug.split('_')[0]}"
    pkg_dir = root / "helpers" / "torchcontracts" / "lessons" / package
    notebook = root / "notebooks" / f"{number}_{slug}.ipynb"
    course_py = root / "helpers" / "torchcontracts" / "course.py"
    for les in course.LESSONS:
        if les.number == number:
            raise ScaffoldError(f"new-lesson: lesson {number} exists already ({les.notebook}): pick a free number")
        if les.slug == slug:
            raise ScaffoldError(f"new-lesson: the slug {slug!r} is lesson {les.number}'s already: pick another")
        if les.package == package:
            raise ScaffoldError(f"new-lesson: the folder {package} is lesson {les.number}'s already: pick another slug")
    for taken in (pkg_dir, notebook):
        if taken.exists():
            raise ScaffoldError(f"new-lesson: {taken.relative_to(root)} exists already: pick another number or slug")
    if not course_py.is_file():
        raise ScaffoldError(f"new-lesson: {course_py} not found: run this from the course root")
    manifest = _append_row(course_py.read_text(encoding="utf-8"), _manifest_row(number, slug, title, package))
    pkg_dir.mkdir(parents=True)
    (pkg_dir / "__init__.py").write_text(
        f'"""Lesson {number}: {title} (its helpers, Try-it exercises and lab checks)."""\n', encoding="utf-8"
    )
    (pkg_dir / "tryit.py").write_text(_TRYIT_PY.format(number=number), encoding="utf-8")
    notebook.write_text(_notebook(number, title, package), encoding="utf-8")
    course_py.write_text(manifest, encoding="utf-8")
    written = [pkg_dir / "__init__.py", pkg_dir / "tryit.py", notebook, course_py]
    readme = root / "README.md"
    if readme.is_file():  # the course map, made by the one generator, with the new row the manifest now has
        from torchcontracts.publish.course_map import readme_with_map

        text = readme.read_text(encoding="utf-8")
        lessons = [*course.lessons(), course.Lesson(number, slug, title, package)]
        try:
            new = readme_with_map(text, root, lessons)
        except ValueError:  # a README without the map's markers is left as it is
            new = text
        if new != text:
            readme.write_text(new, encoding="utf-8")
            written.append(readme)
    return written


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The arguments of ``torchcontracts new-lesson``."""
    p.add_argument("number", help="two digits, the next free lesson number, e.g. 11")
    p.add_argument("slug", help="the notebook's name after the number, lower_case_words, e.g. example_topic")
    p.add_argument("title", help="the title the course map shows, in quotes")
    return p


def run(args: argparse.Namespace) -> int:
    """``torchcontracts new-lesson``: scaffold, then say what was written and what to edit next."""
    from torchcontracts.labs.format import find_root

    try:
        root = find_root()
        written = new_lesson(root, args.number, args.slug, args.title)
    except (ScaffoldError, FileNotFoundError) as err:
        print(err)
        return 1
    for path in written:
        print(f"  wrote {path.relative_to(root)}")
    print(
        f"new-lesson: lesson {args.number} scaffolded; now edit {written[2].relative_to(root)} and its row in "
        "helpers/torchcontracts/course.py (CONTRIBUTING.md, 'Adding a lesson')"
    )
    return 0
