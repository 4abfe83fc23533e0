"""Lesson 01's Try-it checkers pass the reference answers and fail the common wrong ones, with a reason."""

from __future__ import annotations

import torch

from torchcontracts.lessons.l01_tensors.tryit import EXERCISES


def _ok(ex_id: str, fn) -> tuple[bool, str]:
    outs = EXERCISES[ex_id].run(fn)
    return all(o.ok for o in outs), "; ".join(o.reason for o in outs)


# Reference answers: they live here only, never in the notebook.


def element_offset(t, index):
    return t.storage_offset() + sum(i * s for i, s in zip(index, t.stride()))


def keep_small(t):
    return t.clone()


def channels_last_strides(shape):
    n, c, h, w = shape
    return (c * h * w, 1, w * c, c)


def test_references_pass():
    for ex_id, fn in (("01.1", element_offset), ("01.2", keep_small), ("01.3", channels_last_strides)):
        ok, reason = _ok(ex_id, fn)
        assert ok, f"{ex_id}: {reason}"


def test_element_offset_accepts_a_pointer_based_answer_and_an_int_tensor():
    via_ptr = lambda t, i: (t[i].data_ptr() - t.untyped_storage().data_ptr()) // t.element_size()  # noqa: E731
    as_tensor = lambda t, i: torch.tensor(element_offset(t, i))  # noqa: E731
    assert _ok("01.1", via_ptr)[0] and _ok("01.1", as_tensor)[0]


def test_element_offset_wrong_answers_fail_with_expected_vs_got():
    def row_major(t, index):  # assumes contiguous strides from the shape
        out, step = 0, 1
        for i, n in reversed(list(zip(index, t.shape))):
            out, step = out + i * step, step * n
        return out

    wrong = {
        "ignores storage_offset": lambda t, i: sum(a * s for a, s in zip(i, t.stride())),
        "row-major from the shape": row_major,
        "returns the value": lambda t, i: t[i].item(),
        "returns a float": lambda t, i: float(element_offset(t, i)),
    }
    for name, fn in wrong.items():
        ok, reason = _ok("01.1", fn)
        assert not ok and "expected" in reason, (name, reason)


def test_keep_small_wrong_answers_fail_and_say_how_many_bytes_stay():
    wrong = {
        ".contiguous() (returns the slice itself)": lambda t: t.contiguous(),
        ".detach() (a view of the same storage)": lambda t: t.detach(),
        "t[:] (a view)": lambda t: t[:],
    }
    for name, fn in wrong.items():
        ok, reason = _ok("01.2", fn)
        assert not ok and "4,000,000-byte storage" in reason and "expected" in reason, (name, reason)
    ok, reason = _ok("01.2", lambda t: t.flatten().clone())  # right bytes, wrong shape
    assert not ok and "wrong shape" in reason, reason
    ok, reason = _ok("01.2", lambda t: t.double())  # a copy, but another dtype
    assert not ok and "wrong dtype" in reason, reason


def test_channels_last_wrong_answers_fail_with_a_named_mistake():
    contiguous = lambda s: (s[1] * s[2] * s[3], s[2] * s[3], s[3], 1)  # noqa: E731
    nhwc_order = lambda s: (s[1] * s[2] * s[3], s[3] * s[1], s[1], 1)  # N, H, W, C order
    ok, reason = _ok("01.3", contiguous)
    assert not ok and "contiguous NCHW" in reason and "expected" in reason, reason
    ok, reason = _ok("01.3", nhwc_order)
    assert not ok and "N, H, W, C order" in reason, reason
    ok, reason = _ok("01.3", lambda s: None)
    assert not ok and "tuple of 4 ints" in reason, reason


def test_a_stub_gets_a_nudge_not_a_traceback(capsys):
    def keep_small(t):
        raise NotImplementedError

    assert EXERCISES["01.2"].check(keep_small) is False
    out = capsys.readouterr().out
    assert "not implemented yet" in out and "Hint:" in out and "Traceback" not in out
