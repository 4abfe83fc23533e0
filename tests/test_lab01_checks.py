"""Lab 01 (strides): the reference passes every check; common wrong answers fail for the right reason.

The reference functions and the hidden checks come from ``solutions/lab01_strides.ipynb``
itself (graded cells and hidden-check cells exec'd here), so the test follows the notebook.
"""

from __future__ import annotations

import io
import math
from typing import Any, Callable

import numpy as np
import pytest
import torch

from conftest import ROOT, checks_by_task, solution_functions
from torchcontracts.check import Check
from torchcontracts.labchecks.lab01_strides import lab

SOLUTION = ROOT / "solutions" / "lab01_strides.ipynb"


@pytest.fixture(scope="module")
def ref() -> dict[str, Callable[..., Any]]:
    """The reference functions, exec'd from the solution's graded cells."""
    return solution_functions(lab.lab_id, {"torch": torch})


@pytest.fixture(scope="module")
def checks() -> dict[str, list[Check]]:
    """Public and hidden checks by task, the way the grader loads them."""
    return checks_by_task(lab.lab_id)


def _failures(checks: list[Check], fn: Callable[..., Any]) -> list[str]:
    return [o.reason for o in (c.run_local(fn, seed=12345) for c in checks) if not o.ok]


def test_every_task_has_public_and_hidden_checks(checks):
    for task, cs in checks.items():
        assert any(not c.hidden for c in cs), f"{task} has no public check"
        assert any(c.hidden for c in cs), f"{task} has no hidden check"


@pytest.mark.parametrize("task", ["t1", "t2", "t3", "t4", "t5"])
def test_reference_passes_public_and_hidden_checks(task, ref, checks):
    fn = ref[lab.tasks[task].target]
    for seed in (0, 1, 12345):
        assert [o.reason for o in (c.run_local(fn, seed) for c in checks[task]) if not o.ok] == []


def test_points_total_twelve():
    assert lab.total_points == 12


# --- common wrong answers, per task -----------------------------------------------------------

def _t1_left_to_right(shape):
    return tuple(math.prod(shape[:i]) for i in range(len(shape)))


def _t1_bytes(shape):
    out, step = [], 4
    for n in reversed(shape):
        out.insert(0, step)
        step *= max(n, 1)
    return tuple(out)


def _t1_zero_size_product(shape):
    return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))


def _t1_scalar_has_a_stride(shape):
    return tuple(torch.empty(shape).stride()) or (1,)


def _t1_numpy_ints(shape):
    return tuple(np.cumprod((1,) + tuple(max(n, 1) for n in reversed(shape[1:])))[::-1])


T1_WRONG = {
    "left-to-right products": (_t1_left_to_right, "values differ"),
    "strides in bytes": (_t1_bytes, "values differ"),
    "size-0 dim makes strides 0": (_t1_zero_size_product, "values differ"),
    "0-dim gets a stride": (_t1_scalar_has_a_stride, "wrong length"),
    "numpy ints": (_t1_numpy_ints, "Python ints"),
}


def _t2_equals_fresh(shape, strides):
    return tuple(strides) == tuple(torch.empty(shape).stride())


def _t2_ignores_empty(shape, strides):
    expected = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expected:
            return False
        expected *= n if n != 1 else 1
    return True


def _t2_non_increasing(shape, strides):
    return all(a >= b for a, b in zip(strides, strides[1:])) and (not strides or strides[-1] == 1)


def _t2_tensor_answer(shape, strides):
    return torch.tensor(_t2_equals_fresh(shape, strides))


T2_WRONG = {
    "compares with fresh strides": (_t2_equals_fresh, "torch says True"),
    "forgets empty tensors": (_t2_ignores_empty, "torch says True"),
    "strides merely decrease": (_t2_non_increasing, "torch says False"),
    "returns a tensor": (_t2_tensor_answer, "expected a Python bool"),
}


def _n(x, size, step):
    return (x.shape[0] - size) // step + 1


T3_WRONG = {
    "assumes stride 1": (lambda x, size, step: x.as_strided((_n(x, size, step), size), (step, 1)), "values differ"),
    "storage_offset 0": (lambda x, size, step: x.as_strided((_n(x, size, step), size), (step * x.stride(0), x.stride(0)), 0),
                         "values differ"),
    "a copy": (lambda x, size, step: x.unfold(0, size, step).clone(), "copy"),
    "stacked slices": (lambda x, size, step: torch.stack([x[i * step:i * step + size] for i in range(_n(x, size, step))]),
                       "copy"),
    "one window short": (lambda x, size, step: x.unfold(0, size, step)[:-1], "wrong shape"),
}


def _t4_assumes_contiguous(x, k):
    C, H, W = x.shape
    return x.as_strided((C, H - k + 1, W - k + 1, k, k), (H * W, W, 1, W, 1))


