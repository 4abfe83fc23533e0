"""Lesson 04's Try-it checkers pass the reference answers and fail the common wrong ones, with a reason."""

from __future__ import annotations

import pytest

from torchcontracts.lessons.l04_async.tryit import EXERCISES, SYNC_LINES


def _ok(ex_id: str, fn) -> tuple[bool, str]:
    outs = EXERCISES[ex_id].run(fn)
    return all(o.ok for o in outs), "; ".join(o.reason for o in outs)


# Reference answers: they live here only, never in the notebook.


def waits_for_gpu(line: str) -> bool:
    reads_on_host = (".item()", ".cpu()", ".tolist()", "print(", "if ", "nonzero", "[x > 0]", "synchronize")
    return any(key in line for key in reads_on_host)


def bound_by(flops: float, nbytes: float, peak: float, bandwidth: float) -> tuple[str, float]:
    intensity = flops / nbytes
    return ("memory" if intensity < peak / bandwidth else "compute"), min(peak, bandwidth * intensity)


def test_references_pass():
    for ex_id, fn in (("04.1", waits_for_gpu), ("04.2", bound_by)):
        ok, reason = _ok(ex_id, fn)
        assert ok, f"{ex_id}: {reason}"


def test_the_sync_table_has_both_answers_and_a_reason_for_each():
    assert {s for _, s, _ in SYNC_LINES} == {True, False}
    assert all(why for _, _, why in SYNC_LINES)


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (lambda line: True, "queued"),  # "everything on a GPU syncs"
        (lambda line: "item" in line or "synchronize" in line, "blocking device-to-host copy"),  # only .item() syncs
        (
            lambda line: "cpu" in line or "item" in line or "synchronize" in line,
            "tolist",
        ),  # non_blocking .to('cpu') too
        (lambda line: "yes", "return True or False"),
    ],
)
def test_sync_wrong_answers_fail_and_say_why(wrong, reason):
    ok, why = _ok("04.1", wrong)
    assert not ok and reason in why, why


@pytest.mark.parametrize(
    "wrong, reason",
    [
        (lambda f, b, p, w: ("memory" if f / b < p / w else "compute", max(p, w * f / b)), "higher roof"),
        (lambda f, b, p, w: ("compute" if f / b < p / w else "memory", min(p, w * f / b)), "wrong roof"),
        (
            lambda f, b, p, w: ("memory" if b / f < p / w else "compute", min(p, w * b / f)),
            "expected",
        ),  # bytes per FLOP
        (
            lambda f, b, p, w: ("memory" if f / b <= p / w else "compute", min(p, w * f / b)),
            "ridge point",
        ),  # at the ridge
        (lambda f, b, p, w: min(p, w * f / b), "return a pair"),
    ],
)
def test_bound_wrong_answers_fail_with_expected_vs_got(wrong, reason):
    ok, why = _ok("04.2", wrong)
    assert not ok and reason in why, why


def test_a_stub_gets_a_nudge_not_a_traceback(capsys):
    def bound_by(flops, nbytes, peak, bandwidth):
        raise NotImplementedError

    assert EXERCISES["04.2"].check(bound_by) is False
    out = capsys.readouterr().out
    assert "not implemented yet" in out and "Hint:" in out and "Traceback" not in out
