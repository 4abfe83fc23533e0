"""Instant feedback for labs: one definition per check, run here in the notebook or by the grader.

A lab's checks are plain data (``Check``): a deterministic input generator and a judge.
The notebook runs them in-process for instant feedback (``LabSpec.check``); the grader
runs the *same* objects, but calls the student's function in the student's kernel and
judges the saved outputs in its own, untouched process.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, Sequence

import torch

__all__ = [
    "Case",
    "Check",
    "CheckOutcome",
    "Comparison",
    "LabSpec",
    "Task",
    "compare",
    "shares_storage",
]

Args = tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One row of feedback, in the spirit of Karpathy's ``cmp``: what differs, on one line."""

    name: str
    ok: bool
    shape: str
    dtype: str
    strides: str
    max_abs_diff: float
    status: str  # "exact", "close", or what is wrong

    @classmethod
    def plain(cls, name: str, ok: bool, status: str, *, shape: str = "-", dtype: str = "-",
              strides: str = "-", diff: float = math.nan) -> "Comparison":
        """A row for an answer that is not a tensor (a bool, a count, a dict) or for a failure with no values."""
        return cls(name, ok, shape, dtype, strides, diff, status)

    def line(self) -> str:
        mark = "PASS" if self.ok else "FAIL"
        diff = "-" if math.isnan(self.max_abs_diff) else f"{self.max_abs_diff:.3g}"
        return (
            f"{mark} {self.name}: {self.status} | shape {self.shape} | dtype {self.dtype}"
            f" | strides {self.strides} | max|diff| {diff}"
        )


def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when both tensors look into the same storage (a zero-copy view)."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _fmt(x: Any) -> str:
    return str(tuple(x)) if isinstance(x, (torch.Size, tuple, list)) else str(x)


def compare(
    name: str,
    actual: Any,
    expected: torch.Tensor,
    *,
    atol: float = 0.0,
    rtol: float = 0.0,
    check_dtype: bool = True,
    check_strides: bool = False,
    view_of: torch.Tensor | None = None,
) -> Comparison:
    """Compare a learner's tensor with the expected one, never raising on odd input.

    ``view_of`` demands a zero-copy answer: ``actual`` must share storage with it.
    """
    if not isinstance(actual, torch.Tensor):
        return Comparison.plain(name, False,
                                f"expected a torch.Tensor, got {type(actual).__name__}")
    shape = _fmt(actual.shape) if actual.shape == expected.shape else \
        f"{_fmt(actual.shape)} != {_fmt(expected.shape)}"
    dtype = str(actual.dtype).replace("torch.", "")
    if actual.dtype != expected.dtype:
        dtype += f" != {str(expected.dtype).replace('torch.', '')}"
    strides = _fmt(actual.stride())
    if actual.shape != expected.shape:
        return Comparison(name, False, shape, dtype, strides, math.nan, "wrong shape")
    if check_dtype and actual.dtype != expected.dtype:
        return Comparison(name, False, shape, dtype, strides, math.nan, "wrong dtype")
    if check_strides and actual.stride() != expected.stride():
        strides += f" != {_fmt(expected.stride())}"
        return Comparison(name, False, shape, dtype, strides, math.nan, "wrong strides")
    if actual.device != expected.device:
        actual = actual.to(expected.device)
    try:
        a = actual.detach().to(torch.float64) if actual.dtype != torch.bool else actual.detach()
        e = expected.detach().to(a.dtype)
        diff = float((a.to(torch.float64) - e.to(torch.float64)).abs().max()) if a.numel() else 0.0
        exact = bool(torch.equal(a, e))
    except RuntimeError as err:  # e.g. a meta tensor or a sparse layout
        return Comparison(name, False, shape, dtype, strides, math.nan, f"cannot compare: {err}"[:120])
    if math.isnan(diff) and not exact:
        status, ok = "contains NaN", False
    elif exact:
        status, ok = "exact", True
    elif torch.allclose(a.to(torch.float64), e.to(torch.float64), atol=atol, rtol=rtol) and (atol or rtol):
        status, ok = "close", True
    else:
        status, ok = "values differ", False
    if ok and view_of is not None and not shares_storage(actual, view_of):
        status, ok = "values right, but it is a copy: return a view of the input", False
    return Comparison(name, ok, shape, dtype, strides, diff, status)