def _t4_swapped_patch_axes(x, k):
    C, H, W = x.shape
    sc, sh, sw = x.stride()
    return x.as_strided((C, H - k + 1, W - k + 1, k, k), (sc, sh, sw, sw, sh), x.storage_offset())


def _t4_no_offset(x, k):
    C, H, W = x.shape
    return x.as_strided((C, H - k + 1, W - k + 1, k, k), (*x.stride(), x.stride(1), x.stride(2)), 0)


T4_WRONG = {
    "assumes contiguous input": (_t4_assumes_contiguous, "values differ"),
    "patch axes swapped": (_t4_swapped_patch_axes, "values differ"),
    "storage_offset 0": (_t4_no_offset, "values differ"),
    "a copy": (lambda x, k: x.unfold(1, k, 1).unfold(2, k, 1).contiguous(), "copy"),
    "returns None": (lambda x, k: None, "expected a torch.Tensor"),
}

T5_WRONG = {
    "stride n + 1": (lambda x: x.as_strided((x.shape[0],), (x.shape[0] + 1,)), ("values differ", "out of bounds")),
    "stride(0) + 1": (lambda x: x.as_strided((x.shape[0],), (x.stride(0) + 1,)), "values differ"),
    "storage_offset 0": (lambda x: x.as_strided((x.shape[0],), (x.stride(0) + x.stride(1),), 0), "values differ"),
    "torch.diag copies": (lambda x: torch.diag(x), "copy"),
    "a list": (lambda x: torch.diagonal(x).tolist(), "expected a torch.Tensor"),
}

WRONG = {"t1": T1_WRONG, "t2": T2_WRONG, "t3": T3_WRONG, "t4": T4_WRONG, "t5": T5_WRONG}


@pytest.mark.parametrize("task,name", [(t, n) for t, ws in WRONG.items() for n in ws],
                         ids=lambda v: str(v).replace(" ", "-"))
def test_common_wrong_answer_fails_with_its_reason(task, name, checks):
    fn, reasons = WRONG[task][name]
    reasons = (reasons,) if isinstance(reasons, str) else reasons
    fails = _failures(checks[task], fn)
    assert fails, f"{task}: the wrong answer '{name}' passes every check"
    assert any(r in f for f in fails for r in reasons), f"{task} '{name}': expected one of {reasons} in {fails}"


@pytest.mark.parametrize("task", ["t1", "t2", "t3", "t4", "t5"])
@pytest.mark.parametrize("odd", [None, "strides", 3.5, [[1, 2]], torch.zeros(2, 2)], ids=repr)
def test_judges_never_raise_on_odd_answers(task, odd, checks):
    for c in checks[task]:
        for case in c.cases(0):
            rows = list(c.judge(case, odd))
            assert rows and not rows[0].ok
            assert "could not be judged" not in rows[0].status


def test_not_implemented_stub_reports_not_implemented(checks):
    def stub(*args):
        raise NotImplementedError("Task t3")

    outcome = checks["t3"][0].run_local(stub)
    assert not outcome.ok and "not implemented yet" in outcome.reason


@pytest.mark.parametrize("task", ["t1", "t2", "t3", "t4", "t5"])
def test_cases_survive_the_graders_weights_only_round_trip(task, ref, checks):
    """The grader saves (args, output) with torch.save and judges after a weights_only load."""
    fn = ref[lab.tasks[task].target]
    for c in checks[task]:
        for case in c.cases(7):
            buf = io.BytesIO()
            torch.save({"args": case.args, "out": fn(*case.args)}, buf)
            buf.seek(0)
            back = torch.load(buf, weights_only=True)
            shipped = type(case)(case.label, tuple(back["args"]))
            assert all(r.ok for r in c.judge(shipped, back["out"])), f"{c.name} / {case.label} fails after a round trip"


def test_cases_are_deterministic_for_a_seed(checks):
    for cs in checks.values():
        for c in cs:
            a, b = c.cases(3), c.cases(3)
            for x, y in zip(a, b):
                assert x.label == y.label
                for u, v in zip(x.args, y.args):
                    assert (torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v)


def test_hidden_checks_stay_out_of_the_lab_and_the_package():
    needles = ["lab.add_hidden(", "t1_hidden_cases", "t3_hidden_cases", "base[3::2] (stride 2"]
    lab_text = (ROOT / "labs" / "lab01_strides.ipynb").read_text(encoding="utf-8")
    pkg_text = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "helpers" / "torchcontracts" / "labchecks").rglob("*.py"))
    for needle in needles:
        assert needle not in lab_text, f"labs/lab01_strides.ipynb leaks {needle!r}"
        assert needle not in pkg_text, f"the package leaks {needle!r}"
