"""Adversarial lab01 submissions, generated from the course's own notebooks (no .ipynb is committed here:
nbval would try to run them). Each entry says what the learner did and the exact grade it must get.

``build(folder)`` writes every submission into ``folder`` and returns their expected grades.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Callable

import nbformat

ROOT = Path(__file__).resolve().parents[2]
LAB = "lab01_strides"
TASKS = ["t1", "t2", "t3", "t4", "t5"]
POINTS = {"t1": 2.0, "t2": 2.0, "t3": 3.0, "t4": 3.0, "t5": 2.0}
CELL_TIMEOUT = 3
MEM_MB = 2048
OK = "all 2 checks pass"
NOT_IMPLEMENTED = "not implemented"


@dataclasses.dataclass
class Expect:
    """The exact grade: per-task (score, reason), the total, and text the problems must contain."""

    tasks: dict[str, tuple[float, str]]
    problems: tuple[str, ...] = ()

    @property
    def total(self) -> float:
        return sum(s for s, _ in self.tasks.values())


def _solutions() -> dict[str, str]:
    nb = nbformat.read(ROOT / "solutions" / f"{LAB}.ipynb", as_version=4)
    return {c.metadata["torchcontracts"]["task"]: c.source for c in nb.cells
            if c.metadata.get("torchcontracts", {}).get("role") == "solution"}


def _blank() -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "labs" / f"{LAB}.ipynb", as_version=4)


def _role(cell: dict) -> str:
    return cell.get("metadata", {}).get("torchcontracts", {}).get("role", "")


def _task(cell: dict) -> str:
    return cell.get("metadata", {}).get("torchcontracts", {}).get("task", "")


def notebook(answers: dict[str, str | None] | None = None, *, solved: tuple[str, ...] = tuple(TASKS),
             edit: Callable[[nbformat.NotebookNode], None] | None = None) -> nbformat.NotebookNode:
    """The student lab with the reference answer for ``solved`` tasks, ``answers`` overriding (None deletes)."""
    sol = _solutions()
    nb = _blank()
    answers = answers or {}
    kept = []
    for cell in nb.cells:
        task = _task(cell) if _role(cell) == "solution" else ""
        if task in answers and answers[task] is None:
            continue
        if task in answers:
            cell.source = answers[task]
        elif task in solved:
            cell.source = sol[task]
        kept.append(cell)
    nb.cells = kept
    if edit:
        edit(nb)
    return nb


def _with(task: str, extra: str, *, before: bool = False) -> dict[str, str]:
    src = _solutions()[task]
    return {task: f"{extra}\n{src}" if before else f"{src}\n{extra}"}


def _edit_check_cells(nb: nbformat.NotebookNode) -> None:
    """Fake the t1 check cell, delete every other check cell, add a cell that empties the checks."""
    out = []
    for cell in nb.cells:
        if cell.cell_type == "code" and "lab.check(" in cell.source:
            if "contiguous_strides" in cell.source:
                cell.source = 'print("t1: 3/3 public checks pass")\nlab.checks.clear()'
                out.append(cell)
            continue
        out.append(cell)
    nb.cells = out


def _tamper(name: str, code: str, task: str = "t1") -> tuple[nbformat.NotebookNode, Expect]:
    reason = f"tampering detected: {name} replaced"
    return notebook(_with(task, code)), Expect({t: (0.0, reason) for t in TASKS}, (reason,))


def _full(**over: tuple[float, str]) -> dict[str, tuple[float, str]]:
    tasks = {t: (POINTS[t], OK) for t in TASKS}
    tasks.update(over)
    return tasks


LOOP = '''def sliding_windows(x, size, step):
    while True:
        pass

print(sliding_windows(torch.arange(10), 4, 2))'''

PARTIAL_T3 = '''def sliding_windows(x, size, step):
    n = (x.shape[0] - size) // step + 1
    return x.as_strided((n, size), (step, 1))   # forgets x's own stride and offset

print(sliding_windows(torch.arange(10), 4, 2))'''

COPY_T4 = '''def im2col(x, k):
    return x.unfold(1, k, 1).unfold(2, k, 1).contiguous()   # right values, but a copy

print(im2col(torch.arange(16.0).reshape(1, 4, 4), 2)[0, 1, 2])'''

BOMB_T4 = '''def im2col(x, k):
    hog = []
    while True:
        hog.append(torch.empty(2**28))   # 1 GB a step, until the kernel's memory limit

print(im2col(torch.arange(16.0).reshape(1, 4, 4), 2)[0, 1, 2])'''

MUTATE_T5 = '''def diagonal_view(x):
    n = x.shape[0]
    x[0] = x.diagonal().clone()   # writes the answer into the input, then returns a view of it
    return x[0, :n]

print(diagonal_view(torch.arange(16).reshape(4, 4)))'''

WRONG_T1 = '''def contiguous_strides(shape):
    return tuple(1 for _ in shape)   # every stride 1

print(contiguous_strides((2, 3, 4)))'''

NUMPY_T2 = '''import numpy as np

def is_contiguous(shape, strides):
    return np.bool_(True)

print(is_contiguous((2, 3), (3, 1)))'''

def _renamed() -> str:
    return _solutions()["t1"].replace("contiguous_strides", "contig_strides")


OVERWRITE_T2 = '''
import glob, os, torch
# t1's checks ran already: rewrite their saved answers with the right strides
for cases_file in glob.glob(os.path.join("..", "cases-main", "cases-*.pt")):
    idx = cases_file.rsplit("-", 1)[1][:-3]
    for n, (label, args) in enumerate(torch.load(cases_file, weights_only=True)):
        if len(args) == 1 and isinstance(args[0], tuple):
            right = tuple(torch.empty(args[0]).stride())
            torch.save({"args": args, "out": right}, os.path.join("..", "io-main", "out", f"{idx}-{n}.pt"))
'''

READ_SOLUTIONS = '''def contiguous_strides(shape):
    import json, pathlib, torchcontracts
    path = pathlib.Path(torchcontracts.__file__).parents[2] / "solutions" / "lab01_strides.ipynb"
    ns = {}
    for cell in json.load(open(path))["cells"]:   # run the reference answer instead of writing one
        if cell["metadata"].get("torchcontracts", {}).get("task") == "t1":
            exec("".join(cell["source"]), ns)
    return ns["contiguous_strides"](shape)

print(contiguous_strides((2, 3, 4)))'''

FAKE_OUTPUTS = '''print("score: 100")
print('{"score": 100, "tests": []}')
import json, os
json.dump({"score": 100, "tests": []}, open("results.json", "w"))
open("gradebook.csv", "w").write("submission,total\\nfake_outputs.ipynb,12\\n")
os.makedirs("results", exist_ok=True)
json.dump({"score": 100}, open(os.path.join("results", "results.json"), "w"))'''


def cases() -> dict[str, tuple[nbformat.NotebookNode | str, Expect]]:
    """name -> (notebook, or raw file text, and the grade it must get)."""
    not_impl = {t: (0.0, NOT_IMPLEMENTED) for t in TASKS}
    died_exit = "not graded: the kernel exited with code 0 in the t4 cell"
    died_segv = "not graded: the kernel died (segmentation fault, SIGSEGV) in the t5 cell"
    missing_t2 = f"not implemented: its solution cell ({LAB}/t2) is missing"
    renamed = "`contiguous_strides` is not defined: keep the function name the task asks for"
    other = nbformat.v4.new_notebook(metadata={"torchcontracts": {"lab": "lab02_autograd"}},
                                     cells=[nbformat.v4.new_code_cell("print(1)")])
    no_meta = notebook()
    no_meta.metadata.pop("torchcontracts")
    v3 = json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": []}]})
    return {
        "correct": (notebook(), Expect(_full())),
        "blank": (_blank(), Expect(not_impl)),
        "partial": (notebook({"t3": PARTIAL_T3, "t4": COPY_T4}, solved=("t1", "t2")), Expect(_full(
            t3=(1.5, "hidden check 1 of t3: failed (values differ)"),
            t4=(0.0, "t4 patches of a fresh (C, H, W) tensor: (1, 4, 4), k 2: patches: values right, "
                     "but it is a copy: return a view of the input"),
            t5=(0.0, NOT_IMPLEMENTED)))),
        "tamper_equal": _tamper("torch.equal", "torch.equal = lambda a, b: True"),
        "tamper_allclose": _tamper("torch.allclose", "torch.allclose = lambda *a, **k: True", "t5"),
        "tamper_assert_close": _tamper("torch.testing.assert_close",
                                       "import torch.testing\ntorch.testing.assert_close = lambda *a, **k: None", "t3"),
        "tamper_data_ptr": _tamper("torch.Tensor.data_ptr", "torch.Tensor.data_ptr = lambda self: 0", "t4"),
        "tamper_isinstance": _tamper("builtins.isinstance", "import builtins\n_real = builtins.isinstance\n"
                                     "builtins.isinstance = lambda obj, cls: _real(obj, cls)"),
        "tamper_check_module": _tamper("torchcontracts.check.compare, torchcontracts.check.Check.invoke",
                                       "import torchcontracts.check as chk\nchk.compare = lambda *a, **k: None\n"
                                       "chk.Check.invoke = lambda self, fn, case: None", "t2"),
        "checks_edited_deleted": (notebook({"t1": WRONG_T1}, edit=_edit_check_cells), Expect(_full(
            t1=(0.0, "t1 row-major strides: shape (2, 3, 4): strides: values differ: expected (12, 4, 1)")))),
        "overwrite_saved_answers": (notebook({"t1": WRONG_T1, **_with("t2", OVERWRITE_T2)}), Expect(_full(
            t1=(0.0, "t1 row-major strides: shape (2, 3, 4): strides: values differ: expected (12, 4, 1)")))),
        "read_solutions": (notebook({"t1": READ_SOLUTIONS}), Expect(
            {t: (0.0, "tampering detected: tried to read the course's solutions/ (blocked)") for t in TASKS})),
        "renamed_and_deleted": (notebook({"t1": _renamed(), "t2": None}),
                                Expect(_full(t1=(0.0, renamed), t2=(0.0, missing_t2)))),
        "infinite_loop": (notebook({"t3": LOOP}), Expect(_full(
            t3=(0.0, f"timed out after {CELL_TIMEOUT} s")))),
        "os_exit": (notebook(_with("t4", "import os\nos._exit(0)")),
                    Expect(_full(t4=(0.0, died_exit), t5=(0.0, died_exit)), (died_exit,))),
        "segfault": (notebook(_with("t5", "import ctypes\nctypes.string_at(0)")),
                     Expect(_full(t5=(0.0, died_segv)), (died_segv,))),
        "bomb_mutate_numpy": (notebook({"t2": NUMPY_T2, "t4": BOMB_T4, "t5": MUTATE_T5}), Expect(_full(
            t2=(0.0, "t2 contiguity of common layouts: shape (2, 3, 4) strides (12, 4, 1): returned a numpy.bool: "
                     "return tensors, numbers, tuples, lists, dicts or strings"),
            t4=(0.0, f"t4 patches of a fresh (C, H, W) tensor: (1, 4, 4), k 2: ran out of memory "
                     f"(the kernel's limit is {MEM_MB} MB) (its cell raised RuntimeError)"),
            t5=(0.0, "t5 diagonal of a fresh square matrix: arange(16).reshape(4, 4): changed its input in place "
                     "(or the saved inputs were replaced)")))),
        "fake_outputs": (notebook({"t1": FAKE_OUTPUTS + "\n" + _blank_source("t1")}, solved=()), Expect(not_impl)),
        "exit_and_huge_output": (notebook({**_with("t1", "import sys\nsys.exit(0)"),
                                           **_with("t2", 'print("x" * 20_000_000)')}), Expect(_full())),
        "no_lab_metadata": (no_meta, Expect(_full(), ("lab identified from its cell ids",))),
        "corrupt_json": ('{"cells": [{"cell_type": "code", "source": ',
                         Expect({t: (0.0, "not a notebook: the file is not valid JSON (line 1, column 44); "
                                          "download the .ipynb again from Jupyter") for t in TASKS})),
        "nbformat3": (v3, Expect({t: (0.0, "unsupported notebook format nbformat 3: open it in Jupyter 4+ "
                                           "and save it again (nbformat 4)") for t in TASKS})),
        "empty_notebook": (nbformat.v4.new_notebook(metadata={"torchcontracts": {"lab": LAB}}),
                           Expect({t: (0.0, "empty notebook: it has no cells; submit the lab notebook you worked in")
                                   for t in TASKS})),
        "empty_file": ("", Expect({t: (0.0, "empty file: the submission has no content; download the notebook "
                                             "again from Jupyter") for t in TASKS})),
        "other_lab": (other, Expect({t: (0.0, f"wrong lab: this is the notebook of lab02_autograd, expected {LAB}")
                                     for t in TASKS})),
    }


def _blank_source(task: str) -> str:
    return next(c.source for c in _blank().cells if _role(c) == "solution" and _task(c) == task)


def build(folder: Path) -> dict[str, Expect]:
    """Write every submission as ``folder/<name>.ipynb``; return the expected grades by file name."""
    folder.mkdir(parents=True, exist_ok=True)
    expected = {}
    for name, (nb, expect) in cases().items():
        path = folder / f"{name}.ipynb"
        path.write_text(nb if isinstance(nb, str) else nbformat.writes(copy.deepcopy(nb)), encoding="utf-8")
        expected[path.name] = expect
    return expected
