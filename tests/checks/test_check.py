"""compare() and LabSpec give trustworthy one-line feedback and never crash on odd answers."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from torchcontracts.checks import Case, Check, Comparison, LabSpec, Task, compare


def test_compare_reports_exact_close_and_wrong():
    x = torch.arange(6.0)
    assert compare("a", x.clone(), x).status == "exact"
    assert compare("b", x + 1e-7, x, atol=1e-6).status == "close"
    wrong = compare("c", x + 1, x)
    assert not wrong.ok and wrong.max_abs_diff == 1.0 and "values differ" in wrong.line()


@pytest.mark.parametrize(
    "answer, reason",
    [
        (None, "expected a torch.Tensor"),
        ([1, 2], "expected a torch.Tensor"),
        (torch.zeros(2, 3), "wrong shape"),
        (torch.arange(6), "wrong dtype"),
        (torch.full((6,), float("nan")), "NaN"),
    ],
)
def test_compare_names_what_is_wrong_without_raising(answer, reason):
    row = compare("ans", answer, torch.arange(6.0))
    assert not row.ok and reason in row.status


def test_compare_demands_a_view_when_asked():
    x = torch.arange(12.0).reshape(3, 4)
    assert compare("v", x.T, x.T, view_of=x).ok
    row = compare("c", x.T.contiguous(), x.T, view_of=x)
    assert not row.ok and "copy" in row.status


def test_compare_checks_strides_only_when_asked():
    x = torch.arange(12.0).reshape(3, 4)
    assert compare("s", x.T, x.T.contiguous()).ok
    assert compare("s", x.T, x.T.contiguous(), check_strides=True).status == "wrong strides"


def _spec() -> LabSpec:
    def cases(seed):
        g = torch.Generator().manual_seed(seed)
        return [Case("random", (torch.randn(4, generator=g),))]

    def judge(case, out):
        return [compare("double", out, case.args[0] * 2)]

    return LabSpec(
        "labXX_demo", "demo", [Task("t1", "double it", 1, "double")], [Check("t1", "t1 public", cases, judge)]
    )


def test_labspec_check_passes_right_answer_and_explains_wrong_ones(capsys):
    spec = _spec()

    def double(x):
        return x * 2

    assert spec.check(double) is True

    def double(x):  # noqa: F811 - a wrong answer under the same name
        return x + x + 1

    assert spec.check(double) is False
    assert "values differ" in capsys.readouterr().out


def test_labspec_reports_not_implemented_and_exceptions_in_one_line():
    spec = _spec()

    def double(x):
        raise NotImplementedError

    assert "not implemented" in spec.run(double)[0].reason

    def double(x):  # noqa: F811
        return x.nope

    reason = spec.run(double)[0].reason
    assert reason.startswith("`double` raised AttributeError") and "\n" not in reason


def test_judge_that_crashes_becomes_a_failed_row_not_a_crash():
    spec = _spec()
    bad = spec.bind(Check("t1", "t1 bad judge", spec.checks[0].cases, lambda c, o: [1 / 0]))
    outcome = bad.run_local(lambda x: x)
    assert not outcome.ok and "could not be judged" in outcome.reason


def test_hidden_checks_register_and_verify_but_not_while_grading():
    spec = _spec()
    hidden = Check("t1", "t1 hidden", spec.checks[0].cases, lambda c, o: [compare("d", o, c.args[0] * 2)], hidden=True)
    spec.add_hidden(hidden)
    spec.verify_hidden({"double": lambda x: x * 2})
    with pytest.raises(AssertionError, match="hidden checks fail"):
        spec.verify_hidden({"double": lambda x: x})
    spec.verify_hidden({"__grading__": True})
    with pytest.raises(ValueError):
        spec.add_hidden(spec.checks[0])
    assert math.isclose(spec.total_points, 1)


def test_failing_rows_and_reasons_say_expected_and_got():
    x = torch.arange(6.0)
    assert "expected shape (6,), got shape (2, 3)" in compare("s", x.reshape(2, 3), x).line()
    assert "expected float32, got int64" in compare("d", torch.arange(6), x).line()
    row = compare("v", x + 1, x)
    assert row.detail() == "expected [0, 1, 2, 3, 4, 5], got [1, 2, 3, 4, 5, 6]"
    assert compare("ok", x.clone(), x).detail() == "", "a passing row shows no expected value"
    long = compare("l", torch.arange(1000.0) + 0.5, torch.arange(1000.0))
    assert long.expected == "[0, 1, 2, 3, 4, 5, ...]" and len(long.line()) < 200
    late = compare("late", torch.arange(100.0).index_fill(0, torch.tensor([50]), -1.0), torch.arange(100.0))
    assert late.detail() == "expected [..., 49, 50, 51, 52, 53, 54, ...], got [..., 49, -1, 51, 52, 53, 54, ...]"
    plain = Comparison.plain("n", False, "wrong count", expected=3, got="x" * 500)
    assert plain.detail().startswith("expected 3, got xxx") and len(plain.line()) < 200
    spec = _spec()

    def double(x):
        return x * 3

    reason = spec.run(double)[0].reason
    assert reason.startswith("random: double: values differ: expected [") and ", got [" in reason


def test_a_check_takes_its_target_from_its_task():
    spec = _spec()
    assert spec.checks[0].target == "double"
    legacy = Check("t1", "t1 legacy", "double", spec.checks[0].cases, spec.checks[0].judge, hidden=True)
    spec.add_hidden(legacy)
    assert spec.checks_for("t1", hidden=True)[0].target == "double"


@pytest.mark.parametrize(
    "check, message",
    [
        (Check("t9", "t9 stray", lambda s: [], lambda c, o: []), "names unknown task 't9'"),
        (
            Check("t1", "t1 other", "triple", lambda s: [], lambda c, o: []),
            "targets `triple`, but task t1 asks for `double`",
        ),
    ],
)
def test_labspec_rejects_a_check_whose_task_or_target_is_wrong(check, message):
    with pytest.raises(ValueError, match=message):
        LabSpec("labXX_demo", "demo", [Task("t1", "double it", 1, "double")], [check])
    with pytest.raises(ValueError, match=message):
        _spec().add_hidden(dataclasses.replace(check, hidden=True))