@dataclasses.dataclass(frozen=True)
class Case:
    """One call of the learner's function: ``fn(*args)``. ``label`` says what is special."""

    label: str
    args: Args


@dataclasses.dataclass(frozen=True)
class CheckOutcome:
    """The result of one check: pass/fail, a one-line reason, and the feedback rows."""

    check: str
    task: str
    ok: bool
    reason: str
    rows: tuple[Comparison, ...] = ()


Judge = Callable[[Case, Any], Sequence[Comparison]]


@dataclasses.dataclass(frozen=True)
class Check:
    """A check of one learner function on generated inputs.

    ``cases(seed)`` must be deterministic for a seed, build inputs with plain torch,
    and return only tensors, numbers, tuples, lists, dicts and strings, so the grader
    can ship them with ``torch.save`` and load them with ``weights_only=True``.
    ``judge(case, output)`` compares one output and returns feedback rows; it runs in
    the grader's own process, so it must not call the learner's code.

    ``call(fn, case)`` says how to call the learner's function when ``fn(*case.args)`` is
    not enough (e.g. run backward and return the gradients too). It runs next to the
    learner's code, so it must be a module-level function of the lab's ``labchecks``
    module: the grader imports it by name in the learner's kernel. ``fresh_kernel=True``
    marks checks that measure inside a process (memory, time): the grader runs them in a
    new kernel that imports the labchecks module before any learner code runs.
    """

    task: str
    name: str
    target: str
    cases: Callable[[int], list[Case]]
    judge: Judge
    hidden: bool = False
    call: Callable[[Callable[..., Any], Case], Any] | None = None
    fresh_kernel: bool = False

    def invoke(self, fn: Callable[..., Any], case: Case) -> Any:
        """Call the learner's function on one case, the way this check needs."""
        return self.call(fn, case) if self.call is not None else fn(*case.args)

    def run_local(self, fn: Callable[..., Any], seed: int = 0) -> CheckOutcome:
        """Call ``fn`` here and judge it: the notebook's instant feedback."""
        rows: list[Comparison] = []
        for case in self.cases(seed):
            try:
                out = self.invoke(fn, case)
            except NotImplementedError:
                return CheckOutcome(self.name, self.task, False,
                                    f"`{self.target}` is not implemented yet: replace the `raise NotImplementedError`")
            except Exception as err:  # the learner's bug, reported in one line
                return CheckOutcome(self.name, self.task, False,
                                    f"`{self.target}` raised {type(err).__name__}: {str(err)[:160]} (case: {case.label})")
            rows.extend(_safe_judge(self.judge, case, out))
        return outcome_from_rows(self, rows)


def _safe_judge(judge: Judge, case: Case, out: Any) -> list[Comparison]:
    try:
        rows = list(judge(case, out))
    except Exception as err:  # a judge must never crash on an odd answer
        rows = [Comparison.plain(case.label, False,
                                 f"answer could not be judged: {type(err).__name__}: {str(err)[:120]}")]
    return [dataclasses.replace(r, name=f"{case.label}: {r.name}" if r.name else case.label) for r in rows]


def outcome_from_rows(check: Check, rows: Sequence[Comparison]) -> CheckOutcome:
    """Fold feedback rows into one outcome whose reason names the first failure."""
    bad = [r for r in rows if not r.ok]
    if not rows:
        return CheckOutcome(check.name, check.task, False, "no output was judged", ())
    reason = "all cases pass" if not bad else f"{bad[0].name}: {bad[0].status}"
    return CheckOutcome(check.name, check.task, not bad, reason, tuple(rows))


@dataclasses.dataclass(frozen=True)
class Task:
    """A graded task of a lab: its id (``t1``), title, points and the function it asks for."""

    id: str
    title: str
    points: float
    target: str


