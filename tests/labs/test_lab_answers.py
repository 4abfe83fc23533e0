"""No student notebook imports or states an answer (issue 24, item 3).

The student lab (``labs/labNN_*.ipynb``) is read, never run, and compared with its reference (``solutions/``):

1. **Answer names.** ``ANSWERS`` (below) declares each lab's ``ANSWER_NAMES = {task: (name, ...)}``: the functions, classes
   or course helpers a task asks the learner to find (torchao's ``quantize_`` for lab 06's t4, the allocator model's
   ``model_answer`` for lab 03's t3). No cell of the student lab may import or name one of them.
2. **Imports that only serve the answer**, found without any declaration: a name a course cell of the student lab
   binds with ``from ... import name``, that the reference's answer code (between its ``### BEGIN SOLUTION`` and
   ``### END SOLUTION`` markers) uses, and that the student lab neither uses in its own code nor names in its text.
   Such an import tells the learner which API answers the task; a name the task's text hands over (``Dim``,
   ``checkpoint``, ``DistributedSampler``) is no leak.
3. **Answer text.** ``ANSWERS`` declares each lab's ``ANSWER_TEXT = {task: (snippet, ...)}``: key expressions of the
   reference answer (lab 07's t1 weight ``world_size / n_global``). Each must appear in the reference's answer code,
   so the declaration cannot go stale, and none may appear, whitespace ignored, in any cell of the student lab.

The last test plants leaks in a copy of a student lab and shows the checker reports each of them.
"""

from __future__ import annotations

import ast
import importlib
import re
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat
import pytest

from conftest import ROOT, read
from torchcontracts.course import lab_ids, package_of_lab
from torchcontracts.grading.hidden import GRADER_ONLY
from torchcontracts.labs.format import BEGIN_SOLUTION, END_SOLUTION, ROLE_SOLUTION, cell_meta


# What each lab's learner must find, by lab and task: (ANSWER_NAMES, ANSWER_TEXT). Kept here, in the tests, and
# not in the lab's module: the package is importable in the learner's kernel, and this data states the answers.
ANSWERS: dict[str, tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]] = {
    "lab01_strides": (
        {},
        {
            "t1": ("max(n, 1)",),
            "t2": ("if 0 in shape",),
            "t3": ("(step * s, s)",),
            "t4": ("(sc, sh, sw, sh, sw)",),
            "t5": ("x.stride(0) + x.stride(1)",),
        },
    ),
    "lab02_autograd": (
        {},
        {
            "t1": ("grad_out @ w", ".T @ x"),
            "t2": ("(x - out.unsqueeze(ctx.dim)).exp()",),
            "t3": ("grad_out.clamp(-ctx.bound, ctx.bound)",),
            "t4": ("(x.abs() <= 1)",),
            "t5": ("grad_out * torch.sigmoid(x)",),
            "t6": ("h.remove()",),
        },
    ),
    "lab03_memory": (
        {"t3": ("model_answer",)},
        {
            "t1": ("checkpoint(model[:half], x, use_reentrant=False)",),
            "t2": ("(pred - y).abs().max().item()",),
            "t3": ("20 * MiB + 500 * KiB", "(40 * MiB, 24 * MiB)"),
        },
    ),
    "lab04_timing": (
        {},
        {
            "t1": ("statistics.quantiles(times, n=4",),
            "t2": ("(h + 2 * padding - kh) // stride + 1",),
            "t3": ("min(peak, bandwidth * i)",),
            "t4": ("per_call(fn_b) / per_call(fn_a)",),
        },
    ),
    "lab05_reproducible_training": (
        {},
        {
            "t1": ("(xs.shape[0] / n)",),
            "t2": ("scaler.get_scale() >= before",),
            "t3": ("dataset.rng = random.Random(seed)",),
            "t4": ('torch.set_rng_state(ckpt["rng"])',),
        },
    ),
    "lab06_deployment": (
        {"t4": ("quantize_", "Int8WeightOnlyConfig", "Int8DynamicActivationInt8WeightConfig")},
        {
            "t1": ('self.register_buffer("offset"',),
            "t2": ('dynamic_shapes={"x": {0: Dim("batch")}}',),
            "t3": ("dynamo=True, opset_version=18",),
            "t4": ("quantize_(model, Int8WeightOnlyConfig())",),
        },
    ),
    "lab07_ddp": (
        {},
        {
            "t1": ("world_size / n_global",),
            "t2": ("sampler.set_epoch(epoch)",),
            "t3": ("(F.mse_loss(ddp_model(x), y) / k)",),
        },
    ),
}


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _answer_blocks(source: str) -> list[str]:
    """The code between each pair of solution markers of a graded cell, dedented."""
    blocks, current = [], None
    for line in source.splitlines():
        if line.strip() == BEGIN_SOLUTION:
            current = []
        elif line.strip() == END_SOLUTION:
            blocks.append(textwrap.dedent("\n".join(current or [])))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def answer_code(reference: Any) -> dict[str, str]:
    """task -> the reference's answer code (what the builder removes from the student lab)."""
    code: dict[str, list[str]] = {}
    for cell in reference.cells:
        meta = cell_meta(cell)
        if meta.get("role") == ROLE_SOLUTION:
            code.setdefault(str(meta.get("task", "")), []).extend(_answer_blocks(cell.source))
    return {task: "\n".join(blocks) for task, blocks in code.items()}


