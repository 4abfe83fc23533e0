"""Lesson 06's Try-it checkers pass the reference answers and fail the common wrong ones, with a reason."""

from __future__ import annotations

import torch

from torchcontracts.lessons.l06_training.tryit import EXERCISES, EXPRESSIONS


def _ok(ex_id: str, fn) -> tuple[bool, str]:
    outs = EXERCISES[ex_id].run(fn)
    return all(o.ok for o in outs), "; ".join(o.reason for o in outs)


# Reference answers: they live here only, never in the notebook.


def running_stats(batches, momentum, unbiased=True, momentum_on_new=True):
    mean, var = torch.zeros(batches[0].shape[1]), torch.ones(batches[0].shape[1])
    for k, b in enumerate(batches, start=1):
        m = 1.0 / k if momentum is None else momentum
        if not momentum_on_new:
            m = 1 - m
        mean = (1 - m) * mean + m * b.mean(0)
        var = (1 - m) * var + m * b.var(0, unbiased=unbiased)
    return mean, var


def autocast_dtypes():
    bf16, fp32 = torch.bfloat16, torch.float32
    return {
        "a @ b": bf16,
        "torch.softmax(a @ b, dim=1)": bf16,
        "torch.softmax(a, dim=1)": fp32,
        "F.mse_loss(a @ b, b)": fp32,
        "(a @ b) + a": fp32,
        "torch.cat([a @ b, a])": fp32,
        "(a @ b).sum()": bf16,
        "F.relu(a @ b)": bf16,
    }


def scale_after(found_inf, init_scale, growth_interval, reset_on_inf=True, grow_every_step=False):
    scale, clean = init_scale, 0
    for inf in found_inf:
        if inf:
            scale *= 0.5
            clean = 0 if reset_on_inf else clean
        else:
            clean += 1
            if grow_every_step or clean == growth_interval:
                scale, clean = scale * 2.0, 0
    return scale


def test_references_pass():
    for ex_id, fn in (("06.1", running_stats), ("06.2", autocast_dtypes), ("06.3", scale_after)):
        ok, reason = _ok(ex_id, fn)
        assert ok, f"{ex_id}: {reason}"


def test_running_stats_wrong_answers_fail_with_a_named_mistake():
    ok, reason = _ok("06.1", lambda b, m: running_stats(b, m, unbiased=False))
    assert not ok and "unbiased variance" in reason, reason
    ok, reason = _ok("06.1", lambda b, m: running_stats(b, m, momentum_on_new=False))
    assert not ok and "expected" in reason, reason
    ok, reason = _ok("06.1", lambda b, m: running_stats(b, 0.1 if m is None else m))  # ignores momentum=None
    assert not ok and "momentum None" in reason, reason
    ok, reason = _ok("06.1", lambda b, m: (torch.stack(b).mean((0, 1)), torch.stack(b).var((0, 1))))  # the data's stats
    assert not ok, reason


def test_autocast_dtypes_wrong_answers_fail_per_expression():
    everything_bf16 = {k: torch.bfloat16 for k in EXPRESSIONS}
    ok, reason = _ok("06.2", lambda: everything_bf16)
    assert not ok and "wrong dtype" in reason and "float32" in reason, reason
    softmax_fp32 = {**autocast_dtypes(), "torch.softmax(a @ b, dim=1)": torch.float32}  # CUDA's policy, not the CPU's
    ok, reason = _ok("06.2", lambda: softmax_fp32)
    assert not ok and "softmax(a @ b" in reason, reason
    as_strings = {k: str(v) for k, v in autocast_dtypes().items()}  # "torch.bfloat16" is accepted
    assert _ok("06.2", lambda: as_strings)[0]
    ok, reason = _ok("06.2", lambda: None)
    assert not ok and "return a dict" in reason, reason


def test_scale_after_wrong_answers_fail():
    for wrong in (
        lambda f, s, g: scale_after(f, s, g, reset_on_inf=False),
        lambda f, s, g: scale_after(f, s, g, grow_every_step=True),
        lambda f, s, g: s,
    ):
        ok, reason = _ok("06.3", wrong)
        assert not ok and "wrong scale" in reason and "expected" in reason, reason
    ok, reason = _ok("06.3", lambda f, s, g: "big")
    assert not ok and "as a float" in reason, reason


def test_a_stub_gets_a_nudge_not_a_traceback(capsys):
    def scale_after(found_inf, init_scale, growth_interval):
        raise NotImplementedError

    assert EXERCISES["06.3"].check(scale_after) is False
    out = capsys.readouterr().out
    assert "not implemented yet" in out and "Hint:" in out and "Traceback" not in out
