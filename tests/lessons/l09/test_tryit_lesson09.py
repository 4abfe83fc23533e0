"""Lesson 09's Try-it checkers pass the reference answers and fail the common wrong ones, with a reason.

Both checkers run the answer on a real gloo group of forked processes (``rank_runner.run_ranks``).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.distributed as dist

from torchcontracts.lessons.l09_distributed.dist_tools import live_children
from torchcontracts.lessons.l09_distributed.tryit import EXERCISES

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not dist.is_gloo_available(), reason="the checks fork a gloo group"
)


def _ok(ex_id: str, fn) -> tuple[bool, str]:
    outs = EXERCISES[ex_id].run(fn)
    return all(o.ok for o in outs), "; ".join(o.reason for o in outs)


# Reference answers: they live here only, never in the notebook.


def after_collectives(inputs):
    total = sum(inputs)
    return {
        "all_reduce": [total.clone() for _ in inputs],
        "broadcast": [inputs[0].clone() for _ in inputs],
        "all_gather": [torch.cat(inputs) for _ in inputs],
        "reduce_scatter": list(total.chunk(len(inputs))),
    }


def average_gradients(model, world_size):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world_size


@pytest.fixture(autouse=True)
def nothing_forked_is_left():
    """Every gloo worker a check forks is gone after the test (children other modules own don't count)."""
    before = set(live_children())
    yield
    assert set(live_children()) - before == set(), "a forked rank outlived its check"


def test_references_pass():
    parent, real = os.getpid(), torch.autograd.backward

    def guarded(*args, **kwargs):  # 09.2's judge must not run backward in the process that forks the ranks
        if os.getpid() == parent:
            raise AssertionError("backward() ran in the process that forks the ranks")
        return real(*args, **kwargs)

    torch.autograd.backward = guarded
    try:
        for ex_id, fn in (("09.1", after_collectives), ("09.2", average_gradients)):
            ok, reason = _ok(ex_id, fn)
            assert ok, f"{ex_id}: {reason}"
    finally:
        torch.autograd.backward = real


def _replace(**parts):
    def answer(inputs):
        out = after_collectives(inputs)
        out.update({k: f(inputs) for k, f in parts.items()})
        return out

    return answer


@pytest.mark.parametrize(
    "name, fn, words",
    [
        (
            "reduce_scatter keeps the rank's own chunk unsummed",
            _replace(reduce_scatter=lambda xs: [x.chunk(len(xs))[r] for r, x in enumerate(xs)]),
            "sum element-wise over ranks",
        ),
        (
            "all_gather stacks instead of concatenating",
            _replace(all_gather=lambda xs: [torch.stack(xs) for _ in xs]),
            "wrong shape",
        ),
        ("all_reduce averages", _replace(all_reduce=lambda xs: [sum(xs) / len(xs) for _ in xs]), "element-wise sum"),
        ("broadcast keeps each rank's own", _replace(broadcast=lambda xs: [x.clone() for x in xs]), "rank 0's tensor"),
        ("a key is missing", lambda xs: {"all_reduce": [sum(xs)] * len(xs)}, "return a dict with the keys"),
    ],
)
def test_collective_wrong_answers_fail_with_the_rule_they_broke(name, fn, words):
    ok, reason = _ok("09.1", fn)
    assert not ok and words in reason, (name, reason)


def _sum_only(model, world_size):
    for p in model.parameters():
        dist.all_reduce(p.grad)


def _divide_only(model, world_size):
    for p in model.parameters():
        p.grad /= world_size


def _max(model, world_size):
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.MAX)


@pytest.mark.parametrize(
    "fn, words",
    [
        (_sum_only, "x too large: all_reduce sums"),
        (_divide_only, "values differ"),
        (_max, "values differ"),
        (lambda model, world_size: None, "values differ"),
    ],
)
def test_gradient_averaging_wrong_answers_fail(fn, words):
    ok, reason = _ok("09.2", fn)
    assert not ok and words in reason and "\n" not in reason, reason


def test_a_stub_gets_a_nudge_not_a_traceback(capsys):
    def average_gradients(model, world_size):
        raise NotImplementedError

    assert EXERCISES["09.2"].check(average_gradients) is False
    out = capsys.readouterr().out
    assert "not implemented yet" in out and "Hint:" in out and "Traceback" not in out