def _tree(source: str) -> ast.AST | None:
    try:
        return ast.parse(source)
    except SyntaxError:  # an IPython magic, or an answer block that is not a statement list on its own
        return None


def _names_used(source: str) -> set[str]:
    """Every name the code reads or writes, and every attribute it takes (``quantize_`` in ``torchao.quantize_``)."""
    tree = _tree(source)
    if tree is None:
        return set(re.findall(r"[A-Za-z_]\w*", source))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


def _imports(source: str) -> dict[str, str]:
    """name bound by an import statement -> 'from module import name' or 'import module' (as written)."""
    tree = _tree(source)
    bound: dict[str, str] = {}
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                bound[alias.asname or alias.name] = f"from {node.module} import {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = f"import {alias.name}"
    return bound


def _from_imports(source: str) -> set[str]:
    return {name for name, how in _imports(source).items() if how.startswith("from ")}


def _names_text(nb: Any, name: str) -> list[int]:
    """Indices of the cells whose source names ``name`` as a whole word."""
    word = re.compile(rf"(?<![\w]){re.escape(name)}(?![\w])")
    return [n for n, cell in enumerate(nb.cells) if word.search(cell.source)]


def spec_module(lab: str) -> ModuleType:
    return importlib.import_module(package_of_lab(lab))


