"""Lesson 00's Try-it checkers pass the reference and fail the common wrong answers, with a reason."""

from __future__ import annotations

import torch

from torchcontracts.lessons.l00_start.tryit import EXERCISES


def _ok(ex_id: str, fn) -> tuple[bool, str]:
    outs = EXERCISES[ex_id].run(fn)
    return all(o.ok for o in outs), "; ".join(o.reason for o in outs)


def shares_memory(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def really_computes(device):
    try:
        a = torch.arange(4.0, device=device)
        return float((a * a).sum().cpu()) == 14.0
    except Exception:
        return False


def test_references_pass():
    assert _ok("00.1", shares_memory)[0] and _ok("00.2", really_computes)[0]


def test_shares_memory_wrong_answers_fail_with_expected_vs_got():
    for wrong in (
        lambda a, b: a.data_ptr() == b.data_ptr(),  # x[1:] starts later in the same storage
        lambda a, b: torch.equal(a.flatten(), b.flatten()) if a.shape == b.shape else False,
        lambda a, b: a.shape == b.T.shape,
        lambda a, b: 1,
    ):  # not a bool
        ok, reason = _ok("00.1", wrong)
        assert not ok and ("expected" in reason or "bool" in reason), reason


def test_really_computes_wrong_answers_fail():
    for wrong in (
        lambda d: True,  # trusting, not proving
        lambda d: torch.ones(2, device=d).shape == (2,),  # meta tensors have shapes too
        lambda d: torch.device(d).type in ("cpu", "cuda", "meta"),
    ):
        ok, reason = _ok("00.2", wrong)
        assert not ok and "meta" in reason, reason


def test_a_stub_gets_a_nudge_not_a_traceback(capsys):
    def shares_memory(a, b):
        raise NotImplementedError

    assert EXERCISES["00.1"].check(shares_memory) is False
    out = capsys.readouterr().out
    assert "not implemented yet" in out and "Hint:" in out and "Traceback" not in out