class LabSpec:
    """The tasks and public checks of one lab; hidden checks are added from the solutions."""

    def __init__(self, lab_id: str, title: str, tasks: Sequence[Task], checks: Sequence[Check]):
        self.lab_id = lab_id
        self.title = title
        self.tasks = {t.id: t for t in tasks}
        self.checks: list[Check] = list(checks)
        unknown = {c.task for c in checks} - set(self.tasks)
        if unknown:
            raise ValueError(f"{lab_id}: checks name unknown tasks {sorted(unknown)}")

    @property
    def total_points(self) -> float:
        return sum(t.points for t in self.tasks.values())

    def checks_for(self, task: str, *, hidden: bool | None = None) -> list[Check]:
        return [c for c in self.checks if c.task == task and (hidden is None or c.hidden == hidden)]

    def task_for(self, fn_or_name: Callable[..., Any] | str) -> Task:
        name = fn_or_name if isinstance(fn_or_name, str) else getattr(fn_or_name, "__name__", "")
        for task in self.tasks.values():
            if task.target == name or task.id == name:
                return task
        raise KeyError(f"{self.lab_id} has no task for `{name}`; tasks ask for: "
                       + ", ".join(t.target for t in self.tasks.values()))

    def add_hidden(self, *checks: Check) -> None:
        """Register hidden checks (called from the solution notebook's hidden cells)."""
        for c in checks:
            if not c.hidden:
                raise ValueError(f"{c.name}: a check added with add_hidden must have hidden=True")
            if c.task not in self.tasks:
                raise ValueError(f"{c.name}: unknown task {c.task}")
            self.checks = [old for old in self.checks if old.name != c.name] + [c]

    def run(self, fn: Callable[..., Any], *, hidden: bool = False, seed: int = 0) -> list[CheckOutcome]:
        """Run the public (or, with ``hidden=True``, the hidden) checks of ``fn``'s task."""
        task = self.task_for(fn)
        return [c.run_local(fn, seed) for c in self.checks_for(task.id, hidden=hidden)]

    def check(self, fn: Callable[..., Any], *, seed: int = 0) -> bool:
        """Instant feedback: run the public checks of ``fn``'s task and show a diff table."""
        try:
            task = self.task_for(fn)
        except KeyError as err:
            print(f"check: {err.args[0]}")
            return False
        outcomes = self.run(fn, seed=seed)
        show_outcomes(task, outcomes)
        return all(o.ok for o in outcomes)

    def verify_hidden(self, namespace: Mapping[str, Any]) -> None:
        """Assert that the reference solution passes every hidden check (solutions only).

        The grader execs hidden-check cells with ``__grading__ = True``; then this does nothing.
        """
        if namespace.get("__grading__"):
            return
        failures = []
        for task in self.tasks.values():
            fn = namespace.get(task.target)
            for c in self.checks_for(task.id, hidden=True):
                o = c.run_local(fn, seed=12345) if fn else None
                if o is None or not o.ok:
                    failures.append(f"{c.name}: {o.reason if o else 'function missing'}")
        assert not failures, "hidden checks fail on the reference: " + "; ".join(failures)


def show_outcomes(task: Task, outcomes: Sequence[CheckOutcome]) -> None:
    """Print one line per check and, in a notebook, a compact table of the compared values."""
    passed = sum(o.ok for o in outcomes)
    head = f"{task.id} {task.title} [{task.points:g} pts]: {passed}/{len(outcomes)} public checks pass"
    print(head)
    for o in outcomes:
        print(f"  {'PASS' if o.ok else 'FAIL'} {o.check}: {o.reason}")
    rows = [r for o in outcomes for r in o.rows]
    if rows:
        _display_rows(rows)
    if outcomes and passed == len(outcomes):
        print("  Public checks pass. Hidden checks try other shapes and edge cases when you submit.")


def _display_rows(rows: Sequence[Comparison]) -> None:
    try:
        import pandas as pd
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - plain Python without IPython
        get_ipython = None  # type: ignore[assignment]
    if get_ipython is not None and get_ipython() is not None:
        frame = pd.DataFrame([dataclasses.asdict(r) for r in rows]).rename(columns={"max_abs_diff": "max|diff|"})
        display(frame.style.apply(
            lambda row: ["background-color: #fdd" if not row["ok"] else "" for _ in row], axis=1
        ).hide(axis="index"))
    else:
        for r in rows:
            print("    " + r.line())