def answer_leaks(lab: str, student: Any, reference: Any, module: ModuleType | None = None) -> list[str]:
    """One line per leak: a student-lab cell that imports or names an answer, or states an answer's text."""
    module = module or spec_module(lab)
    names, text = ANSWERS.get(lab, ({}, {}))
    leaks: list[str] = []
    code_cells = [(n, c) for n, c in enumerate(student.cells) if c.cell_type == "code"]
    # 1. declared answer names: never imported, never named
    for task, wanted in names.items():
        for name in wanted:
            for n, cell in code_cells:
                if name in _imports(cell.source):
                    leaks.append(f"labs/{lab}.ipynb cell {n} imports {name!r}, an answer to {task}")
            for n in _names_text(student, name):
                leaks.append(f"labs/{lab}.ipynb cell {n} names {name!r}, an answer to {task}")
    # 2. a course cell's `from ... import name` that only the reference's answer uses
    used_by_student = set().union(*(_names_used(c.source) for _, c in code_cells)) if code_cells else set()
    markdown = [c.source for c in student.cells if c.cell_type == "markdown"]
    for task, code in answer_code(reference).items():
        for n, cell in code_cells:
            if cell_meta(cell).get("role") == ROLE_SOLUTION:
                continue
            for name in sorted(_from_imports(cell.source) & _names_used(code)):
                named = any(re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", md) for md in markdown)
                if name not in used_by_student and not named:
                    leaks.append(
                        f"labs/{lab}.ipynb cell {n} imports {name!r}, which only the reference's answer to {task} "
                        "uses and no text of the lab names: the import gives the answer away"
                    )
    # 3. declared answer text: no cell states it
    for task, snippets in text.items():
        for snippet in snippets:
            for n, cell in enumerate(student.cells):
                if _squash(snippet) in _squash(cell.source):
                    leaks.append(f"labs/{lab}.ipynb cell {n} ({cell.cell_type}) states {task}'s answer {snippet!r}")
    return leaks


# --- the course's labs --------------------------------------------------------------------------------------------


@pytest.fixture(params=lab_ids())
def lab(request) -> str:
    return request.param


def test_each_lab_declares_its_answers(lab):
    module = spec_module(lab)
    tasks = set(module.lab.tasks)
    assert lab in ANSWERS, f"ANSWERS (in this file) declares nothing for {lab}"
    names, text = ANSWERS[lab]
    assert set(names) <= tasks and set(text) <= tasks, f"{module.__name__}: answers of unknown tasks"
    missing = sorted(tasks - {t for t, s in text.items() if s})
    assert not missing, f"{module.__name__}: no ANSWER_TEXT for {missing}: name a key expression of each answer"
    code = answer_code(read(ROOT / "solutions" / f"{lab}.ipynb"))
    for task, snippets in text.items():
        assert isinstance(snippets, tuple) and all(isinstance(s, str) and s.strip() for s in snippets)
        for snippet in snippets:  # a key expression of the reference, so that it cannot go stale
            assert _squash(snippet) in _squash(code.get(task, "")), (
                f"{module.__name__}: ANSWER_TEXT[{task!r}] {snippet!r} is not in the reference's answer to {task}"
            )
    lesson = module.__name__.rpartition(".")[0]  # a grader-only module of the lesson (lab 03's lab03_judges) counts
    helpers = [module] + [importlib.import_module(m) for m in GRADER_ONLY if m.rpartition(".")[0] == lesson]
    for task, wanted in names.items():
        assert isinstance(wanted, tuple) and wanted and all(w.isidentifier() for w in wanted)
        real = [w for w in wanted if w in _names_used(code.get(task, "")) or any(hasattr(m, w) for m in helpers)]
        assert real, (
            f"{module.__name__}: none of ANSWER_NAMES[{task!r}] {wanted} is used by the reference's answer to {task} "
            "or exported by the lab's module or a grader-only module of its lesson"
        )


def test_student_lab_imports_and_states_no_answer(lab):
    student = read(ROOT / "labs" / f"{lab}.ipynb")
    reference = read(ROOT / "solutions" / f"{lab}.ipynb")
    leaks = answer_leaks(lab, student, reference)
    assert not leaks, "\n".join(leaks)


# --- the checker can fail -----------------------------------------------------------------------------------------


def _copy(lab: str, tmp_path: Path) -> Path:
    path = tmp_path / f"{lab}.ipynb"
    nbformat.write(read(ROOT / "labs" / f"{lab}.ipynb"), path)
    return path


def _setup_cell(nb: Any) -> Any:
    return next(c for c in nb.cells if c.cell_type == "code" and not cell_meta(c).get("role"))


def _plant(lab: str, tmp_path: Path, edit) -> list[str]:
    path = _copy(lab, tmp_path)
    nb = read(path)
    assert not answer_leaks(lab, nb, read(ROOT / "solutions" / f"{lab}.ipynb")), "the copy leaks before the plant"
    edit(nb)
    nbformat.write(nb, path)
    return answer_leaks(lab, read(path), read(ROOT / "solutions" / f"{lab}.ipynb"))


def test_checker_catches_planted_leaks(tmp_path):
    # lab 06's setup cell imported torchao's answer to t4 (the leak issue 24 found)
    def import_t4(nb):
        _setup_cell(nb).source += "\nfrom torchao.quantization import Int8WeightOnlyConfig, quantize_\n"

    leaks = _plant("lab06_deployment", tmp_path, import_t4)
    assert any("imports 'quantize_', an answer to t4" in leak for leak in leaks), leaks
    assert any("imports 'Int8WeightOnlyConfig', an answer to t4" in leak for leak in leaks), leaks
    assert any("only the reference's answer to t4 uses" in leak for leak in leaks), leaks

    # lab 07's closing notes stated t1's loss weight (the other leak issue 24 found)
    def state_t1(nb):
        nb.cells[-1].source += "\n- Uneven shards need each rank's loss times `n_local * world_size / n_global`.\n"

    leaks = _plant("lab07_ddp", tmp_path, state_t1)
    assert any("(markdown) states t1's answer 'world_size / n_global'" in leak for leak in leaks), leaks

    # an import no ANSWER_NAMES declares, which only serves lab 05's t2 answer (clip_grad_norm_), is found too
    def import_clip(nb):
        _setup_cell(nb).source += "\nfrom torch.nn.utils import clip_grad_norm_\n"

    leaks = _plant("lab05_reproducible_training", tmp_path, import_clip)
    assert leaks == [leak for leak in leaks if "'clip_grad_norm_'" in leak] and len(leaks) == 1, leaks

    # ... and a course helper named in a code cell (lab 03's allocator model computes t3's answer)
    def name_model(nb):
        _setup_cell(
            nb
        ).source += "\nimport torchcontracts.lessons.l03_memory.lab03_judges as m\nprint(m.model_answer)\n"

    leaks = _plant("lab03_memory", tmp_path, name_model)
    assert any("names 'model_answer', an answer to t3" in leak for leak in leaks), leaks

    # a task's text handing over a name (lab 06's `torch.export.Dim`) is no leak: the import stays allowed
    def import_dim(nb):
        _setup_cell(nb).source += "\nfrom torch.export import Dim\n"

    assert _plant("lab06_deployment", tmp_path, import_dim) == []
